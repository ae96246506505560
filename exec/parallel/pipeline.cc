#include "exec/parallel/pipeline.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/trace_names.h"

namespace loom::exec {

std::vector<PipelineAction> pipeline_schedule(Schedule schedule, int stages, int stage, int micro_batches, int chunks) {
  std::vector<PipelineAction> actions;
  if (schedule == Schedule::kGPipe) {
    for (int i = 0; i < micro_batches; ++i) actions.push_back({true, i, 0});
    for (int i = 0; i < micro_batches; ++i) actions.push_back({false, i, 0});
    return actions;
  }
  // 1F1B is the interleaved order with one chunk, except for its shorter warm-up.
  const int group = stages * chunks, total = micro_batches * chunks;
  auto action = [&](int k, bool forward) {
    const int in_group = (k % group) / stages;
    return PipelineAction{forward, (k / group) * stages + k % stages, forward ? in_group : chunks - 1 - in_group};
  };
  const int warmup = schedule == Schedule::kInterleaved ? std::min((stages - stage - 1) * 2 + (chunks - 1) * stages, total)
                                                        : std::min(stages - stage - 1, micro_batches);
  if (schedule != Schedule::kInterleaved) {
    for (int i = 0; i < warmup; ++i) actions.push_back({true, i, 0});
    for (int i = 0; i < micro_batches - warmup; ++i) {
      actions.push_back({true, warmup + i, 0});
      actions.push_back({false, i, 0});
    }
    for (int i = micro_batches - warmup; i < micro_batches; ++i) actions.push_back({false, i, 0});
    return actions;
  }
  for (int k = 0; k < warmup; ++k) actions.push_back(action(k, true));
  for (int k = 0; k < total - warmup; ++k) {
    actions.push_back(action(warmup + k, true));
    actions.push_back(action(k, false));
  }
  for (int k = total - warmup; k < total; ++k) actions.push_back(action(k, false));
  return actions;
}

namespace {
// Messages are tagged by the edge between virtual stages e and e + 1 and the micro-batch.
int activation_tag(int micro_batch, int edge, int virtual_stages) { return 2 * (micro_batch * virtual_stages + edge); }
int gradient_tag(int micro_batch, int edge, int virtual_stages) { return activation_tag(micro_batch, edge, virtual_stages) + 1; }
}  // namespace

Tensor PipelineRunner::receive(int peer, int tag, const std::string& what, MemoryCategory category) {
  TraceScope scope(tracer_, "recv " + what, "comm", kCommLane);
  Tensor t = backend_.empty(chunks_.front()->local_tokens(), chunks_.front()->hidden(), category);
  groups_.pp->irecv(t.data(), t.numel(), peer, tag)->wait();
  return t;
}

void PipelineRunner::send(Tensor buffer, int peer, int tag, const std::string& what, bool gradient) {
  TraceScope scope(tracer_, "send " + what, "comm", kCommLane);
  for (PendingSend& s : sends_)
    if (s.gradient == gradient) s.request->wait();  // one send per direction in flight
  reap_sends(false);
  // Until the peer has it, the tensor is a send buffer, no longer an activation of this stage.
  buffer = backend_.recharge(std::move(buffer), MemoryCategory::kBuffers);
  auto request = groups_.pp->isend(buffer.data(), buffer.numel(), peer, tag);
  sends_.push_back({std::move(request), std::move(buffer), gradient});
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
  const int chunks = static_cast<int>(chunks_.size()), virtual_stages = stages * chunks;
  const int prev = (stage + stages - 1) % stages, next = (stage + 1) % stages;
  double loss_sum = 0;
  for (const PipelineAction& a : pipeline_schedule(groups_.config.schedule, stages, stage, micro_batches, chunks)) {
    const MicroBatch mb = load(a.micro_batch);
    const int v = virtual_stage(a.chunk, stage, stages);
    const bool first = v == 0, last = v == virtual_stages - 1;
    GptStage& chunk = *chunks_[a.chunk];
    if (a.forward) {
      Tensor input;
      if (!first)
        input = receive(prev, activation_tag(a.micro_batch, v - 1, virtual_stages),
                        trace_names::forward(v - 1, a.micro_batch), MemoryCategory::kActivations);
      Tensor out;
      {
        TraceScope scope(tracer_, trace_names::forward(v, a.micro_batch), "compute", kComputeLane);
        out = chunk.forward(a.micro_batch, mb, std::move(input), loss_scale, &loss_sum);
      }
      if (!last)
        send(std::move(out), next, activation_tag(a.micro_batch, v, virtual_stages), trace_names::forward(v, a.micro_batch),
             false);
    } else {
      before_backward(a.micro_batch);
      Tensor din;
      {
        Tensor dout;
        if (!last)
          dout = receive(next, gradient_tag(a.micro_batch, v, virtual_stages), trace_names::backward(v + 1, a.micro_batch),
                         MemoryCategory::kBuffers);
        TraceScope scope(tracer_, trace_names::backward(v, a.micro_batch), "compute", kComputeLane);
        din = chunk.backward(a.micro_batch, mb, dout);
      }  // the received gradient is freed before the one this stage sends is charged as a buffer
      if (!first)
        send(std::move(din), prev, gradient_tag(a.micro_batch, v - 1, virtual_stages),
             trace_names::backward(v, a.micro_batch), true);
    }
    reap_sends(false);
  }
  reap_sends(true);
  return loss_sum;
}

}  // namespace loom::exec
