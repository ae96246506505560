#include "gui/models/plan_table_model.h"

#include "gui/models/config_cells.h"

#include <algorithm>
#include <array>

#include "core/pipeline_split.h"

static_assert(loom::gui::PlanTableModel::kSchedule - loom::gui::PlanTableModel::kTp + 1 == loom::gui::kConfigCellCount,
              "the configuration columns are those of config_cell, in its order");

namespace loom::gui {

namespace {

struct ColumnInfo {
  const char* header;
  const char* tooltip;
};

constexpr std::array<ColumnInfo, PlanTableModel::kColumnCount> kColumns = {{
    {"rank", "rank by simulated step time"},
    {"TP", "tensor-parallel size"},
    {"CP", "context-parallel size: ranks each sequence is split over (a2a/all_gather named; else the ring)"},
    {"PP", "pipeline-parallel size"},
    {"DP", "data-parallel size"},
    {"EP",
     "expert-parallel size: an MoE layer's experts split over this many ranks of the dp·cp group (etp1: each "
     "expert whole on its rank under TP)"},
    {"ZeRO", "ZeRO stage"},
    {"shard", "ranks ZeRO-3 shards over, dp·cp or fewer (fewer: HSDP, replicated across groups)"},
    {"MB", "sequences per micro-batch"},
    {"VPP", "virtual pipeline chunks per stage"},
    {"recompute", "activation recompute"},
    {"SP", "sequence parallelism"},
    {"schedule", "pipeline schedule"},
    {"stage layers", "transformer layers of each pipeline stage (NxK: K stages of N layers each)"},
    {"precision", "precision of the linear layers' GEMMs (bf16, or fp8 with bf16 elsewhere)"},
    {"framework", "the software stack the row was simulated under (--framework; several are ranked together)"},
    {"step s", "simulated step time, seconds"},
    {"tokens/s", "tokens per second, whole cluster"},
    {"TFLOP/s/GPU", "model TFLOP/s per GPU (no recompute)"},
    {"MFU %", "model FLOPs utilisation"},
    {"bubble %", "pipeline bubble, % of the step"},
    {"exposed s", "communication on the critical path, seconds"},
    {"mem GiB", "memory of the most loaded stage, GiB"},
    {"params", "parameters, GiB"},
    {"grads", "gradients, GiB"},
    {"optim", "optimizer states, GiB"},
    {"act", "activations, GiB"},
    {"buf", "communication buffers + framework reserve, GiB"},
    {"days", "days to train the token budget"},
    {"limited by", "what dominates the critical path"},
}};

QString fixed(double v, int decimals) { return QString::number(v, 'f', decimals); }

}  // namespace

PlanTableModel::PlanTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void PlanTableModel::set_result(PlanResult result) {
  beginResetModel();
  result_ = std::move(result);
  endResetModel();
}

const PlanRow* PlanTableModel::row(int index) const {
  if (index < 0 || index >= static_cast<int>(result_.plans.size())) return nullptr;
  return &result_.plans[index];
}

int PlanTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(result_.plans.size());
}

int PlanTableModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : kColumnCount; }

QVariant PlanTableModel::data(const QModelIndex& index, int role) const {
  const PlanRow* r = row(index.row());
  if (!r || index.column() < 0 || index.column() >= kColumnCount) return {};
  const ParallelConfig& c = r->config;
  const PlanMetrics& m = r->metrics;
  if (role == kRowRole) return index.row();
  if (role == Qt::TextAlignmentRole) {
    const bool text = index.column() == kRecompute || index.column() == kSp || index.column() == kSchedule ||
                      index.column() == kStageLayers || index.column() == kPrecision || index.column() == kFramework ||
                      index.column() == kLimitedBy;
    return QVariant::fromValue(Qt::AlignVCenter | (text ? Qt::AlignLeft : Qt::AlignRight));
  }
  if (role == Qt::ToolTipRole) return QString::fromStdString(describe(c) + "\n" + r->limited_by);
  if (role != Qt::DisplayRole && role != kSortRole) return {};
  const bool sort = role == kSortRole;
  auto number = [&](double v, int decimals) -> QVariant { return sort ? QVariant(v) : QVariant(fixed(v, decimals)); };
  if (index.column() >= kTp && index.column() <= kSchedule) return config_cell(c, index.column() - kTp, sort);
  switch (index.column()) {
    case kRank: return index.row() + 1;
    case kStageLayers: {
      // Sorted by the bottleneck stage's layers.
      const auto most = std::max_element(r->stage_layers.begin(), r->stage_layers.end());
      if (sort) return most == r->stage_layers.end() ? 0 : *most;
      return QString::fromStdString(stage_layers_label(r->stage_layers));
    }
    case kPrecision: return QString(to_string(r->precision));
    case kFramework: return QString::fromStdString(r->framework);
    case kMemoryGib: return number(m.memory_gib.total, 1);
    case kParamsGib: return number(m.memory_gib.params, 1);
    case kGradsGib: return number(m.memory_gib.grads, 1);
    case kOptimizerGib: return number(m.memory_gib.optimizer, 1);
    case kActivationsGib: return number(m.memory_gib.activations, 1);
    case kBuffersGib: return number(m.memory_gib.buffers, 1);
    case kStepTime: return number(m.step_time_s, 3);
    case kTokensPerS: return number(m.tokens_per_s, 0);
    case kTflopsPerGpu: return number(m.tflops_per_gpu, 1);
    case kMfu: return number(100.0 * m.mfu, 1);
    case kBubble: return number(100.0 * m.bubble_fraction, 1);
    case kExposedComm: return number(m.exposed_comm_s, 3);
    case kDaysToTrain:
      if (r->days_to_train <= 0) return sort ? QVariant(0.0) : QVariant(QStringLiteral("–"));
      return number(r->days_to_train, 1);
    case kLimitedBy: return QString::fromStdString(r->limited_by);
    default: return {};
  }
}

