// `loom-gui --screenshot` as a program: writes a PNG of the window for the given inputs, and
// rejects bad input with one line and exit status 2, writing nothing.
#include <QImage>
#include <QProcess>
#include <QTemporaryDir>

#include <gtest/gtest.h>

#include "qt_app.h"

namespace {

struct GuiRun {
  int exit_code = -1;
  QString stderr_text;
};

GuiRun run_gui(const QStringList& args) {
  QProcess p;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert("QT_QPA_PLATFORM", "offscreen");
  p.setProcessEnvironment(env);
  p.start(LOOM_GUI_BINARY, args);
  if (!p.waitForFinished(120000)) return {};
  return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, QString::fromUtf8(p.readAllStandardError())};
}

TEST(GuiScreenshot, WritesAPngOfTheWindow) {
  loom::gui::testing::qt_app();
  QTemporaryDir dir;
  const QString png = dir.filePath("window.png");
  const GuiRun r = run_gui({"--screenshot", png, "--size", "1200x800", "--model", "llama2-7b", "--gpus", "16",
                            "--global-batch", "64", "--pp", "2,4"});
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text.toStdString();
  QImage image(png);
  ASSERT_FALSE(image.isNull());
  EXPECT_EQ(image.size(), QSize(1200, 800));
  // Not a blank window: many distinct colours (table, bars, Gantt).
  QSet<QRgb> colours;
  for (int y = 0; y < image.height(); y += 7)
    for (int x = 0; x < image.width(); x += 7) colours.insert(image.pixel(x, y));
  EXPECT_GT(colours.size(), 50);
}

TEST(GuiScreenshot, BadInputIsOneLineAndExitStatusTwo) {
  loom::gui::testing::qt_app();
  QTemporaryDir dir;
  const QString png = dir.filePath("window.png");
  const GuiRun r = run_gui({"--screenshot", png, "--model", "no-such-model", "--gpus", "16", "--global-batch", "64"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.stderr_text.contains("no-such-model")) << r.stderr_text.toStdString();
  EXPECT_FALSE(QFile::exists(png));
  const GuiRun list = run_gui({"--screenshot", png, "--gpus", "16", "--global-batch", "64", "--tp", "2,x"});
  EXPECT_EQ(list.exit_code, 2);
  EXPECT_TRUE(list.stderr_text.contains("--tp")) << list.stderr_text.toStdString();
  // Restrictions that leave no layout are found by the search, and are bad input too (`loom plan`: exit 2);
  // they exited 1 and wrote the window.
  const GuiRun none = run_gui({"--screenshot", png, "--gpus", "16", "--global-batch", "64", "--tp", "3"});
  EXPECT_EQ(none.exit_code, 2) << none.stderr_text.toStdString();
  EXPECT_TRUE(none.stderr_text.contains("no parallel layout of 16 GPUs")) << none.stderr_text.toStdString();
  EXPECT_FALSE(QFile::exists(png));
}

// Nothing fits is an answer (DESIGN.md): the window, with its rejections, is written and the exit is 0 with
// one line saying so; it exited 1, the status of Loom's own failures.
TEST(GuiScreenshot, NothingFitsIsAnAnswer) {
  loom::gui::testing::qt_app();
  QTemporaryDir dir;
  const QString png = dir.filePath("window.png");
  const GuiRun r = run_gui({"--screenshot", png, "--model", "gpt3-175b", "--gpus", "8", "--global-batch", "64"});
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text.toStdString();
  EXPECT_TRUE(r.stderr_text.contains("no configuration of gpt3-175b on 8 GPUs fits")) << r.stderr_text.toStdString();
  EXPECT_FALSE(QImage(png).isNull());
}

}  // namespace
