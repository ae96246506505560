// The inputs of a search, as widgets: model and cluster (preset or file), GPUs, global batch,
// sequence length, token budget, attention kernel, synchronous pipeline sends, and the
// restriction lists of `loom plan`.
// Emits changed() on every edit; request() reads the widgets back as a PlanRequest.
#pragma once

#include <QWidget>

#include "gui/models/plan_request.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QSpinBox;

namespace loom::gui {

class InputsPanel : public QWidget {
  Q_OBJECT

 public:
  explicit InputsPanel(QWidget* parent = nullptr);

  PlanRequest request() const;
  void set_request(const PlanRequest& request);  // does not emit changed()
  void set_error(const QString& message);        // empty clears it

  QComboBox* model_box() const { return model_; }
  QComboBox* cluster_box() const { return cluster_; }
  QSpinBox* gpus_box() const { return gpus_; }
  QSpinBox* global_batch_box() const { return global_batch_; }
  QCheckBox* sync_pipeline_sends_box() const { return sync_sends_; }
  QDoubleSpinBox* moe_imbalance_box() const { return moe_imbalance_; }

 public slots:
  void open_model_file();
  void open_cluster_file();

 signals:
  void changed();

 private:
  QLineEdit* restriction(const QString& name, const QString& placeholder);

  QComboBox* model_;
  QComboBox* cluster_;
  QSpinBox* gpus_;
  QSpinBox* global_batch_;
  QSpinBox* seq_;
  QDoubleSpinBox* tokens_b_;
  QComboBox* framework_;
  QComboBox* attention_;
  QComboBox* elementwise_;
  QComboBox* flash_kernel_;
  QComboBox* cp_attention_;
  QComboBox* precision_;
  QComboBox* fp8_recipe_;  // read only with precision fp8 (--fp8-recipe applies to it alone)
  QCheckBox* cross_node_tp_;
  QCheckBox* sync_sends_;
  QDoubleSpinBox* moe_imbalance_;
  QCheckBox* shared_overlap_;
  QLineEdit *tp_, *cp_, *cp_comm_, *ep_, *etp_, *pp_, *dp_, *zero_, *shard_group_, *micro_batch_, *vpp_, *recompute_,
      *sp_, *schedule_;
  QLabel* error_;
  bool loading_ = false;
};

}  // namespace loom::gui
