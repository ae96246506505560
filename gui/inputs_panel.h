// The inputs of a search, as widgets: every input `loom plan` takes (model and cluster, preset or
// file; GPUs, batch, sequence, token budget; the software stack and its behaviours; precision;
// jitter and host overheads) and its restriction lists and pipeline split.
// Emits changed() on every edit; request() reads the widgets back as a PlanRequest, over the request
// last set, so an input without a widget is kept rather than reset.
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
  QCheckBox* moe_shared_expert_overlap_box() const { return shared_overlap_; }
  QComboBox* grad_bytes_box() const { return grad_bytes_; }
  QDoubleSpinBox* kernel_cv_box() const { return kernel_cv_; }
  QDoubleSpinBox* gpu_cv_box() const { return gpu_cv_; }
  QDoubleSpinBox* host_op_us_box() const { return host_op_us_; }
  QDoubleSpinBox* zero3_prefetch_box() const { return zero3_prefetch_; }
  QSpinBox* mtp_layers_box() const { return mtp_layers_; }
  QLineEdit* first_stage_layers_box() const { return first_stage_; }
  QLineEdit* last_stage_layers_box() const { return last_stage_; }
  QLineEdit* stage_layers_box() const { return stage_layers_; }
  QCheckBox* account_for_embedding_box() const { return account_embedding_; }
  QCheckBox* account_for_loss_box() const { return account_loss_; }

 public slots:
  void open_model_file();
  void open_cluster_file();

 signals:
  void changed();

 private:
  QLineEdit* restriction(const QString& name, const QString& placeholder);
  void update_moe_boxes();  // enabled only where the model has routed / shared experts

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
  QComboBox* grad_bytes_;           // "framework's" (0), 2 or 4
  QDoubleSpinBox* kernel_cv_;       // σ/μ per kernel, rank to rank
  QDoubleSpinBox* gpu_cv_;          // σ/μ per GPU, persistent
  QDoubleSpinBox* host_op_us_;      // at its minimum, -1: "framework's"
  QDoubleSpinBox* zero3_prefetch_;  // elements; at its minimum, -1: "framework's"
  QSpinBox* mtp_layers_;            // at its minimum, -1: "model's"
  QLineEdit *first_stage_, *last_stage_, *stage_layers_;
  QCheckBox *account_embedding_, *account_loss_;
  PlanRequest base_;  // the request last set: what request() starts from
  QLineEdit *tp_, *cp_, *cp_comm_, *ep_, *etp_, *pp_, *dp_, *zero_, *shard_group_, *micro_batch_, *vpp_, *recompute_,
      *sp_, *schedule_;
  QLabel* error_;
  bool loading_ = false;
};

}  // namespace loom::gui
