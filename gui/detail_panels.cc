#include "gui/detail_panels.h"

#include <QHeaderView>
#include <QLabel>
#include <QTableWidget>
#include <QVBoxLayout>

#include "gui/models/plan_summary.h"

namespace loom::gui {

SummaryView::SummaryView(QWidget* parent) : QTextBrowser(parent) {
  setOpenLinks(false);
  setFrameShape(QFrame::NoFrame);
  show_message(tr("Select a plan."));
}

void SummaryView::show_message(const QString& message) {
  setHtml(QStringLiteral("<p style='color:#777'>%1</p>").arg(message.toHtmlEscaped()));
}

void SummaryView::set_plan(int rank, const PlanDetail& detail) {
  QString html = QStringLiteral("<h3 style='margin:0'>Plan #%1</h3><table cellspacing='0' cellpadding='2'>").arg(rank);
  for (const auto& line : plan_summary(detail))
    html += QStringLiteral("<tr><td style='color:#555;padding-right:10px' valign='top'>%1</td><td>%2</td></tr>")
                .arg(QString::fromStdString(line.label).toHtmlEscaped(),
                     QString::fromStdString(line.value).toHtmlEscaped());
  html += QStringLiteral(
      "</table><p style='margin:6px 0 2px 0;color:#555'>critical path (longest runs per stage)</p><pre "
      "style='margin:0'>");
  for (const auto& run : critical_path_runs(detail.sim, 6)) html += QString::fromStdString(run).toHtmlEscaped() + "\n";
  html += QStringLiteral("</pre>");
  setHtml(html);
}

CompareView::CompareView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  hint_ = new QLabel;
  hint_->setWordWrap(true);
  layout->addWidget(hint_);
  table_ = new QTableWidget(0, 4);
  table_->setObjectName("compare_table");
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  table_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
  layout->addWidget(table_, 1);
  set_plans(std::nullopt, std::nullopt);
}

void CompareView::set_plans(std::optional<std::pair<int, PlanRow>> a, std::optional<std::pair<int, PlanRow>> b) {
  table_->setRowCount(0);
  if (!a || !b) {
    hint_->setText(
        tr("Pin a plan (toolbar: Pin for comparison), then select another plan to compare them side by side."));
    hint_->show();
    return;
  }
  hint_->hide();
  table_->setHorizontalHeaderLabels({tr("metric"), tr("A: plan #%1 (pinned)").arg(a->first),
                                     tr("B: plan #%1 (selected)").arg(b->first), tr("B vs A")});
  const auto lines = compare_plans(a->second, b->second);
  table_->setRowCount(static_cast<int>(lines.size()));
  const QColor better(0xD5, 0xF0, 0xDA), worse(0xF8, 0xD7, 0xD3);
  for (int i = 0; i < static_cast<int>(lines.size()); ++i) {
    const CompareLine& l = lines[i];
    const QString cells[] = {QString::fromStdString(l.label), QString::fromStdString(l.a), QString::fromStdString(l.b),
                             QString::fromStdString(l.delta)};
    for (int c = 0; c < 4; ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      if (c > 0)
        item->setTextAlignment(Qt::AlignVCenter | (c == 3 || l.delta != "differs" ? Qt::AlignRight : Qt::AlignLeft));
      if (l.better != 0 && (c == 1 || c == 2)) item->setBackground((c == 2) == (l.better > 0) ? better : worse);
      table_->setItem(i, c, item);
    }
  }
  table_->resizeRowsToContents();
}

}  // namespace loom::gui
