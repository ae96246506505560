#include "gui/inputs_panel.h"

#include <algorithm>

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>
#include <QToolButton>
#include <QVBoxLayout>

#include "core/framework.h"
#include "core/presets.h"

namespace loom::gui {

namespace {

// A choice the --framework makes unless one is picked: "framework's" (empty data), then each value.
template <typename E>
QComboBox* framework_choice(const char* object_name, std::initializer_list<E> values, const QString& tip) {
  auto* box = new QComboBox;
  box->setObjectName(object_name);
  box->addItem(QObject::tr("framework's"), QString());
  for (E value : values) box->addItem(to_string(value), QString(to_string(value)));
  box->setToolTip(tip);
  return box;
}

// A number the --framework sets unless one is given: its minimum, -1, reads "framework's" (the
// command line's negative default).
QDoubleSpinBox* framework_number(const char* object_name, double max, int decimals, const QString& tip) {
  auto* box = new QDoubleSpinBox;
  box->setObjectName(object_name);
  box->setRange(-1.0, max);
  box->setDecimals(decimals);
  box->setSpecialValueText(QObject::tr("framework's"));
  box->setValue(-1.0);
  box->setToolTip(tip);
  return box;
}

QDoubleSpinBox* variation_box(const char* object_name, const QString& tip) {
  auto* box = new QDoubleSpinBox;
  box->setObjectName(object_name);
  box->setRange(0.0, 1.0);  // the command line's bounds
  box->setDecimals(4);
  box->setSingleStep(0.01);
  box->setToolTip(tip);
  return box;
}

QComboBox* preset_box(const std::vector<std::string>& names, const QString& object_name) {
  auto* box = new QComboBox;
  box->setEditable(true);
  box->setInsertPolicy(QComboBox::NoInsert);
  box->setObjectName(object_name);
  for (const auto& n : names) box->addItem(QString::fromStdString(n));
  box->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  box->setMinimumContentsLength(12);
  return box;
}

QWidget* with_open_button(QComboBox* box, QObject* target, const char* slot, const QString& tip) {
  auto* row = new QWidget;
  auto* layout = new QHBoxLayout(row);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(4);
  layout->addWidget(box, 1);
  auto* open = new QToolButton;
  open->setText(QStringLiteral("…"));
  open->setToolTip(tip);
  QObject::connect(open, SIGNAL(clicked()), target, slot);
  layout->addWidget(open);
  return row;
}

}  // namespace

InputsPanel::InputsPanel(QWidget* parent) : QWidget(parent) {
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(6, 6, 6, 6);

  auto* specs = new QGroupBox(tr("Model, cluster, batch"));
  auto* form = new QFormLayout(specs);
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  model_ = preset_box(model_preset_names(), "model");
  model_->setToolTip(tr("preset name, Loom model JSON, or Hugging Face config.json"));
  cluster_ = preset_box(cluster_preset_names(), "cluster");
  cluster_->setToolTip(tr("cluster preset or cost file (JSON)"));
  form->addRow(tr("Model"),
               with_open_button(model_, this, SLOT(open_model_file()), tr("Open a model JSON or config.json")));
  form->addRow(tr("Cluster"),
               with_open_button(cluster_, this, SLOT(open_cluster_file()), tr("Open a cluster cost file")));

  gpus_ = new QSpinBox;
  gpus_->setObjectName("gpus");
  gpus_->setRange(1, 1 << 20);
  gpus_->setValue(16);
  gpus_->setKeyboardTracking(false);
  form->addRow(tr("GPUs"), gpus_);
  global_batch_ = new QSpinBox;
  global_batch_->setObjectName("global_batch");
  global_batch_->setRange(1, 1 << 30);
  global_batch_->setValue(64);
  global_batch_->setSuffix(tr(" seqs"));
  global_batch_->setKeyboardTracking(false);
  form->addRow(tr("Global batch"), global_batch_);
  seq_ = new QSpinBox;
  seq_->setObjectName("seq");
  seq_->setRange(0, 1 << 24);
  seq_->setSpecialValueText(tr("model's"));
  seq_->setKeyboardTracking(false);
  form->addRow(tr("Sequence"), seq_);
  tokens_b_ = new QDoubleSpinBox;
  tokens_b_->setObjectName("tokens");
  tokens_b_->setRange(0, 1e6);
  tokens_b_->setDecimals(3);  // a budget given in millions of tokens keeps them
  tokens_b_->setSuffix(tr(" B tokens"));
  tokens_b_->setSpecialValueText(tr("none"));
  tokens_b_->setKeyboardTracking(false);
  tokens_b_->setToolTip(tr("token budget, for days to train"));
  form->addRow(tr("Budget"), tokens_b_);
  // Item data holds the flag's value ("" where the item stands for the flag not given).
  framework_ = new QComboBox;
  framework_->setObjectName("framework");
  framework_->addItem(tr("none"), QString());
  for (const FrameworkPreset& f : framework_presets()) {
    framework_->addItem(f.name, QString(f.name));
    framework_->setItemData(framework_->count() - 1, QString(f.description), Qt::ToolTipRole);
  }
  // Every stack, each searched alone and ranked together (`loom plan --framework a,b,...`).
  QStringList all_stacks;
  for (const FrameworkPreset& f : framework_presets()) all_stacks << f.name;
  framework_->addItem(tr("all, compared"), all_stacks.join(','));
  framework_->setItemData(framework_->count() - 1,
                          tr("each stack searched alone, the rows ranked together with a framework column"),
                          Qt::ToolTipRole);
  framework_->setToolTip(tr("the software stack whose known behaviours apply; `loom plan --framework`"));
  form->addRow(tr("Framework"), framework_);
  attention_ = framework_choice("attention", {AttentionKernel::kFlash, AttentionKernel::kUnfused},
                                tr("the --framework's kernel (flash without one), or the one chosen"));
  form->addRow(tr("Attention"), attention_);
  elementwise_ =
      framework_choice("elementwise", {Elementwise::kFused, Elementwise::kEager},
                       tr("element-wise ops fused (torch.compile, TransformerEngine) or as eager PyTorch's "
                          "kernels; the --framework's (eager for torchtitan, else fused), or the one chosen"));
  form->addRow(tr("Element-wise"), elementwise_);
  flash_kernel_ = framework_choice(
      "flash_kernel", {FlashKernel::kFused, FlashKernel::kFa2},
      tr("the kernel flash attention runs: the cost file's fused attention (cuDNN's on Hopper) or "
         "FlashAttention-2's (PyTorch's flash backend); the --framework's (fa2 for torchtitan, else fused), "
         "or the one chosen"));
  form->addRow(tr("Flash kernel"), flash_kernel_);
  cp_attention_ = framework_choice(
      "cp_attention", {CpAttention::kTe, CpAttention::kPyTorch},
      tr("what runs context-parallel attention: TransformerEngine (Megatron-core) or PyTorch's ring attention "
         "(torchtitan); the --framework's (pytorch for torchtitan, else te), or the one chosen"));
  form->addRow(tr("CP attention"), cp_attention_);
  precision_ = new QComboBox;
  precision_->setObjectName("precision");
  precision_->addItems({to_string(Precision::kBf16), to_string(Precision::kFp8)});
  precision_->setToolTip(tr("linear-layer GEMMs in bf16, or in FP8 as TransformerEngine runs them"));
  form->addRow(tr("Precision"), precision_);
  fp8_recipe_ = new QComboBox;
  fp8_recipe_->setObjectName("fp8_recipe");
  for (Fp8Recipe recipe : {Fp8Recipe::kDelayed, Fp8Recipe::kTensorwise, Fp8Recipe::kRowwise})
    fp8_recipe_->addItem(to_string(recipe), QString(to_string(recipe)));
  fp8_recipe_->setToolTip(
      tr("FP8 scaling (precision fp8): delayed (TransformerEngine's amax history), tensorwise (current scaling) "
         "or rowwise (torchao's rowwise recipe, where the cost file has its measured GEMM figure)"));
  form->addRow(tr("FP8 recipe"), fp8_recipe_);
  cross_node_tp_ = new QCheckBox(tr("allow TP across nodes"));
  cross_node_tp_->setObjectName("allow_cross_node_tp");
  form->addRow(QString(), cross_node_tp_);
  sync_sends_ = new QCheckBox(tr("synchronous pipeline sends"));
  sync_sends_->setObjectName("sync_pipeline_sends");
  sync_sends_->setToolTip(
      tr("a stage waits for its pipeline send before its next pass, as Megatron-LM does by "
         "default (batch_p2p_sync); `loom plan --sync-pipeline-sends`"));
  form->addRow(QString(), sync_sends_);
  moe_imbalance_ = new QDoubleSpinBox;
  moe_imbalance_->setObjectName("moe_imbalance");
  moe_imbalance_->setRange(1.0, 1000.0);
  moe_imbalance_->setDecimals(3);
  moe_imbalance_->setSingleStep(0.05);
  moe_imbalance_->setValue(1.0);
  moe_imbalance_->setToolTip(
      tr("MoE under expert parallelism: the busiest EP rank's routed tokens over the mean (1: balanced; `loom run` "
         "logs the measured one); `loom plan --moe-imbalance`"));
  form->addRow(tr("MoE imbalance"), moe_imbalance_);
  shared_overlap_ = new QCheckBox(tr("shared expert beside the all-to-alls"));
  shared_overlap_->setObjectName("moe_shared_expert_overlap");
  shared_overlap_->setToolTip(
      tr("an MoE layer's shared expert runs while the EP dispatch and combine are in flight (Megatron-core's "
         "--moe-shared-expert-overlap); `loom plan --moe-shared-expert-overlap`"));
  form->addRow(QString(), shared_overlap_);
  grad_bytes_ = new QComboBox;
  grad_bytes_->setObjectName("grad_bytes");
  grad_bytes_->addItem(tr("framework's"), 0);
  grad_bytes_->addItem(tr("2 (bf16)"), 2);
  grad_bytes_->addItem(tr("4 (fp32 main grads)"), 4);
  grad_bytes_->setToolTip(tr("bytes per gradient element; `loom plan --grad-bytes`"));
  form->addRow(tr("Gradient bytes"), grad_bytes_);
  kernel_cv_ = variation_box("kernel_cv", tr("each kernel's time varies by this σ/μ from rank to rank; every "
                                             "synchronisation waits for the slowest; `loom plan --kernel-cv`"));
  form->addRow(tr("Kernel σ/μ"), kernel_cv_);
  gpu_cv_ = variation_box("gpu_cv", tr("each GPU's speed differs persistently by this σ/μ; the step waits for the "
                                       "slowest GPU of the world; `loom plan --gpu-cv`"));
  form->addRow(tr("GPU σ/μ"), gpu_cv_);
  host_op_us_ = framework_number(
      "host_op_us", 1e5, 3,
      tr("host time to issue one GPU op, µs: a pass is never shorter than its ops times this; `loom plan "
         "--host-op-us`"));
  form->addRow(tr("Host µs per op"), host_op_us_);
  zero3_prefetch_ = framework_number(
      "zero3_prefetch", 1e15, 0,
      tr("ZeRO-3: parameter elements each unit's hook prefetches beyond the unit computing (0: one unit ahead, as "
         "FSDP; DeepSpeed's stage3_prefetch_bucket_size); `loom plan --zero3-prefetch`"));
  form->addRow(tr("ZeRO-3 prefetch"), zero3_prefetch_);
  mtp_layers_ = new QSpinBox;
  mtp_layers_->setObjectName("mtp_layers");
  mtp_layers_->setRange(-1, kMaxMtpLayers);
  mtp_layers_->setSpecialValueText(tr("model's"));
  mtp_layers_->setValue(-1);
  mtp_layers_->setToolTip(
      tr("multi-token-prediction modules after the last layer, on the last pipeline stage (0: none; the model's: "
         "config.json's num_nextn_predict_layers); `loom plan --mtp-layers`"));
  form->addRow(tr("MTP modules"), mtp_layers_);
  outer->addWidget(specs);

  auto* limits = new QGroupBox(tr("Restrict the search"));
  auto* lform = new QFormLayout(limits);
  lform->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  const QString any = tr("any");
  lform->addRow("TP", tp_ = restriction("tp", any + tr(" (e.g. 4,8)")));
  lform->addRow("CP", cp_ = restriction("cp", tr("1; long sequences: any (e.g. 2,4)")));
  lform->addRow(tr("CP exchange"), cp_comm_ = restriction("cp_comm", tr("p2p,a2a (or all_gather)")));
  lform->addRow("EP", ep_ = restriction("ep", tr("1; MoE models: any dividing the experts (e.g. 8)")));
  lform->addRow(tr("Expert TP"), etp_ = restriction("etp", tr("TP; MoE models under TP: also 1 (whole experts)")));
  lform->addRow("PP", pp_ = restriction("pp", any));
  lform->addRow("DP", dp_ = restriction("dp", any));
  lform->addRow("ZeRO", zero_ = restriction("zero", any + " (0-3)"));
  lform->addRow(tr("Shard group"), shard_group_ = restriction("shard_group", any + tr(" (ZeRO-3 HSDP, e.g. 8)")));
  lform->addRow(tr("Micro-batch"), micro_batch_ = restriction("micro_batch", any));
  lform->addRow("VPP", vpp_ = restriction("vpp", any));
  lform->addRow(tr("Recompute"), recompute_ = restriction("recompute", any + " (none,selective,full,op)"));
  lform->addRow("SP", sp_ = restriction("sp", any + " (on,off)"));
  lform->addRow(tr("Schedule"), schedule_ = restriction("schedule", any + " (gpipe,1f1b,interleaved,zb)"));
  lform->addRow(tr("First stage layers"), first_stage_ = restriction("first_stage_layers", tr("even split")));
  lform->addRow(tr("Last stage layers"), last_stage_ = restriction("last_stage_layers", tr("even split")));
  first_stage_->setToolTip(
      tr("layers of the first pipeline stage, one value (Megatron-LM's "
         "--decoder-first-pipeline-num-layers); `loom plan --first-stage-layers`"));
  last_stage_->setToolTip(
      tr("layers of the last pipeline stage, one value (Megatron-LM's "
         "--decoder-last-pipeline-num-layers); `loom plan --last-stage-layers`"));
  lform->addRow(tr("Stage layers"), stage_layers_ = restriction("stage_layers", tr("even split (e.g. 7,9,9,7)")));
  stage_layers_->setToolTip(
      tr("the layers of every pipeline stage, one comma list in stage order; pp is its "
         "length; `loom plan --stage-layers`"));
  account_embedding_ = new QCheckBox(tr("embedding counts as a layer"));
  account_embedding_->setObjectName("account_for_embedding");
  account_embedding_->setToolTip(tr("in the pipeline split (Megatron-LM); `loom plan --account-for-embedding`"));
  lform->addRow(QString(), account_embedding_);
  account_loss_ = new QCheckBox(tr("loss counts as a layer"));
  account_loss_->setObjectName("account_for_loss");
  account_loss_->setToolTip(tr("in the pipeline split (Megatron-LM); `loom plan --account-for-loss`"));
  lform->addRow(QString(), account_loss_);
  outer->addWidget(limits);

  error_ = new QLabel;
  error_->setObjectName("input_error");
  error_->setWordWrap(true);
  error_->setStyleSheet("color: #C0392B;");
  error_->hide();
  outer->addWidget(error_);

  auto emit_changed = [this] {
    if (!loading_) emit changed();
  };
  // Connected before emit_changed, so a request read on changed() already sees the boxes for the new model.
  connect(model_, &QComboBox::currentTextChanged, this, &InputsPanel::update_moe_boxes);
  connect(model_, &QComboBox::currentTextChanged, this, emit_changed);
  connect(cluster_, &QComboBox::currentTextChanged, this, emit_changed);
  connect(gpus_, &QSpinBox::valueChanged, this, emit_changed);
  connect(global_batch_, &QSpinBox::valueChanged, this, emit_changed);
  connect(seq_, &QSpinBox::valueChanged, this, emit_changed);
  connect(tokens_b_, &QDoubleSpinBox::valueChanged, this, emit_changed);
  connect(framework_, &QComboBox::currentTextChanged, this, emit_changed);
  connect(attention_, &QComboBox::currentTextChanged, this, emit_changed);
  connect(elementwise_, &QComboBox::currentTextChanged, this, emit_changed);
  connect(flash_kernel_, &QComboBox::currentTextChanged, this, emit_changed);
  connect(cp_attention_, &QComboBox::currentTextChanged, this, emit_changed);
  connect(precision_, &QComboBox::currentTextChanged, this, emit_changed);
  connect(precision_, &QComboBox::currentTextChanged, this,
          [this](const QString& p) { fp8_recipe_->setEnabled(p == to_string(Precision::kFp8)); });
  fp8_recipe_->setEnabled(false);
  connect(fp8_recipe_, &QComboBox::currentTextChanged, this, emit_changed);
  connect(cross_node_tp_, &QCheckBox::toggled, this, emit_changed);
  connect(sync_sends_, &QCheckBox::toggled, this, emit_changed);
  connect(moe_imbalance_, &QDoubleSpinBox::valueChanged, this, emit_changed);
  connect(shared_overlap_, &QCheckBox::toggled, this, emit_changed);
  connect(grad_bytes_, &QComboBox::currentIndexChanged, this, emit_changed);
  for (QDoubleSpinBox* box : {kernel_cv_, gpu_cv_, host_op_us_, zero3_prefetch_})
    connect(box, &QDoubleSpinBox::valueChanged, this, emit_changed);
  connect(mtp_layers_, &QSpinBox::valueChanged, this, emit_changed);
  for (QCheckBox* box : {account_embedding_, account_loss_}) connect(box, &QCheckBox::toggled, this, emit_changed);
  for (QLineEdit* e : {tp_, cp_, cp_comm_, ep_, etp_, pp_, dp_, zero_, shard_group_, micro_batch_, vpp_, recompute_,
                       sp_, schedule_, first_stage_, last_stage_, stage_layers_})
    connect(e, &QLineEdit::editingFinished, this, emit_changed);
  update_moe_boxes();
}

// The MoE inputs apply to a model with routed experts (the imbalance) and with a shared expert (its
// overlap) only; resolve_specs refuses them elsewhere. A box that does not apply is disabled and read
// as its neutral value, keeping what was typed for when a model it applies to comes back. A model that
// does not load (a path being typed, a typo) leaves both enabled: its own error is what the search shows.
void InputsPanel::update_moe_boxes() {
  const Result<ModelSpec> model = load_model(model_->currentText().trimmed().toStdString());
  const bool routed = !model || model->moe.active();
  const bool shared = !model || model->moe.shared_ffn > 0;
  moe_imbalance_->setEnabled(routed);
  shared_overlap_->setEnabled(shared);
  auto explain = [](QWidget* box, bool applies, const QString& why) {
    if (!box->property("base_tip").isValid()) box->setProperty("base_tip", box->toolTip());
    const QString base = box->property("base_tip").toString();
    box->setToolTip(applies ? base : base + "\n(" + why + ")");
  };
  explain(moe_imbalance_, routed, tr("this model has no routed experts"));
  explain(shared_overlap_, shared, tr("this model has no shared expert"));
}

QLineEdit* InputsPanel::restriction(const QString& name, const QString& placeholder) {
  auto* edit = new QLineEdit;
  edit->setObjectName(name);
  edit->setPlaceholderText(placeholder);
  edit->setClearButtonEnabled(true);
  edit->setToolTip(tr("one value or a comma list, as `loom plan --%1`").arg(QString(name).replace('_', '-')));
  return edit;
}

PlanRequest InputsPanel::request() const {
  PlanRequest r = base_;
  r.specs.model = model_->currentText().trimmed().toStdString();
  r.specs.cluster = cluster_->currentText().trimmed().toStdString();
  r.specs.gpus = gpus_->value();
  r.specs.global_batch = global_batch_->value();
  r.specs.seq = seq_->value();
  r.specs.tokens = tokens_b_->value() * 1e9;
  r.specs.framework = framework_->currentData().toString().toStdString();
  r.specs.attention = attention_->currentData().toString().toStdString();
  r.specs.elementwise = elementwise_->currentData().toString().toStdString();
  r.specs.flash_kernel = flash_kernel_->currentData().toString().toStdString();
  r.specs.cp_attention = cp_attention_->currentData().toString().toStdString();
  r.specs.precision = precision_->currentText().toStdString();
  r.specs.fp8_recipe = r.specs.precision == to_string(Precision::kFp8)
                           ? fp8_recipe_->currentData().toString().toStdString()
                           : std::string();
  r.specs.allow_cross_node_tp = cross_node_tp_->isChecked();
  r.specs.sync_pipeline_sends = sync_sends_->isChecked();
  r.specs.moe_imbalance = moe_imbalance_->isEnabled() ? moe_imbalance_->value() : 1.0;
  r.specs.moe_shared_expert_overlap = shared_overlap_->isEnabled() && shared_overlap_->isChecked();
  r.specs.grad_bytes = grad_bytes_->currentData().toInt();
  r.specs.kernel_cv = kernel_cv_->value();
  r.specs.gpu_cv = gpu_cv_->value();
  // Below zero (typed between -1 and 0) is the framework's, as -1 is.
  r.specs.host_op_us = host_op_us_->value() < 0 ? -1.0 : host_op_us_->value();
  r.specs.zero3_prefetch = zero3_prefetch_->value() < 0 ? -1.0 : zero3_prefetch_->value();
  r.specs.mtp_layers = mtp_layers_->value();
  auto text = [](const QLineEdit* e) { return e->text().remove(' ').toStdString(); };
  r.config.tp = text(tp_);
  r.config.cp = text(cp_);
  r.config.cp_comm = text(cp_comm_);
  r.config.ep = text(ep_);
  r.config.etp = text(etp_);
  r.config.pp = text(pp_);
  r.config.dp = text(dp_);
  r.config.zero = text(zero_);
  r.config.shard_group = text(shard_group_);
  r.config.micro_batch = text(micro_batch_);
  r.config.vpp = text(vpp_);
  r.config.recompute = text(recompute_);
  r.config.sp = text(sp_);
  r.config.schedule = text(schedule_);
  r.config.first_stage_layers = text(first_stage_);
  r.config.last_stage_layers = text(last_stage_);
  r.config.stage_layers = text(stage_layers_);
  r.config.account_for_embedding = account_embedding_->isChecked() ? "on" : "";
  r.config.account_for_loss = account_loss_->isChecked() ? "on" : "";
  return r;
}

void InputsPanel::set_request(const PlanRequest& r) {
  loading_ = true;
  base_ = r;
  model_->setCurrentText(QString::fromStdString(r.specs.model));
  cluster_->setCurrentText(QString::fromStdString(r.specs.cluster));
  gpus_->setValue(static_cast<int>(r.specs.gpus));
  global_batch_->setValue(static_cast<int>(r.specs.global_batch));
  seq_->setValue(static_cast<int>(r.specs.seq));
  tokens_b_->setValue(r.specs.tokens / 1e9);
  // A list of stacks given on the command line (`--framework a,b`) becomes an item of its own.
  const QString stacks = QString::fromStdString(r.specs.framework);
  if (framework_->findData(stacks) < 0) framework_->addItem(stacks, stacks);
  framework_->setCurrentIndex(framework_->findData(stacks));
  attention_->setCurrentIndex(std::max(0, attention_->findData(QString::fromStdString(r.specs.attention))));
  elementwise_->setCurrentIndex(std::max(0, elementwise_->findData(QString::fromStdString(r.specs.elementwise))));
  flash_kernel_->setCurrentIndex(std::max(0, flash_kernel_->findData(QString::fromStdString(r.specs.flash_kernel))));
  cp_attention_->setCurrentIndex(std::max(0, cp_attention_->findData(QString::fromStdString(r.specs.cp_attention))));
  precision_->setCurrentText(QString::fromStdString(r.specs.precision));
  if (!r.specs.fp8_recipe.empty())
    if (auto recipe = parse_fp8_recipe(r.specs.fp8_recipe))  // "current" is tensorwise's other name
      fp8_recipe_->setCurrentIndex(fp8_recipe_->findData(QString(to_string(*recipe))));
  cross_node_tp_->setChecked(r.specs.allow_cross_node_tp);
  sync_sends_->setChecked(r.specs.sync_pipeline_sends);
  moe_imbalance_->setValue(r.specs.moe_imbalance);
  shared_overlap_->setChecked(r.specs.moe_shared_expert_overlap);
  grad_bytes_->setCurrentIndex(std::max(0, grad_bytes_->findData(r.specs.grad_bytes)));
  kernel_cv_->setValue(r.specs.kernel_cv);
  gpu_cv_->setValue(r.specs.gpu_cv);
  host_op_us_->setValue(r.specs.host_op_us < 0 ? -1.0 : r.specs.host_op_us);
  zero3_prefetch_->setValue(r.specs.zero3_prefetch < 0 ? -1.0 : r.specs.zero3_prefetch);
  mtp_layers_->setValue(static_cast<int>(std::clamp<long long>(r.specs.mtp_layers, -1, kMaxMtpLayers)));
  first_stage_->setText(QString::fromStdString(r.config.first_stage_layers));
  last_stage_->setText(QString::fromStdString(r.config.last_stage_layers));
  stage_layers_->setText(QString::fromStdString(r.config.stage_layers));
  auto on = [](const std::string& v) { return v == "on" || v == "true" || v == "1"; };  // as --sp reads them
  account_embedding_->setChecked(on(r.config.account_for_embedding));
  account_loss_->setChecked(on(r.config.account_for_loss));
  tp_->setText(QString::fromStdString(r.config.tp));
  cp_->setText(QString::fromStdString(r.config.cp));
  cp_comm_->setText(QString::fromStdString(r.config.cp_comm));
  ep_->setText(QString::fromStdString(r.config.ep));
  etp_->setText(QString::fromStdString(r.config.etp));
  pp_->setText(QString::fromStdString(r.config.pp));
  dp_->setText(QString::fromStdString(r.config.dp));
  zero_->setText(QString::fromStdString(r.config.zero));
  shard_group_->setText(QString::fromStdString(r.config.shard_group));
  micro_batch_->setText(QString::fromStdString(r.config.micro_batch));
  vpp_->setText(QString::fromStdString(r.config.vpp));
  recompute_->setText(QString::fromStdString(r.config.recompute));
  sp_->setText(QString::fromStdString(r.config.sp));
  schedule_->setText(QString::fromStdString(r.config.schedule));
  loading_ = false;
}

void InputsPanel::set_error(const QString& message) {
  error_->setText(message);
  error_->setVisible(!message.isEmpty());
}

void InputsPanel::open_model_file() {
  const QString path = QFileDialog::getOpenFileName(
      this, tr("Open model"), QString(), tr("Model JSON or Hugging Face config.json (*.json);;All files (*)"));
  if (!path.isEmpty()) model_->setCurrentText(path);
}

void InputsPanel::open_cluster_file() {
  const QString path =
      QFileDialog::getOpenFileName(this, tr("Open cluster"), QString(), tr("Cost files (*.json);;All files (*)"));
  if (!path.isEmpty()) cluster_->setCurrentText(path);
}

}  // namespace loom::gui
