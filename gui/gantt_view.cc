#include "gui/gantt_view.h"

#include <QHelpEvent>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <QWheelEvent>
#include <cmath>

#include <fmt/format.h>

#include "sim/step_metrics.h"

namespace loom::gui {

namespace {

constexpr double kLabelWidth = 96;
constexpr double kRulerHeight = 22;
constexpr double kLegendHeight = 20;
constexpr double kCommRowWeight = 0.45;  // thin communication rows, relative to a compute row
constexpr double kMaxComputeRow = 44;

QColor kind_colour(sim::OpKind kind) {
  switch (kind) {
    case sim::OpKind::kForward: return QColor(0x4C, 0x78, 0xA8);
    case sim::OpKind::kBackward: return QColor(0xF5, 0x85, 0x18);
    case sim::OpKind::kWeightGrad: return QColor(0x54, 0xA2, 0x4B);
    case sim::OpKind::kPipeSend: return QColor(0x9D, 0x75, 0x5D);
    case sim::OpKind::kDataParallel: return QColor(0xE4, 0x57, 0x56);
    case sim::OpKind::kOptimizer: return QColor(0xB2, 0x79, 0xA2);
  }
  return Qt::gray;
}

QString time_label(double s, double step) {
  if (step >= 1) return QString::number(s, 'f', 0) + " s";
  if (step >= 1e-3) return QString::number(s * 1e3, 'f', step >= 1e-2 ? 0 : 1) + " ms";
  return QString::number(s * 1e6, 'f', 0) + " µs";
}

}  // namespace

GanttView::GanttView(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setFocusPolicy(Qt::StrongFocus);
  setAttribute(Qt::WA_OpaquePaintEvent);
}

void GanttView::set_detail(std::shared_ptr<const PlanDetail> detail) {
  detail_ = std::move(detail);
  rebuild_rows();
  axis_ = TimelineAxis::fit(data_.makespan_s, kLabelWidth, width() - kLabelWidth - 8);
  update();
}

void GanttView::rebuild_rows() {
  data_ = detail_ ? build_gantt(*detail_) : GanttData{};
  if (!show_communication_) std::erase_if(data_.rows, [](const GanttRow& row) { return !row.is_compute(); });
  layout_rows();
}

void GanttView::set_show_communication(bool on) {
  show_communication_ = on;
  rebuild_rows();
  update();
}

void GanttView::clear() { set_detail(nullptr); }

void GanttView::zoom(double factor) {
  axis_.zoom_at(axis_.left_px + axis_.width_px / 2, factor);
  update();
}

void GanttView::fit() {
  axis_.reset();
  update();
}

void GanttView::set_show_critical_path(bool on) {
  show_critical_path_ = on;
  update();
}

void GanttView::layout_rows() {
  geometry_.clear();
  double units = 0;
  for (const auto& row : data_.rows) units += row.is_compute() ? 1.0 : kCommRowWeight;
  const double available = height() - kRulerHeight - kLegendHeight - 4;
  const double unit = units > 0 ? std::min(kMaxComputeRow, available / units) : 0;
  double y = kRulerHeight + 2;
  for (const auto& row : data_.rows) {
    const double h = unit * (row.is_compute() ? 1.0 : kCommRowWeight);
    geometry_.push_back({y, h});
    y += h;
  }
}

void GanttView::resizeEvent(QResizeEvent*) {
  axis_.set_width(kLabelWidth, width() - kLabelWidth - 8);
  layout_rows();
}

int GanttView::row_at(double y) const {
  for (std::size_t i = 0; i < geometry_.size(); ++i)
    if (y >= geometry_[i].top && y < geometry_[i].top + geometry_[i].height) return static_cast<int>(i);
  return -1;
}

std::int32_t GanttView::op_at(QPointF pos) const {
  const int row = row_at(pos.y());
  if (row < 0 || pos.x() < kLabelWidth) return -1;
  return slice_at(data_.rows[row], axis_.to_time(pos.x()), 2 * axis_.seconds_per_px());
}

void GanttView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  if (!detail_) {
    p.setPen(palette().color(QPalette::PlaceholderText));
    p.drawText(rect(), Qt::AlignCenter, tr("Select a plan to see its pipeline timeline"));
    return;
  }
  paint_ruler(p);
  double next_label_y = 0;
  for (std::size_t i = 0; i < data_.rows.size(); ++i) paint_row(p, data_.rows[i], geometry_[i], next_label_y);
  paint_legend(p);
}

