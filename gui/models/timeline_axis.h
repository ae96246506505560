// The Gantt's mapping between simulated time and pixels, kept apart from painting so zoom and
// pan can be tested: a visible window [start_s, end_s] of a step [0, span_s] drawn across
// [left_px, left_px + width_px].
#pragma once

namespace loom::gui {

struct TimelineAxis {
  double span_s = 1;   // the whole step (makespan)
  double start_s = 0;  // visible window
  double end_s = 1;
  double left_px = 0;  // where the time area starts (after the row labels)
  double width_px = 1;

  static TimelineAxis fit(double span_s, double left_px, double width_px);

  double seconds_per_px() const { return (end_s - start_s) / width_px; }
  double to_px(double t_s) const { return left_px + (t_s - start_s) / seconds_per_px(); }
  double to_time(double x_px) const { return start_s + (x_px - left_px) * seconds_per_px(); }
  bool visible(double t0_s, double t1_s) const { return t1_s >= start_s && t0_s <= end_s; }

  // Zoom by `factor` (>1 zooms in) keeping the time under `x_px` under it. Never zooms in past
  // one nanosecond per pixel nor out past the whole step.
  void zoom_at(double x_px, double factor);
  // Moves the window by `dx_px` pixels of drag (positive: content moves right, earlier time shows).
  void pan_px(double dx_px);
  void set_width(double left_px, double width_px);
  void reset() { start_s = 0, end_s = span_s; }

  // A "nice" tick step (1, 2 or 5 × 10^k seconds) giving at least `min_px` between ticks.
  double tick_step_s(double min_px) const;

 private:
  void clamp();
};

}  // namespace loom::gui