QVariant PlanTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || section < 0 || section >= kColumnCount) return {};
  if (role == Qt::DisplayRole) return QString(kColumns[section].header);
  if (role == Qt::ToolTipRole) return QString(kColumns[section].tooltip);
  return {};
}

QStringList config_tokens(const ParallelConfig& c) {
  return {QStringLiteral("tp%1").arg(c.tp),
          QStringLiteral("cp%1").arg(c.cp),
          c.cp > 1 ? QString(to_string(c.cp_comm)) : QString(),
          QStringLiteral("pp%1").arg(c.pp),
          QStringLiteral("dp%1").arg(c.dp),
          c.ep > 1 ? QStringLiteral("ep%1").arg(c.ep) : QString(),
          c.expert_tp() != c.tp ? QStringLiteral("etp%1").arg(c.expert_tp()) : QString(),
          QStringLiteral("z%1").arg(c.zero),
          c.shard_group > 0 ? QStringLiteral("shard%1").arg(c.shard_group) : QString(),
          QStringLiteral("mb%1").arg(c.micro_batch),
          QStringLiteral("v%1").arg(c.vpp),
          QString(to_string(c.recompute)),
          c.sequence_parallel ? QStringLiteral("sp") : QStringLiteral("nosp"),
          QString(to_string(c.schedule)),
          QString::fromStdString(describe(c.split))};
}

bool config_matches(const ParallelConfig& config, const QString& filter, const std::string& framework) {
  const QStringList tokens = config_tokens(config);
  const QString stack = QString::fromStdString(framework);
  const QStringList words = filter.toLower().split(QChar(' '), Qt::SkipEmptyParts);
  for (const QString& word : words) {
    // The stack's name may be abbreviated too ("deep", "megatron-lm"), though it ends in a digit.
    bool found = !stack.isEmpty() && stack.startsWith(word);
    for (const QString& token : tokens) {
      // Sizes must match exactly ("tp8" is not "tp80"); names may be abbreviated ("inter", "sel").
      const bool is_size = !token.isEmpty() && token.back().isDigit();
      if (is_size ? token == word : token.startsWith(word)) {
        found = true;
        break;
      }
    }
    if (!found) return false;
  }
  return true;
}

PlanFilterProxy::PlanFilterProxy(QObject* parent) : QSortFilterProxyModel(parent) {
  setSortRole(PlanTableModel::kSortRole);
}

void PlanFilterProxy::set_config_filter(const QString& text) {
  config_filter_ = text;
  invalidateFilter();
}

void PlanFilterProxy::set_max_memory_gib(double gib) {
  max_memory_gib_ = gib;
  invalidateFilter();
}

int PlanFilterProxy::plan_index(int proxy_row) const {
  const QModelIndex source = mapToSource(index(proxy_row, 0));
  return source.isValid() ? source.row() : -1;
}

int PlanFilterProxy::proxy_row(int plan_index) const {
  if (!sourceModel()) return -1;
  const QModelIndex p = mapFromSource(sourceModel()->index(plan_index, 0));
  return p.isValid() ? p.row() : -1;
}

bool PlanFilterProxy::filterAcceptsRow(int source_row, const QModelIndex&) const {
  const auto* model = qobject_cast<const PlanTableModel*>(sourceModel());
  if (!model) return true;
  const PlanRow* r = model->row(source_row);
  if (!r) return false;
  if (max_memory_gib_ > 0 && r->metrics.memory_gib.total > max_memory_gib_) return false;
  return config_matches(r->config, config_filter_, r->framework);
}

}  // namespace loom::gui
