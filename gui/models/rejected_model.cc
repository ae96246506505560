#include "gui/models/rejected_model.h"

#include <algorithm>
#include <map>

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
  switch (index.column()) {
    case kTp: return c.tp;
    case kPp: return c.pp;
    case kDp: return c.dp;
    case kZero: return c.zero;
    case kMicroBatch: return c.micro_batch;
    case kVpp: return c.vpp;
    case kRecompute: return sort ? QVariant(static_cast<int>(c.recompute)) : QVariant(to_string(c.recompute));
    case kSp: return sort ? QVariant(c.sequence_parallel ? 1 : 0) : QVariant(c.sequence_parallel ? "on" : "off");
    case kSchedule: return sort ? QVariant(static_cast<int>(c.schedule)) : QVariant(to_string(c.schedule));
    case kRule: return QString::fromStdString(r.rule);
    case kReason: return QString::fromStdString(r.reason);
    default: return {};
  }
}

QVariant RejectedTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  static const char* kHeaders[kColumnCount] = {"TP", "PP", "DP", "ZeRO", "MB", "VPP", "recompute", "SP", "schedule",
                                               "reason", "rule"};
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
