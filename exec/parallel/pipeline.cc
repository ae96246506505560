#include "exec/parallel/pipeline.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/trace_names.h"

namespace loom::exec {

std::vector<PipelineAction> pipeline_schedule(Schedule schedule, int stages, int stage, int micro_batches) {
  std::vector<PipelineAction> actions;
  if (schedule == Schedule::kGPipe) {
    for (int i = 0; i < micro_batches; ++i) actions.push_back({true, i});
    for (int i = 0; i < micro_batches; ++i) actions.push_back({false, i});
    return actions;
  }
  const int warmup = std::min(stages - stage - 1, micro_batches);
  for (int i = 0; i < warmup; ++i) actions.push_back({true, i});
  for (int i = 0; i < micro_batches - warmup; ++i) {
    actions.push_back({true, warmup + i});
    actions.push_back({false, i});
  }
  for (int i = micro_batches - warmup; i < micro_batches; ++i) actions.push_back({false, i});
  return actions;
}

namespace {
int activation_tag(int micro_batch) { return 2 * micro_batch; }
int gradient_tag(int micro_batch) { return 2 * micro_batch + 1; }
}  // namespace

Tensor PipelineRunner::receive(int peer, int tag, const char* what, int micro_batch, MemoryCategory category) {
  TraceScope scope(tracer_, fmt::format("recv {}", what), "comm", kCommLane);
  Tensor t = backend_.empty(stage_.local_tokens(), stage_.hidden(), category);
  groups_.pp->irecv(t.data(), t.numel(), peer, tag)->wait();
  (void)micro_batch;
  return t;
}

void PipelineRunner::send(Tensor buffer, int peer, int tag, const char* what, int micro_batch) {
  TraceScope scope(tracer_, fmt::format("send {}", what), "comm", kCommLane);
  // Until the peer has it, the tensor is a send buffer, no longer an activation of this stage.
  buffer = backend_.recharge(std::move(buffer), MemoryCategory::kBuffers);
  auto request = groups_.pp->isend(buffer.data(), buffer.numel(), peer, tag);
  sends_.push_back({std::move(request), std::move(buffer)});
  (void)micro_batch;
}

void PipelineRunner::reap_sends(bool wait) {
  if (wait) {
    for (auto& s : sends_) s.request->wait();
    sends_.clear();
    return;
  }
  std::erase_if(sends_, [](PendingSend& s) { return s.request->test(); });
}

double PipelineRunner::run(int micro_batches, float loss_scale, const std::function<MicroBatch(int)>& load,
                           const std::function<void(int)>& before_backward) {
  const int stages = groups_.config.pp, stage = groups_.coords.pp_rank;
  const bool first = stage == 0, last = stage == stages - 1;
  double loss_sum = 0;
  for (const PipelineAction& a : pipeline_schedule(groups_.config.schedule, stages, stage, micro_batches)) {
    const MicroBatch mb = load(a.micro_batch);
    if (a.forward) {
      Tensor input;
      if (!first)
        input = receive(stage - 1, activation_tag(a.micro_batch),
                        trace_names::forward(stage - 1, a.micro_batch).c_str(), a.micro_batch,
                        MemoryCategory::kActivations);
      Tensor out;
      {
        TraceScope scope(tracer_, trace_names::forward(stage, a.micro_batch), "compute", kComputeLane);
        out = stage_.forward(a.micro_batch, mb, std::move(input), loss_scale, &loss_sum);
      }
      if (!last) send(std::move(out), stage + 1, activation_tag(a.micro_batch),
                      trace_names::forward(stage, a.micro_batch).c_str(), a.micro_batch);
    } else {
      before_backward(a.micro_batch);
      Tensor dout;
      if (!last)
        dout = receive(stage + 1, gradient_tag(a.micro_batch), trace_names::backward(stage + 1, a.micro_batch).c_str(),
                       a.micro_batch, MemoryCategory::kBuffers);
      Tensor din;
      {
        TraceScope scope(tracer_, trace_names::backward(stage, a.micro_batch), "compute", kComputeLane);
        din = stage_.backward(a.micro_batch, mb, dout);
      }
      if (!first) send(std::move(din), stage - 1, gradient_tag(a.micro_batch),
                       trace_names::backward(stage, a.micro_batch).c_str(), a.micro_batch);
    }
    reap_sends(false);
  }
  reap_sends(true);
  return loss_sum;
}

}  // namespace loom::exec