void GanttView::paint_ruler(QPainter& p) {
  const double step = axis_.tick_step_s(90);
  p.setPen(palette().color(QPalette::Mid));
  p.drawLine(QPointF(kLabelWidth, kRulerHeight), QPointF(width(), kRulerHeight));
  QFont small = font();
  small.setPointSizeF(font().pointSizeF() * 0.85);
  p.setFont(small);
  p.setPen(palette().color(QPalette::PlaceholderText));
  p.drawText(QRectF(4, 2, kLabelWidth - 8, kRulerHeight - 4), Qt::AlignLeft | Qt::AlignVCenter,
             QString::fromStdString(fmt::format("{:.3g}–{:.3g} s", axis_.start_s, axis_.end_s)));
  for (double t = std::ceil(axis_.start_s / step) * step; t <= axis_.end_s + 1e-12; t += step) {
    const double x = axis_.to_px(t);
    p.setPen(QColor(0, 0, 0, 28));
    p.drawLine(QPointF(x, kRulerHeight), QPointF(x, height() - kLegendHeight));
    p.setPen(palette().color(QPalette::Text));
    p.drawText(QRectF(x - 45, 2, 90, kRulerHeight - 4), Qt::AlignCenter, time_label(t, step));
  }
  p.setFont(font());
}

