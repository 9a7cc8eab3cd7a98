// prepare_data on an explicit communicator (tests compare 1 rank with N ranks in
// one job). Private to src/data and the data tests.
#pragma once
#include <mpi.h>

#include "llmtrain/data/prepare.hpp"

namespace llmtrain::data {

PrepareResult prepare_data_on(const PrepareOptions& options, MPI_Comm comm);

}  // namespace llmtrain::data
