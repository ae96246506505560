// Which GPU a rank drives. Launched one rank per GPU (`mpirun -np 8` on an 8-GPU node, or
// `srun --ntasks-per-node 8`), a rank takes the device of its rank among the ranks of its node,
// counted over the devices it can see: CUDA_VISIBLE_DEVICES is applied by the CUDA runtime before
// Loom counts, so a launcher that gives each rank one device (Slurm's --gpus-per-task=1, or a
// wrapper exporting CUDA_VISIBLE_DEVICES=$SLURM_LOCALID) makes every rank's device 0 — its own.
// The node-local rank comes from MPI (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED), which works
// the same under mpirun and srun, where environment variables differ by launcher
// (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID, torchrun's LOCAL_RANK).
// More ranks than devices share them round-robin; NCCL refuses two ranks on one device, so
// those runs need the host-staged communicator.
#pragma once

#include <string>

#include "core/result.h"

namespace loom::exec {

struct DevicePlacement {
  int device = 0;  // index among the visible devices
  // Ranks of this node on that device, this one included, when every rank sees the same devices. A
  // launcher that gives each rank its own (CUDA_VISIBLE_DEVICES) makes this local_size; `loom run`
  // counts the ranks on a GPU by its UUID instead (Backend::device_uuid, Runtime::ranks_sharing_a_device).
  int ranks_sharing = 1;
};

// local_rank in [0, local_size); device_count: the devices this process sees.
Result<DevicePlacement> place_rank_on_device(int local_rank, int local_size, int device_count);

// A GPU's 16-byte UUID (cudaDeviceProp::uuid) as nvidia-smi prints it, "GPU-" and 8-4-4-4-12 lower-case hex
// digits: text that a cost file's provenance (JSON, UTF-8) can hold and a reader can match to nvidia-smi -L.
std::string gpu_uuid_text(const unsigned char (&bytes)[16]);

}  // namespace loom::exec
