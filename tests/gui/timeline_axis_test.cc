#include "gui/models/timeline_axis.h"

#include <cmath>

#include <gtest/gtest.h>

namespace loom::gui {
namespace {

TEST(GuiTimelineAxis, FitMapsTheWholeStepOntoTheWidth) {
  const TimelineAxis a = TimelineAxis::fit(2.0, 100, 800);
  EXPECT_DOUBLE_EQ(a.to_px(0), 100);
  EXPECT_DOUBLE_EQ(a.to_px(2.0), 900);
  EXPECT_DOUBLE_EQ(a.to_px(0.5), 300);
  for (double x : {100.0, 317.0, 899.5}) EXPECT_NEAR(a.to_px(a.to_time(x)), x, 1e-9);
}

TEST(GuiTimelineAxis, ZoomKeepsTheTimeUnderTheCursor) {
  TimelineAxis a = TimelineAxis::fit(10.0, 50, 1000);
  const double x = 300;
  const double t = a.to_time(x);
  a.zoom_at(x, 4);
  EXPECT_NEAR(a.end_s - a.start_s, 2.5, 1e-12);
  EXPECT_NEAR(a.to_time(x), t, 1e-12);
  a.zoom_at(x, 2);
  EXPECT_NEAR(a.end_s - a.start_s, 1.25, 1e-12);
  EXPECT_NEAR(a.to_time(x), t, 1e-12);
}

TEST(GuiTimelineAxis, ZoomOutStopsAtTheWholeStepAndZoomInAtOneNanosecondPerPixel) {
  TimelineAxis a = TimelineAxis::fit(3.0, 0, 600);
  a.zoom_at(200, 0.1);
  EXPECT_DOUBLE_EQ(a.start_s, 0);
  EXPECT_DOUBLE_EQ(a.end_s, 3.0);
  for (int i = 0; i < 200; ++i) a.zoom_at(200, 10);
  EXPECT_NEAR(a.seconds_per_px(), 1e-9, 1e-15);
  EXPECT_GE(a.start_s, 0);
  EXPECT_LE(a.end_s, 3.0);
}

TEST(GuiTimelineAxis, PanMovesByPixelsAndClampsToTheStep) {
  TimelineAxis a = TimelineAxis::fit(8.0, 0, 800);
  a.zoom_at(0, 4);  // window [0, 2], 2.5 ms per px
  ASSERT_NEAR(a.start_s, 0, 1e-12);
  a.pan_px(-200);  // drag left: later times come into view
  EXPECT_NEAR(a.start_s, 0.5, 1e-12);
  EXPECT_NEAR(a.end_s, 2.5, 1e-12);
  a.pan_px(1e6);
  EXPECT_DOUBLE_EQ(a.start_s, 0);
  EXPECT_NEAR(a.end_s, 2.0, 1e-12);
  a.pan_px(-1e6);
  EXPECT_NEAR(a.end_s, 8.0, 1e-12);
  EXPECT_NEAR(a.start_s, 6.0, 1e-12);
}

TEST(GuiTimelineAxis, TicksAreOneTwoOrFiveTimesAPowerOfTen) {
  TimelineAxis a = TimelineAxis::fit(15.35, 96, 1000);
  for (double factor : {1.0, 3.0, 40.0, 1e4}) {
    a.zoom_at(300, factor);
    const double step = a.tick_step_s(90);
    EXPECT_GE(step / a.seconds_per_px(), 90 - 1e-6);
    const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
    EXPECT_TRUE(std::fabs(mantissa - 1) < 1e-6 || std::fabs(mantissa - 2) < 1e-6 || std::fabs(mantissa - 5) < 1e-6)
        << step;
    EXPECT_LT(step / a.seconds_per_px(), 90 * 5 + 1e-6);
  }
}

}  // namespace
}  // namespace loom::gui
