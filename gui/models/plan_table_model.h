// The plans of one search as a Qt table model: the columns of `loom plan`, display text plus a
// numeric sort role, and a proxy that sorts numerically and filters by config tokens
// ("tp8 pp4 z1 interleaved") and memory. One model feeds the table and the charts.
#pragma once

#include <QAbstractTableModel>
#include <QSortFilterProxyModel>
#include <QStringList>

#include "planner/search.h"

namespace loom::gui {

class PlanTableModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column {
    // Config, then speed, then memory (the speed columns stay in view in a narrow window).
    kRank,
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
    kStageLayers,
    kPrecision,
    kFramework,
    kStepTime,
    kTokensPerS,
    kTflopsPerGpu,
    kMfu,
    kBubble,
    kExposedComm,
    kMemoryGib,
    kParamsGib,
    kGradsGib,
    kOptimizerGib,
    kActivationsGib,
    kBuffersGib,
    kDaysToTrain,
    kLimitedBy,
    kColumnCount
  };
  static constexpr int kSortRole = Qt::UserRole + 1;  // a number (or string) to sort by
  static constexpr int kRowRole = Qt::UserRole + 2;   // index into result().plans

  explicit PlanTableModel(QObject* parent = nullptr);

  void set_result(PlanResult result);
  const PlanResult& result() const { return result_; }
  const PlanRow* row(int index) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  PlanResult result_;
};

// Tokens of a config for filtering: "tp8 pp4 dp32 z1 mb2 v1 selective sp 1f1b".
QStringList config_tokens(const ParallelConfig& config);
// True when every whitespace-separated word of `filter` equals (or, for names, starts) a token.
// `framework`: the row's software stack, matched by its name or a prefix of it ("deepspeed", "megatron").
bool config_matches(const ParallelConfig& config, const QString& filter, const std::string& framework = "");

class PlanFilterProxy : public QSortFilterProxyModel {
  Q_OBJECT

 public:
  explicit PlanFilterProxy(QObject* parent = nullptr);
  void set_config_filter(const QString& text);
  void set_max_memory_gib(double gib);  // 0: no limit
  QString config_filter() const { return config_filter_; }
  // Index into the source result of the proxy row, and back (-1 when filtered out).
  int plan_index(int proxy_row) const;
  int proxy_row(int plan_index) const;

 protected:
  bool filterAcceptsRow(int source_row, const QModelIndex& source_parent) const override;

 private:
  QString config_filter_;
  double max_memory_gib_ = 0;
};

}  // namespace loom::gui