void GanttView::paint_row(QPainter& p, const GanttRow& row, const RowGeometry& g, double& next_label_y) {
  if (g.height < 1) return;
  const double inset = row.is_compute() ? std::min(2.0, g.height * 0.1) : std::min(1.0, g.height * 0.1);
  const QRectF lane(kLabelWidth, g.top, width() - kLabelWidth, g.height);
  if (row.is_compute()) {
    p.fillRect(lane, row.stage % 2 ? QColor(246, 247, 249) : QColor(252, 252, 253));
    p.setPen(QColor(0, 0, 0, 30));
    p.drawLine(QPointF(0, g.top), QPointF(width(), g.top));
  }
  // Row label. Thin rows (deep pipelines) label only the stages there is room for.
  p.setPen(row.is_compute() ? palette().color(QPalette::Text) : palette().color(QPalette::PlaceholderText));
  QFont f = font();
  if (!row.is_compute()) f.setPointSizeF(std::max(6.0, std::min(f.pointSizeF() * 0.8, g.height * 0.75)));
  p.setFont(f);
  const double text_height = QFontMetricsF(f).height();
  if (g.height >= 7) {
    p.drawText(QRectF(6, g.top, kLabelWidth - 10, g.height), Qt::AlignVCenter | Qt::AlignLeft,
               QString::fromStdString(row.label));
    next_label_y = g.top + g.height;
  } else if (row.is_compute()) {
    const QRectF r(6, g.top + g.height / 2 - text_height / 2, kLabelWidth - 10, text_height);
    if (r.top() >= next_label_y) {
      p.drawText(r, Qt::AlignVCenter | Qt::AlignLeft, QString::fromStdString(row.label));
      next_label_y = r.bottom();
    }
  }
  p.setFont(font());
  p.save();
  p.setClipRect(lane);
  // Bubbles: hatched idle time before the pipeline ends.
  for (const auto& b : row.bubbles) {
    if (!axis_.visible(b.start_s, b.end_s)) continue;
    const QRectF r(QPointF(axis_.to_px(b.start_s), g.top + inset),
                   QPointF(axis_.to_px(b.end_s), g.top + g.height - inset));
    p.fillRect(r, QColor(225, 228, 232));
    p.fillRect(r, QBrush(QColor(170, 175, 182), Qt::BDiagPattern));
  }
  const auto& slices = row.slices;
  auto it = std::lower_bound(slices.begin(), slices.end(), axis_.start_s,
                             [](const GanttSlice& s, double t) { return s.end_s < t; });
  double last_px = -1e9;
  for (; it != slices.end() && it->start_s <= axis_.end_s; ++it) {
    double x0 = axis_.to_px(it->start_s), x1 = axis_.to_px(it->end_s);
    if (x1 - x0 < 1) {
      // Many sub-pixel slices in one column paint as one.
      if (std::floor(x0) == last_px) continue;
      x1 = x0 + 1;
    }
    last_px = std::floor(x0);
    const sim::Op& op = detail_->sim.graph.op(it->op);
    QColor c = kind_colour(it->kind);
    if (op.micro_batch >= 0 && op.micro_batch % 2) c = c.lighter(118);
    const QRectF r(QPointF(x0, g.top + inset), QPointF(x1, g.top + g.height - inset));
    p.fillRect(r, c);
    if (r.width() > 4) {
      p.setPen(QColor(255, 255, 255, 200));
      p.drawLine(r.topLeft(), r.bottomLeft());
    }
    if (row.is_compute() && r.width() > 60 && g.height >= 14) paint_kernels(p, it->op, r, c);
    if (show_critical_path_ && it->op < static_cast<std::int32_t>(detail_->on_critical_path.size()) &&
        detail_->on_critical_path[it->op])
      p.fillRect(
          QRectF(r.left(), r.bottom() - std::max(1.5, g.height * 0.12), r.width(), std::max(1.5, g.height * 0.12)),
          QColor(20, 20, 20));
    if (row.is_compute() && g.height >= 12) {
      const QString label = QString::fromStdString(sim::op_label(op));
      const QFontMetricsF fm(font());
      QString shown = fm.horizontalAdvance(label) + 6 < r.width() ? label
                      : op.micro_batch >= 0 && fm.horizontalAdvance(QString::number(op.micro_batch)) + 4 < r.width()
                          ? QString::number(op.micro_batch)
                          : QString();
      if (!shown.isEmpty()) {
        p.setPen(Qt::white);
        p.drawText(r, Qt::AlignCenter, shown);
      }
    }
  }
  p.restore();
}

// Zoomed in far enough, a pass shows its kernels as a strip along its bottom, as Perfetto nests
// them: compute in alternating shades of the pass colour, TP communication in red.
void GanttView::paint_kernels(QPainter& p, std::int32_t op, const QRectF& r, const QColor& colour) {
  const sim::PassCost* pass = pass_of(*detail_, op);
  if (!pass || pass->segments.empty() || pass->seconds <= 0) return;
  const double strip = std::max(4.0, r.height() * 0.3);
  const double px_per_s = r.width() / pass->seconds;
  double x = r.left();
  bool dark = false;
  for (const sim::Segment& seg : pass->segments) {
    if (seg.beside) continue;  // a CP ring transfer under its tile: what it exposes is a segment of its own
    const double w = seg.seconds * px_per_s;
    if (x + w >= axis_.left_px && x <= axis_.left_px + axis_.width_px && w >= 0.5) {
      const QColor fill = seg.communication ? QColor(0xE4, 0x57, 0x56) : dark ? colour.darker(125) : colour.darker(108);
      p.fillRect(QRectF(x, r.bottom() - strip, w, strip), fill);
    }
    dark = !dark;
    x += w;
  }
}

