// loom-gui: explore parallel training configurations visually. Takes the spec flags of
// `loom plan` (and its restriction lists) as the starting inputs; `--screenshot FILE.png`
// renders the main window for those inputs once the search and the best plan's simulation are
// done, saves it, and exits (0: saved; 1: saved, but nothing fits or the search failed; 2: bad input,
// including restrictions the search finds no layout for, and nothing is written).
#include <QApplication>
#include <QImage>
#include <QSaveFile>
#include <QStyleFactory>
#include <QTabWidget>
#include <QTimer>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "gui/main_window.h"

namespace {

// loom-gui's exit statuses, as `loom`'s.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitBadInput = 2;

struct GuiFlags {
  loom::SpecInputs specs;
  loom::ConfigText config;
  std::string screenshot;
  std::string size = "1680x1050";
  int threads = 0;
  int select_rank = 1;
  std::string chart = "pareto";
  int timeout_s = 600;
};

// The spec and restriction flags of `loom plan`, from the same tables.
void add_plan_flags(CLI::App& cli, GuiFlags& flags) {
  flags.specs.model = "llama2-7b";
  flags.specs.cluster = "dgx-a100-80gb";
  flags.specs.gpus = 16;
  flags.specs.global_batch = 64;
  loom::for_each_spec_flag(flags.specs, [&](const char* flag, auto& value, const char* help, bool) {
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, bool>)
      cli.add_flag(flag, value, help);
    else
      cli.add_option(flag, value, help)->capture_default_str();
  });
  loom::for_each_config_flag(flags.config, true, [&](const char* flag, std::string& value, const std::string& help) {
    cli.add_option(flag, value, help);
  });
  loom::for_each_split_switch(flags.config, [&](const char* flag, std::string& value, const std::string& help) {
    cli.add_flag_callback(
        flag, [&value] { value = "on"; }, help);
  });
}

bool wants_screenshot(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--screenshot", 12) == 0) return true;
  return false;
}

bool save_png(const QImage& image, const QString& path) {
  QSaveFile file(path);  // written beside the target and renamed: never half a file
  if (!file.open(QIODevice::WriteOnly)) return false;
  if (!image.save(&file, "PNG")) {
    file.cancelWriting();
    return false;
  }
  return file.commit();
}

int take_screenshot(loom::gui::MainWindow& window, const GuiFlags& flags) {
  int width = 0, height = 0;
  if (std::sscanf(flags.size.c_str(), "%dx%d", &width, &height) != 2 || width < 320 || height < 240) {
    fmt::print(stderr, "loom-gui: --size: '{}' is not WIDTHxHEIGHT (at least 320x240)\n", flags.size);
    return kExitBadInput;
  }
  window.resize(width, height);
  window.chart_tabs()->setCurrentIndex(flags.chart == "heatmap" ? 1 : 0);
  window.show();
  int status = kExitOk;
  bool selected = false;
  auto finish = [&] {
    QApplication::processEvents();
    const QImage image = window.grab().toImage();
    if (!save_png(image, QString::fromStdString(flags.screenshot))) {
      fmt::print(stderr, "loom-gui: cannot write {}\n", flags.screenshot);
      status = kExitBadInput;
    }
    QApplication::exit(status);
  };
  QObject::connect(
      &window, &loom::gui::MainWindow::idle, &window,
      [&] {
        const auto& outcome = window.outcome();
        // Inputs the search finds no layout for (restrictions that leave none): bad input, as in `loom plan`,
        // so nothing is written.
        if (!outcome.ok() && outcome.bad_input) {
          fmt::print(stderr, "loom-gui: {}\n", outcome.error);
          QApplication::exit(kExitBadInput);
          return;
        }
        if (!outcome.ok()) {
          fmt::print(stderr, "loom-gui: {}\n", outcome.error);
          status = kExitFailure;
          finish();
          return;
        }
        if (outcome.result.plans.empty()) {  // an answer, as in `loom plan`: the window shows why; exit 0
          fmt::print(stderr, "loom-gui: no configuration of {} on {} GPUs fits\n", outcome.specs.model.name,
                     outcome.specs.training.gpus);
          finish();
          return;
        }
        const int wanted = std::min<int>(flags.select_rank, static_cast<int>(outcome.result.plans.size())) - 1;
        if (!selected && window.selected_plan() != wanted) {
          selected = true;
          window.select_plan(wanted);
          return;  // idle again once its simulation is shown
        }
        finish();
      },
      Qt::QueuedConnection);
  QTimer::singleShot(flags.timeout_s * 1000, &window, [&] {
    fmt::print(stderr, "loom-gui: --screenshot: the search did not finish within {} s\n", flags.timeout_s);
    QApplication::exit(kExitFailure);
  });
  loom::gui::PlanRequest request{flags.specs, flags.config, flags.threads};
  window.set_request(request);
  return QApplication::exec();
}

// In screenshot mode stderr carries only our own one-line messages; the offscreen platform's
// chatter (no XDG runtime dir, no window-manager hints) is dropped.
void quiet_platform_messages(QtMsgType type, const QMessageLogContext&, const QString& message) {
  if (type == QtDebugMsg || type == QtInfoMsg) return;
  if (message.contains("XDG_RUNTIME_DIR") || message.contains("propagateSizeHints")) return;
  fmt::print(stderr, "loom-gui: {}\n", message.toStdString());
}

}  // namespace

int main(int argc, char** argv) {
  // A screenshot needs no display; without one, render offscreen.
  if (wants_screenshot(argc, argv)) qInstallMessageHandler(quiet_platform_messages);
  if (wants_screenshot(argc, argv) && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM") &&
      qEnvironmentVariableIsEmpty("DISPLAY") && qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY"))
    qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);  // takes Qt's own options (-platform, -style) out of argv
  QApplication::setApplicationName("loom-gui");
  QApplication::setStyle(QStyleFactory::create("Fusion"));

  GuiFlags flags;
  CLI::App cli{"loom-gui: explore parallel training configurations (table, memory, pipeline Gantt, Pareto)"};
  add_plan_flags(cli, flags);
  cli.add_option("--screenshot", flags.screenshot, "render the main window for these inputs to a PNG and exit");
  cli.add_option("--size", flags.size, "window size for --screenshot, WIDTHxHEIGHT")->capture_default_str();
  cli.add_option("--select", flags.select_rank, "for --screenshot: the rank of the plan to show")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cli.add_option("--chart", flags.chart, "for --screenshot: the frontier view to show, pareto or heatmap")
      ->check(CLI::IsMember({"pareto", "heatmap"}))
      ->capture_default_str();
  cli.add_option("--threads", flags.threads, "search threads (default: all hardware threads)");
  cli.add_option("--timeout", flags.timeout_s, "for --screenshot: give up after this many seconds")
      ->capture_default_str();
  try {
    cli.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return cli.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "loom-gui: {}\n", e.what());
    return kExitBadInput;
  }
  // Bad input ends here with one line, as in `loom plan`, before any window opens.
  if (loom::Status s = loom::gui::check_request({flags.specs, flags.config, flags.threads}); !s) {
    fmt::print(stderr, "loom-gui: {}\n", s.error().message);
    return kExitBadInput;
  }

  loom::gui::MainWindow window;
  window.set_search_threads(flags.threads);
  if (!flags.screenshot.empty()) return take_screenshot(window, flags);
  window.resize(1600, 1000);
  window.show();
  window.set_request(loom::gui::PlanRequest{flags.specs, flags.config, flags.threads});
  return QApplication::exec();
}
