// MainWindow's layout: inputs and search summary on the left; plans, rejected and compare tabs
// beside the Pareto and heat-map tabs; the Gantt beside the summary and memory bars below.
#include <QCheckBox>
#include <QDoubleSpinBox>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QScrollArea>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableView>
#include <QToolButton>
#include <QVBoxLayout>

#include "gui/detail_panels.h"
#include "gui/gantt_view.h"
#include "gui/heat_map_view.h"
#include "gui/inputs_panel.h"
#include "gui/main_window.h"
#include "gui/memory_chart.h"
#include "gui/models/plan_table_model.h"
#include "gui/models/rejected_model.h"
#include "gui/pareto_chart.h"

namespace loom::gui {

namespace {

QTableView* make_table(QAbstractItemModel* model, const QString& name) {
  auto* view = new QTableView;
  view->setObjectName(name);
  view->setModel(model);
  view->setSortingEnabled(true);
  view->setSelectionBehavior(QAbstractItemView::SelectRows);
  view->setSelectionMode(QAbstractItemView::SingleSelection);
  view->setAlternatingRowColors(true);
  view->setWordWrap(false);
  view->verticalHeader()->hide();
  view->verticalHeader()->setDefaultSectionSize(view->fontMetrics().height() + 6);
  view->horizontalHeader()->setHighlightSections(false);
  view->horizontalHeader()->setStretchLastSection(true);
  return view;
}

QWidget* titled(const QString& title, QWidget* body, QWidget* tools = nullptr) {
  auto* box = new QWidget;
  auto* layout = new QVBoxLayout(box);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(2);
  auto* header = new QHBoxLayout;
  auto* label = new QLabel(QStringLiteral("<b>%1</b>").arg(title));
  header->addWidget(label);
  header->addStretch(1);
  if (tools) header->addWidget(tools);
  layout->addLayout(header);
  layout->addWidget(body, 1);
  return box;
}

}  // namespace

void MainWindow::build_layout() {
  inputs_ = new InputsPanel;
  // Under the inputs: what the search did, and why configurations were rejected.
  auto* search_box = new QGroupBox(tr("Search"));
  search_info_ = new QLabel;
  search_info_->setObjectName("search_info");
  search_info_->setWordWrap(true);
  search_info_->setTextFormat(Qt::RichText);
  search_info_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  (new QVBoxLayout(search_box))->addWidget(search_info_);
  auto* left = new QWidget;
  auto* left_layout = new QVBoxLayout(left);
  left_layout->setContentsMargins(0, 0, 0, 0);
  left_layout->addWidget(inputs_);
  left_layout->addWidget(search_box);
  left_layout->addStretch(1);
  auto* inputs_scroll = new QScrollArea;
  inputs_scroll->setWidget(left);
  inputs_scroll->setWidgetResizable(true);
  inputs_scroll->setMinimumWidth(inputs_->sizeHint().width() + 20);
  inputs_scroll->setFrameShape(QFrame::NoFrame);

  // Plans, rejected, compare.
  filter_ = new QLineEdit;
  filter_->setObjectName("plan_filter");
  filter_->setPlaceholderText(tr("filter: tp8 pp4 z1 interleaved …"));
  filter_->setClearButtonEnabled(true);
  filter_count_ = new QLabel;
  plans_view_ = make_table(plans_proxy_, "plans_table");
  plans_view_->sortByColumn(PlanTableModel::kRank, Qt::AscendingOrder);
  auto* plans_page = new QWidget;
  auto* plans_layout = new QVBoxLayout(plans_page);
  plans_layout->setContentsMargins(2, 2, 2, 2);
  auto* filter_row = new QHBoxLayout;
  filter_row->addWidget(filter_, 1);
  memory_limit_ = new QDoubleSpinBox;
  memory_limit_->setObjectName("memory_limit");
  memory_limit_->setRange(0, 1e4);
  memory_limit_->setDecimals(0);
  memory_limit_->setPrefix(tr("≤ "));
  memory_limit_->setSuffix(tr(" GiB"));
  memory_limit_->setSpecialValueText(tr("any memory"));
  memory_limit_->setToolTip(tr("show only plans whose most loaded stage needs at most this much"));
  filter_row->addWidget(memory_limit_);
  filter_row->addWidget(filter_count_);
  plans_layout->addLayout(filter_row);
  plans_layout->addWidget(plans_view_, 1);

  rejected_view_ = make_table(rejected_proxy_, "rejected_table");
  rejected_view_->sortByColumn(RejectedTableModel::kRule, Qt::AscendingOrder);  // grouped by rule
  auto* rejected_filter = new QLineEdit;
  rejected_filter->setPlaceholderText(tr("filter reasons …"));
  rejected_filter->setClearButtonEnabled(true);
  connect(rejected_filter, &QLineEdit::textChanged, rejected_proxy_, &QSortFilterProxyModel::setFilterFixedString);
  auto* rejected_page = new QWidget;
  auto* rejected_layout = new QVBoxLayout(rejected_page);
  rejected_layout->setContentsMargins(2, 2, 2, 2);
  rejected_layout->addWidget(rejected_filter);
  rejected_layout->addWidget(rejected_view_, 1);

  compare_ = new CompareView;
  table_tabs_ = new QTabWidget;
  table_tabs_->addTab(plans_page, tr("Plans"));
  table_tabs_->addTab(rejected_page, tr("Rejected"));
  table_tabs_->addTab(compare_, tr("Compare"));

  pareto_ = new ParetoChart;
  heat_map_ = new HeatMapView;
  chart_tabs_ = new QTabWidget;
  chart_tabs_->addTab(pareto_, tr("Pareto"));
  chart_tabs_->addTab(heat_map_, tr("TP × PP"));

  // The selected plan: Gantt, summary, memory.
  gantt_ = new GanttView;
  gantt_->setObjectName("gantt");
  auto* gantt_tools = new QWidget;
  auto* tools_layout = new QHBoxLayout(gantt_tools);
  tools_layout->setContentsMargins(0, 0, 0, 0);
  auto tool = [&](const QString& text, const QString& tip, auto slot) {
    auto* b = new QToolButton;
    b->setText(text);
    b->setToolTip(tip);
    b->setAutoRaise(true);
    connect(b, &QToolButton::clicked, gantt_, slot);
    tools_layout->addWidget(b);
  };
  auto* critical = new QCheckBox(tr("critical path"));
  critical->setChecked(true);
  connect(critical, &QCheckBox::toggled, gantt_, &GanttView::set_show_critical_path);
  tools_layout->addWidget(critical);
  auto* communication = new QCheckBox(tr("communication"));
  communication->setObjectName("show_communication");
  communication->setChecked(true);
  communication->setToolTip(tr("pipeline sends and data-parallel collectives on thin rows under each stage"));
  connect(communication, &QCheckBox::toggled, gantt_, &GanttView::set_show_communication);
  tools_layout->addWidget(communication);
  tool(QStringLiteral("−"), tr("zoom out (or wheel)"), [this] { gantt_->zoom(1 / 1.5); });
  tool(QStringLiteral("+"), tr("zoom in (or wheel; drag to pan)"), [this] { gantt_->zoom(1.5); });
  tool(tr("fit"), tr("show the whole step (or double-click)"), [this] { gantt_->fit(); });
  summary_ = new SummaryView;
  QFont summary_font = summary_->font();
  summary_font.setPointSizeF(summary_font.pointSizeF() * 0.92);
  summary_->setFont(summary_font);
  memory_chart_ = new MemoryChart;
  memory_chart_->setObjectName("memory_chart");

  auto* top = new QSplitter(Qt::Horizontal);
  top->addWidget(table_tabs_);
  top->addWidget(chart_tabs_);
  top->setStretchFactor(0, 3);
  top->setStretchFactor(1, 2);
  auto* side = new QSplitter(Qt::Vertical);
  side->addWidget(summary_);
  side->addWidget(memory_chart_);
  side->setStretchFactor(0, 2);
  side->setStretchFactor(1, 3);
  auto* bottom = new QSplitter(Qt::Horizontal);
  bottom->addWidget(titled(tr("Pipeline timeline (one training step)"), gantt_, gantt_tools));
  bottom->addWidget(side);
  bottom->setStretchFactor(0, 3);
  bottom->setStretchFactor(1, 2);
  auto* right = new QSplitter(Qt::Vertical);
  right->addWidget(top);
  right->addWidget(bottom);
  right->setStretchFactor(0, 4);
  right->setStretchFactor(1, 5);
  auto* main = new QSplitter(Qt::Horizontal);
  main->addWidget(inputs_scroll);
  main->addWidget(right);
  main->setStretchFactor(1, 1);
  setCentralWidget(main);
  // Initial proportions (the splitters keep them as the window resizes).
  top->setSizes({880, 540});
  bottom->setSizes({880, 540});
  right->setSizes({420, 560});
  side->setSizes({300, 260});

  status_ = new QLabel;
  progress_ = new QProgressBar;
  progress_->setMaximumWidth(260);
  progress_->setTextVisible(true);
  progress_->hide();
  statusBar()->addWidget(status_, 1);
  statusBar()->addPermanentWidget(progress_);
}

}  // namespace loom::gui