void GanttView::paint_legend(QPainter& p) {
  struct Item {
    const char* name;
    QColor colour;
  };
  std::vector<Item> items = {{"forward", kind_colour(sim::OpKind::kForward)},
                             {"backward", kind_colour(sim::OpKind::kBackward)}};
  if (detail_->config.schedule == Schedule::kZeroBubble)
    items.push_back({"weight grad", kind_colour(sim::OpKind::kWeightGrad)});
  items.push_back({"pp send", kind_colour(sim::OpKind::kPipeSend)});
  items.push_back({"dp comm", kind_colour(sim::OpKind::kDataParallel)});
  items.push_back({"optimizer", kind_colour(sim::OpKind::kOptimizer)});
  double x = kLabelWidth;
  const double y = height() - kLegendHeight + 4;
  const QFontMetricsF fm(font());
  for (const auto& item : items) {
    p.fillRect(QRectF(x, y + 2, 10, 10), item.colour);
    p.setPen(palette().color(QPalette::Text));
    p.drawText(QPointF(x + 14, y + 11), item.name);
    x += 24 + fm.horizontalAdvance(item.name);
  }
  const QRectF bubble(x, y + 2, 10, 10);
  p.fillRect(bubble, QColor(225, 228, 232));
  p.fillRect(bubble, QBrush(QColor(170, 175, 182), Qt::BDiagPattern));
  p.drawText(QPointF(x + 14, y + 11), tr("bubble"));
  x += 24 + fm.horizontalAdvance(tr("bubble"));
  if (show_critical_path_) {
    p.fillRect(QRectF(x, y + 9, 10, 3), QColor(20, 20, 20));
    p.drawText(QPointF(x + 14, y + 11), tr("critical path"));
    x += 24 + fm.horizontalAdvance(tr("critical path"));
  }
}

void GanttView::wheelEvent(QWheelEvent* e) {
  if (!detail_) return;
  const double notches = e->angleDelta().y() / 120.0;
  if (e->modifiers() & Qt::ShiftModifier) {
    axis_.pan_px(notches * 60);
  } else {
    axis_.zoom_at(std::max(e->position().x(), kLabelWidth), std::pow(1.25, notches));
  }
  update();
  e->accept();
}

void GanttView::mousePressEvent(QMouseEvent* e) {
  if (e->button() == Qt::LeftButton) {
    dragging_ = true;
    last_drag_x_ = e->position().x();
    setCursor(Qt::ClosedHandCursor);
  }
}

void GanttView::mouseMoveEvent(QMouseEvent* e) {
  if (!dragging_) return;
  axis_.pan_px(e->position().x() - last_drag_x_);
  last_drag_x_ = e->position().x();
  update();
}

void GanttView::mouseReleaseEvent(QMouseEvent*) {
  dragging_ = false;
  unsetCursor();
}

void GanttView::mouseDoubleClickEvent(QMouseEvent*) { fit(); }

void GanttView::keyPressEvent(QKeyEvent* e) {
  switch (e->key()) {
    case Qt::Key_Plus:
    case Qt::Key_Equal: zoom(1.5); break;
    case Qt::Key_Minus: zoom(1 / 1.5); break;
    case Qt::Key_0: fit(); break;
    case Qt::Key_Left: axis_.pan_px(80), update(); break;
    case Qt::Key_Right: axis_.pan_px(-80), update(); break;
    default: QWidget::keyPressEvent(e);
  }
}

bool GanttView::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip && detail_) {
    auto* help = static_cast<QHelpEvent*>(e);
    const std::int32_t op = op_at(help->pos());
    if (op >= 0) {
      QToolTip::showText(help->globalPos(), QString::fromStdString(slice_tooltip(*detail_, op)), this);
    } else if (const int row = row_at(help->pos().y()); row >= 0 && data_.rows[row].is_compute()) {
      const double t = axis_.to_time(help->pos().x());
      for (const auto& b : data_.rows[row].bubbles)
        if (t >= b.start_s && t <= b.end_s) {
          QToolTip::showText(help->globalPos(),
                             tr("bubble: stage %1 idle for %2 ms")
                                 .arg(data_.rows[row].stage)
                                 .arg((b.end_s - b.start_s) * 1e3, 0, 'f', 2),
                             this);
          return true;
        }
      QToolTip::hideText();
    } else {
      QToolTip::hideText();
    }
    return true;
  }
  return QWidget::event(e);
}

}  // namespace loom::gui
