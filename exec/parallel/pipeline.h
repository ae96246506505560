// Pipeline parallelism: the order in which one stage runs the forward and backward of each
// micro-batch (GPipe: all forwards then all backwards; 1F1B, Narayanan et al. 2021: warm-up
// forwards, then alternate, then drain; interleaved 1F1B over vpp model chunks per stage, the
// same order as the simulator's), and the runner that executes it with non-blocking
// point-to-point messages. Each stage waits on the receives its schedule needs next and keeps at
// most one send per direction in flight (activations forward, gradients backward): before a new
// send it waits for the previous one, whose buffer is then freed, as Megatron-LM waits on its
// p2p requests. That wait cannot deadlock: every stage runs the same sequence of (micro-batch,
// chunk) pairs, so a peer receives the messages of one direction in the order they are sent, and
// the previous message is one the peer's schedule receives before it needs anything this stage
// has not sent yet.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel_config.h"
#include "exec/model/gpt_stage.h"
#include "exec/process_groups.h"
#include "exec/trace.h"

namespace loom::exec {

struct PipelineAction {
  bool forward = true;
  int micro_batch = 0;
  int chunk = 0;  // model chunk on this stage (interleaved schedule)
};

std::vector<PipelineAction> pipeline_schedule(Schedule schedule, int stages, int stage, int micro_batches,
                                              int chunks = 1);

class PipelineRunner {
 public:
  // One GptStage per model chunk of this stage (one without interleaving).
  PipelineRunner(std::vector<GptStage*> chunks, ProcessGroups& groups, Backend& backend, Tracer* tracer)
      : chunks_(std::move(chunks)), groups_(groups), backend_(backend), tracer_(tracer) {}

  // Runs one step's forwards and backwards. load(i) gives micro-batch i's data; before(i) is called
  // before each backward (ZeRO needs to know the last micro-batch). Returns the summed token losses
  // on the last stage (0 elsewhere).
  double run(int micro_batches, float loss_scale, const std::function<MicroBatch(int)>& load,
             const std::function<void(int)>& before_backward);

 private:
  struct PendingSend {
    std::unique_ptr<Request> request;
    Tensor buffer;
    bool gradient = false;
  };
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
