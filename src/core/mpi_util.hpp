// Private: string collectives shared by the checkpoints (train/),
// llmtrain-prepare (data/) and the Runtime (distributed/). mpi.h stays out of the public headers.
#pragma once
#include <mpi.h>

#include <string>
#include <vector>

namespace llmtrain::mpi {

// Collective over `comm`: `root`'s `s` on every rank (the others' `s` is ignored).
std::string bcast_string(MPI_Comm comm, std::string s, int root = 0);
// Collective over `comm`: every rank's `mine`, in rank order.
std::vector<std::string> allgather_strings(const std::string& mine, MPI_Comm comm);

}  // namespace llmtrain::mpi
