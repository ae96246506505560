#include "gui/models/timeline_axis.h"

#include <algorithm>
#include <cmath>

namespace loom::gui {

namespace {
constexpr double kMinWindowS = 1e-9;  // 1 ns: the simulator's resolution
}

TimelineAxis TimelineAxis::fit(double span_s, double left_px, double width_px) {
  TimelineAxis a;
  a.span_s = span_s > 0 ? span_s : 1;
  a.start_s = 0;
  a.end_s = a.span_s;
  a.left_px = left_px;
  a.width_px = std::max(1.0, width_px);
  return a;
}

void TimelineAxis::set_width(double left, double width) {
  left_px = left;
  width_px = std::max(1.0, width);
}

void TimelineAxis::zoom_at(double x_px, double factor) {
  if (!(factor > 0)) return;
  const double anchor = to_time(x_px);
  const double window = end_s - start_s;
  const double new_window = std::clamp(window / factor, std::min(kMinWindowS * width_px, span_s), span_s);
  const double fraction = (x_px - left_px) / width_px;
  start_s = anchor - fraction * new_window;
  end_s = start_s + new_window;
  clamp();
}

void TimelineAxis::pan_px(double dx_px) {
  const double shift = dx_px * seconds_per_px();
  start_s -= shift;
  end_s -= shift;
  clamp();
}

void TimelineAxis::clamp() {
  const double window = std::min(end_s - start_s, span_s);
  if (start_s < 0) start_s = 0;
  if (start_s + window > span_s) start_s = span_s - window;
  end_s = start_s + window;
}

double TimelineAxis::tick_step_s(double min_px) const {
  const double min_s = std::max(min_px, 1.0) * seconds_per_px();
  double step = std::pow(10.0, std::floor(std::log10(min_s)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (step * m >= min_s) return step * m;
  }
  return step * 10.0;
}

}  // namespace loom::gui
