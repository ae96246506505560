#include "exec/parallel/pipeline.h"

#include <stdexcept>

#include <fmt/format.h>

#include "core/trace_names.h"

namespace loom::exec {

namespace {
// Messages are tagged by the edge between virtual stages e and e + 1 and the micro-batch.
int activation_tag(int micro_batch, int edge, int virtual_stages) { return 2 * (micro_batch * virtual_stages + edge); }
int gradient_tag(int micro_batch, int edge, int virtual_stages) {
  return activation_tag(micro_batch, edge, virtual_stages) + 1;
}
}  // namespace

Tensor PipelineRunner::receive(int peer, int tag, const std::string& what, MemoryCategory category) {
  TraceScope scope(tracer_, "recv " + what, "comm", kCommLane);
  Tensor t =
      backend_.empty(chunks_.front()->local_tokens(), chunks_.front()->hidden(), category, backend_.compute_dtype());
  groups_.pp->irecv(t.ref(), t.numel(), peer, tag)->wait();
  return t;
}

void PipelineRunner::send(Tensor buffer, int peer, int tag, const std::string& what, bool gradient) {
  TraceScope scope(tracer_, "send " + what, "comm", kCommLane);
  for (PendingSend& s : sends_)
    if (s.gradient == gradient) s.request->wait();  // one send per direction in flight
  reap_sends(false);
  // Until the peer has it, the tensor is a send buffer, no longer an activation of this stage.
  buffer = backend_.recharge(std::move(buffer), MemoryCategory::kBuffers);
  auto request = groups_.pp->isend(buffer.ref(), buffer.numel(), peer, tag);
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
  const ParallelConfig& c = groups_.config;
  // Layouts are checked before a run starts: a schedule that cannot be made here is Loom's fault.
  auto programs = make_schedule(c.schedule, c.pp, micro_batches, static_cast<int>(chunks_.size()));
  if (!programs.ok()) throw std::logic_error("pipeline schedule: " + programs.error().message);
  backend_.loss_reset();
  for (const PipelineOp& op : (*programs)[groups_.coords.pp_rank]) {
    const MicroBatch mb = load(op.micro_batch);
    switch (op.pass) {
      case Pass::kF: forward(op, mb, loss_scale); break;
      case Pass::kB:
        before_backward(op.micro_batch);
        backward(op, mb);
        break;
      case Pass::kW: {
        // Zero-bubble's W pass: the weight gradients its B pass deferred, then their units' hooks (the
        // DP reduction starts on the last micro-batch's, so the hook learns which micro-batch this is).
        before_backward(op.micro_batch);
        const int v = virtual_stage(op.chunk, groups_.coords.pp_rank, groups_.config.pp);
        TraceScope scope(tracer_, trace_names::weight_grad(v, op.micro_batch), "compute", kComputeLane);
        chunks_[op.chunk]->weight_gradients(op.micro_batch);
        break;
      }
    }
    reap_sends(false);
  }
  for (const GptStage* chunk : chunks_)
    if (chunk->pending_weight_gradients() > 0)
      throw std::logic_error("pipeline schedule: a B pass without its W pass in the step");
  reap_sends(true);
  return backend_.loss_result();  // 0 but on the last stage
}

void PipelineRunner::forward(const PipelineOp& op, const MicroBatch& mb, float loss_scale) {
  const int stages = groups_.config.pp, stage = groups_.coords.pp_rank;
  const int virtual_stages = stages * static_cast<int>(chunks_.size());
  const int v = virtual_stage(op.chunk, stage, stages), i = op.micro_batch;
  Tensor input;
  if (v > 0)
    input = receive((stage + stages - 1) % stages, activation_tag(i, v - 1, virtual_stages),
                    trace_names::forward(v - 1, i), MemoryCategory::kActivations);
  Tensor out;
  {
    TraceScope scope(tracer_, trace_names::forward(v, i), "compute", kComputeLane);
    out = chunks_[op.chunk]->forward(i, mb, std::move(input), loss_scale);
  }
  if (v < virtual_stages - 1)
    send(std::move(out), (stage + 1) % stages, activation_tag(i, v, virtual_stages), trace_names::forward(v, i), false);
}

void PipelineRunner::backward(const PipelineOp& op, const MicroBatch& mb) {
  const int stages = groups_.config.pp, stage = groups_.coords.pp_rank;
  const int virtual_stages = stages * static_cast<int>(chunks_.size());
  const int v = virtual_stage(op.chunk, stage, stages), i = op.micro_batch;
  Tensor din;
  {
    Tensor dout;
    if (v < virtual_stages - 1)
      dout = receive((stage + 1) % stages, gradient_tag(i, v, virtual_stages), trace_names::backward(v + 1, i),
                     MemoryCategory::kBuffers);
    TraceScope scope(tracer_, trace_names::backward(v, i), "compute", kComputeLane);
    din = chunks_[op.chunk]->backward(i, mb, std::move(dout));
  }  // the received gradient is freed before the one this stage sends is charged as a buffer
  if (v > 0)
    send(std::move(din), (stage + stages - 1) % stages, gradient_tag(i, v - 1, virtual_stages),
         trace_names::backward(v, i), true);
}

}  // namespace loom::exec
