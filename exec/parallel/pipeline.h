// Pipeline parallelism: the order in which one stage runs the forward and backward of each
// micro-batch (GPipe: all forwards then all backwards; 1F1B, Narayanan et al. 2021: warm-up
// forwards, then alternate, then drain), and the runner that executes it with non-blocking
// point-to-point messages. Sends never block (they complete in the background and are reaped),
// and each stage only waits on receives its schedule needs next, so no layout can deadlock.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/parallel_config.h"
#include "exec/model/gpt_stage.h"
#include "exec/process_groups.h"
#include "exec/trace.h"

namespace loom::exec {

struct PipelineAction {
  bool forward = true;
  int micro_batch = 0;
};

std::vector<PipelineAction> pipeline_schedule(Schedule schedule, int stages, int stage, int micro_batches);

class PipelineRunner {
 public:
  PipelineRunner(GptStage& stage, ProcessGroups& groups, Backend& backend, Tracer* tracer)
      : stage_(stage), groups_(groups), backend_(backend), tracer_(tracer) {}

  // Runs one step's forwards and backwards. load(i) gives micro-batch i's data; before(i) is called
  // before each backward (ZeRO needs to know the last micro-batch). Returns the summed token losses
  // on the last stage (0 elsewhere).
  double run(int micro_batches, float loss_scale, const std::function<MicroBatch(int)>& load,
             const std::function<void(int)>& before_backward);

 private:
  struct PendingSend {
    std::unique_ptr<Request> request;
    Tensor buffer;
  };
  Tensor receive(int peer, int tag, const char* what, int micro_batch, MemoryCategory category);
  void send(Tensor buffer, int peer, int tag, const char* what, int micro_batch);
  void reap_sends(bool wait);

  GptStage& stage_;
  ProcessGroups& groups_;
  Backend& backend_;
  Tracer* tracer_;
  std::vector<PendingSend> sends_;
};

}  // namespace loom::exec
