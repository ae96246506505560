// Rejected configurations of one search as a Qt table model (config columns, the rule, the
// reason), and the rules with their counts for a "why not" overview.
#pragma once

#include <QAbstractTableModel>
#include <utility>
#include <vector>

#include "planner/enumerate.h"

namespace loom::gui {

class RejectedTableModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column {
    kTp,
    kCp,
    kPp,
    kDp,
    kEp,
    kZero,
    kShardGroup,
    kMicroBatch,
    kVpp,
    kRecompute,
    kSp,
    kSchedule,
    kReason,
    kRule,
    kColumnCount
  };
  static constexpr int kSortRole = Qt::UserRole + 1;

  explicit RejectedTableModel(QObject* parent = nullptr);
  void set_rejections(std::vector<Rejection> rejected);
  const std::vector<Rejection>& rejections() const { return rejected_; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::vector<Rejection> rejected_;
};

// Rules by how many configurations each rejected, most first (ties by name).
std::vector<std::pair<std::string, int>> rejection_counts(const std::vector<Rejection>& rejected);

}  // namespace loom::gui
