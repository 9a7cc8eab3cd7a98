#include "core/mpi_util.hpp"

#include "llmtrain/core/error.hpp"

namespace llmtrain::mpi {

std::string bcast_string(MPI_Comm comm, std::string s, int root) {
  int n = static_cast<int>(s.size());
  MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT, root, comm));
  s.resize(static_cast<size_t>(n));
  MPI_CHECK(MPI_Bcast(s.data(), n, MPI_CHAR, root, comm));
  return s;
}

}  // namespace llmtrain::mpi
