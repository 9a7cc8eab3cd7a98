// Private: small MPI helpers shared by the checkpoints (train/) and
// llmtrain-prepare (data/). mpi.h stays out of the public headers.
#pragma once
#include <mpi.h>

#include <string>

namespace llmtrain::mpi {

// Collective over `comm`: `root`'s `s` on every rank (the others' `s` is ignored).
std::string bcast_string(MPI_Comm comm, std::string s, int root = 0);

}  // namespace llmtrain::mpi
