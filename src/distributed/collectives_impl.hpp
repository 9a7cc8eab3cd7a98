// Private: constructors of the Collectives implementations, picked by
// make_collectives (collectives.cpp).
#pragma once
#include <memory>

#include "llmtrain/distributed/collectives.hpp"

namespace llmtrain {

// MPI on a duplicate of MPI_COMM_WORLD (our traffic never matches a user's).
std::unique_ptr<Collectives> make_mpi_collectives(MpiAsync mode);

#ifdef LLMTRAIN_WITH_CUDA
// NCCL on `device` (collectives_cuda.cpp): unique id from rank 0 over MPI_Bcast.
std::unique_ptr<Collectives> make_nccl_collectives(const Runtime& rt, torch::Device device);
#endif

}  // namespace llmtrain
