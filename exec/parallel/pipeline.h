// Pipeline parallelism: the runner that executes one stage's program of forward and backward
// passes (core/schedule.h: GPipe, 1F1B, interleaved 1F1B and zero-bubble's B and W passes, the
// simulator's very programs) with non-blocking point-to-point messages. Each stage waits on the receives its program
// needs next and keeps at most one send per direction in flight (activations forward, gradients backward): before a new
// send it waits for the previous one, whose buffer is then freed, as Megatron-LM waits on its p2p requests. That wait
// cannot deadlock: every stage runs the same sequence of (micro-batch, chunk) pairs, so a peer receives the messages of
// one direction in the order they are sent, and the previous message is one the peer's program receives before it needs
// anything this stage has not sent yet.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/schedule.h"
#include "exec/model/gpt_stage.h"
#include "exec/process_groups.h"
#include "exec/trace.h"

namespace loom::exec {

class PipelineRunner {
 public:
  // One GptStage per model chunk of this stage (one without interleaving).
  PipelineRunner(std::vector<GptStage*> chunks, ProcessGroups& groups, Backend& backend, Tracer* tracer)
      : chunks_(std::move(chunks)), groups_(groups), backend_(backend), tracer_(tracer) {}

  // Runs one step's forwards and backwards in the order of make_schedule's program for this stage
  // (zero-bubble's backwards split into B and W passes). load(i) gives micro-batch i's data;
  // before_backward(i) is called before each backward and W pass (ZeRO and the DP buckets need to know
  // the last micro-batch). Returns the summed token losses on the last stage (0 elsewhere).
  double run(int micro_batches, float loss_scale, const std::function<MicroBatch(int)>& load,
             const std::function<void(int)>& before_backward);

 private:
  struct PendingSend {
    std::unique_ptr<Request> request;
    Tensor buffer;
    bool gradient = false;
  };
  void forward(const PipelineOp& op, const MicroBatch& mb, float loss_scale);
  void backward(const PipelineOp& op, const MicroBatch& mb);
  Tensor receive(int peer, int tag, const std::string& what, MemoryCategory category);
  void send(Tensor buffer, int peer, int tag, const std::string& what, bool gradient);
  void reap_sends(bool wait);

  std::vector<GptStage*> chunks_;
  ProcessGroups& groups_;
  Backend& backend_;
  Tracer* tracer_;
  std::vector<PendingSend> sends_;
};

}  // namespace loom::exec
