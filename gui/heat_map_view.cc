#include "gui/heat_map_view.h"

#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <algorithm>

namespace loom::gui {

namespace {

// A light-to-dark blue ramp (t in 0..1).
QColor ramp(double t) {
  const QColor lo(0xEF, 0xF3, 0xFF), hi(0x08, 0x45, 0x94);
  t = std::clamp(t, 0.0, 1.0);
  return QColor::fromRgbF(lo.redF() + (hi.redF() - lo.redF()) * t, lo.greenF() + (hi.greenF() - lo.greenF()) * t,
                          lo.blueF() + (hi.blueF() - lo.blueF()) * t);
}

QString compact(double tokens_per_s) {
  if (tokens_per_s >= 1e6) return QString::number(tokens_per_s / 1e6, 'f', 2) + "M";
  if (tokens_per_s >= 1e3) return QString::number(tokens_per_s / 1e3, 'f', 0) + "k";
  return QString::number(tokens_per_s, 'f', 0);
}

}  // namespace

HeatMapView::HeatMapView(QWidget* parent) : QWidget(parent) { setMouseTracking(true); }

void HeatMapView::set_heat_map(HeatMap map) {
  map_ = std::move(map);
  update();
}

void HeatMapView::set_selected(int plan_index) {
  selected_plan_ = plan_index;
  update();
}

QRectF HeatMapView::grid_rect() const { return QRectF(56, 30, width() - 56 - 12, height() - 30 - 34); }

QRectF HeatMapView::cell_rect(std::size_t tp_i, std::size_t pp_i) const {
  const QRectF g = grid_rect();
  const double w = g.width() / std::max<std::size_t>(1, map_.tp_values.size());
  const double h = g.height() / std::max<std::size_t>(1, map_.pp_values.size());
  return QRectF(g.left() + tp_i * w, g.top() + pp_i * h, w, h);
}

std::pair<int, int> HeatMapView::cell_at(QPointF pos) const {
  for (std::size_t p = 0; p < map_.pp_values.size(); ++p)
    for (std::size_t t = 0; t < map_.tp_values.size(); ++t)
      if (cell_rect(t, p).contains(pos)) return {static_cast<int>(t), static_cast<int>(p)};
  return {-1, -1};
}

void HeatMapView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  p.fillRect(rect(), palette().base());
  QFont title = font();
  title.setBold(true);
  p.setFont(title);
  p.setPen(palette().color(QPalette::Text));
  p.drawText(QRectF(0, 4, width(), 20), Qt::AlignCenter, tr("Best tokens/s per TP × PP layout"));
  p.setFont(font());
  if (map_.tp_values.empty()) return;
  const QRectF g = grid_rect();
  for (std::size_t pi = 0; pi < map_.pp_values.size(); ++pi) {
    for (std::size_t ti = 0; ti < map_.tp_values.size(); ++ti) {
      const HeatCell& c = map_.cell(ti, pi);
      const QRectF r = cell_rect(ti, pi).adjusted(1, 1, -1, -1);
      const double t = map_.max_tokens_per_s > 0 ? c.best_tokens_per_s / map_.max_tokens_per_s : 0;
      // Spread the top of the range, where the interesting differences are.
      const QColor fill = c.best_plan >= 0 ? ramp(std::pow(t, 3.0)) : QColor(236, 236, 236);
      p.fillRect(r, fill);
      if (c.best_plan >= 0 && c.best_plan == selected_plan_) {
        p.setPen(QPen(QColor(0xC0, 0x39, 0x2B), 3));
        p.drawRect(r.adjusted(1.5, 1.5, -1.5, -1.5));
      }
      p.setPen(c.best_plan < 0 ? QColor(160, 160, 160) : fill.lightnessF() < 0.55 ? Qt::white : Qt::black);
      const QString text = c.best_plan < 0 ? QStringLiteral("–") : compact(c.best_tokens_per_s);
      if (r.height() >= 12) p.drawText(r, Qt::AlignCenter, text);
    }
  }
  p.setPen(palette().color(QPalette::Text));
  for (std::size_t ti = 0; ti < map_.tp_values.size(); ++ti) {
    const QRectF r = cell_rect(ti, 0);
    p.drawText(QRectF(r.left(), g.bottom() + 2, r.width(), 16), Qt::AlignCenter, QString::number(map_.tp_values[ti]));
  }
  for (std::size_t pi = 0; pi < map_.pp_values.size(); ++pi) {
    const QRectF r = cell_rect(0, pi);
    p.drawText(QRectF(20, r.top(), 32, r.height()), Qt::AlignRight | Qt::AlignVCenter,
               QString::number(map_.pp_values[pi]));
  }
  p.drawText(QRectF(g.left(), g.bottom() + 16, g.width(), 16), Qt::AlignCenter, tr("tensor parallel (TP)"));
  p.save();
  p.translate(12, g.center().y());
  p.rotate(-90);
  p.drawText(QRectF(-g.height() / 2, -8, g.height(), 16), Qt::AlignCenter, tr("pipeline parallel (PP)"));
  p.restore();
}

void HeatMapView::mousePressEvent(QMouseEvent* e) {
  const auto [t, p] = cell_at(e->position());
  if (t < 0) return;
  const HeatCell& c = map_.cell(t, p);
  if (c.best_plan >= 0) emit plan_clicked(c.best_plan);
}

bool HeatMapView::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(e);
    const auto [t, p] = cell_at(help->pos());
    if (t >= 0) {
      const HeatCell& c = map_.cell(t, p);
      QToolTip::showText(help->globalPos(),
                         c.best_plan < 0 ? tr("tp %1 × pp %2: nothing fits (see Rejected)").arg(c.tp).arg(c.pp)
                                         : tr("tp %1 × pp %2: %3 plans, best %4 tokens/s (click to select)")
                                               .arg(c.tp)
                                               .arg(c.pp)
                                               .arg(c.plans)
                                               .arg(c.best_tokens_per_s, 0, 'f', 0),
                         this);
    } else {
      QToolTip::hideText();
    }
    return true;
  }
  return QWidget::event(e);
}

}  // namespace loom::gui
