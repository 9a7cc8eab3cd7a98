// The communicator a checkpoint is written over, behind the public header's
// opaque CheckpointComm: mpi.h stays out of include/ (MPI_Comm is a pointer in
// Open MPI and an int in MPICH, so it cannot be forward-declared there).
// MPI_COMM_WORLD for a blocking save; the asynchronous writer's duplicate for
// save_async, so its collectives never interleave with the training's.
#pragma once
#include <mpi.h>

namespace llmtrain {

struct CheckpointComm {
  MPI_Comm comm;
};

}  // namespace llmtrain
