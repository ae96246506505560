#include "gui/models/rejected_model.h"

#include "gui/models/config_cells.h"

#include <algorithm>
#include <map>

static_assert(loom::gui::RejectedTableModel::kSchedule - loom::gui::RejectedTableModel::kTp + 1 ==
                  loom::gui::kConfigCellCount,
              "the configuration columns are those of config_cell, in its order");

namespace loom::gui {

RejectedTableModel::RejectedTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void RejectedTableModel::set_rejections(std::vector<Rejection> rejected) {
  beginResetModel();
  rejected_ = std::move(rejected);
  endResetModel();
}

int RejectedTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rejected_.size());
}

int RejectedTableModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : kColumnCount; }

QVariant RejectedTableModel::data(const QModelIndex& index, int role) const {
  if (index.row() < 0 || index.row() >= rowCount() || index.column() < 0 || index.column() >= kColumnCount) return {};
  const Rejection& r = rejected_[index.row()];
  const ParallelConfig& c = r.config;
  if (role == Qt::ToolTipRole) return QString::fromStdString(r.reason);
  if (role != Qt::DisplayRole && role != kSortRole) return {};
  const bool sort = role == kSortRole;
  if (index.column() >= kTp && index.column() <= kSchedule) return config_cell(c, index.column() - kTp, sort);
  switch (index.column()) {
    case kRule: return QString::fromStdString(r.rule);
    case kReason: return QString::fromStdString(r.reason);
    default: return {};
  }
}

QVariant RejectedTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  static const char* kHeaders[kColumnCount] = {"TP", "CP",  "PP",        "DP", "EP",       "ZeRO",   "shard",
                                               "MB", "VPP", "recompute", "SP", "schedule", "reason", "rule"};
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole || section < 0 || section >= kColumnCount) return {};
  return QString(kHeaders[section]);
}

std::vector<std::pair<std::string, int>> rejection_counts(const std::vector<Rejection>& rejected) {
  std::map<std::string, int> counts;
  for (const auto& r : rejected) ++counts[r.rule];
  std::vector<std::pair<std::string, int>> out(counts.begin(), counts.end());
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

}  // namespace loom::gui
