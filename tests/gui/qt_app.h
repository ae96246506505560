// One QApplication for a GoogleTest program, on the offscreen platform (no display needed), and
// a wait that keeps the event loop turning until a condition holds.
#pragma once

#include <QApplication>
#include <QElapsedTimer>
#include <QTest>
#include <functional>

namespace loom::gui::testing {

inline QApplication& qt_app() {
  static int argc = 1;
  static char name[] = "loom_gui_test";
  static char* argv[] = {name, nullptr};
  static QApplication* app = [] {
    qputenv("QT_QPA_PLATFORM", "offscreen");
    return new QApplication(argc, argv);
  }();
  return *app;
}

inline bool wait_until(const std::function<bool()>& done, int timeout_ms = 60000) {
  QElapsedTimer timer;
  timer.start();
  while (!done()) {
    if (timer.elapsed() > timeout_ms) return false;
    QTest::qWait(10);
  }
  return true;
}

}  // namespace loom::gui::testing
