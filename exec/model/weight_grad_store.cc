#include "exec/model/weight_grad_store.h"

#include <stdexcept>
#include <string>

#include "exec/backend.h"
#include "exec/model/gpt_stage.h"

namespace loom::exec {

void WeightGradStore::set_unit(int unit, float* grads, std::int64_t elements) {
  if (!deferred_) return;
  std::erase_if(units_, [&](const UnitGrads& u) { return u.unit == unit; });
  units_.push_back({unit, grads, elements});
}

void WeightGradStore::put(const char* name, float* grads, Work work) {
  if (!deferred_) {
    work(grads);
    return;
  }
  for (const UnitGrads& u : units_)
    if (grads >= u.grads && grads < u.grads + u.elements) {
      items_.push_back({name, u.unit, grads - u.grads, std::move(work)});
      return;
    }
  throw std::logic_error(std::string("weight-gradient store: ") + name + "'s gradient is in no unit of the pass");
}

void WeightGradStore::ready(int unit) {
  if (!deferred_) {
    params_.gradients_ready(unit);
    return;
  }
  items_.push_back({nullptr, unit, 0, {}});
}

void WeightGradStore::keep(Tensor&& tensor) {
  if (!deferred_) {
    tensor.reset();
    return;
  }
  if (!tensor.empty()) unsettled_.push_back(std::move(tensor));
}

void WeightGradStore::settle() {
  for (Tensor& t : unsettled_) kept_.push_back(backend_.recharge(std::move(t), MemoryCategory::kActivations));
  unsettled_.clear();
}

void WeightGradStore::close(int micro_batch) {
  if (!deferred_) return;
  settle();
  if (pending_.contains(micro_batch))
    throw std::logic_error("weight-gradient store: a second B pass of micro-batch " + std::to_string(micro_batch));
  pending_[micro_batch] = Pass{std::move(items_), std::move(kept_)};
  items_.clear();
  kept_.clear();
  units_.clear();
}

void WeightGradStore::run(int micro_batch) {
  auto it = pending_.find(micro_batch);
  if (it == pending_.end())
    throw std::logic_error("weight-gradient store: W pass of micro-batch " + std::to_string(micro_batch) +
                           " before its B pass");
  Pass pass = std::move(it->second);
  pending_.erase(it);
  OpSlices op(tracer_, kComputeLane);
  for (Item& item : pass.items) {
    if (item.name == nullptr) {
      op.end();
      params_.gradients_ready(item.unit);
      continue;
    }
    op.next(item.name);
    item.work(params_.gradients(item.unit) + item.offset);
  }
}  // the tensors the work read are freed here

}  // namespace loom::exec
