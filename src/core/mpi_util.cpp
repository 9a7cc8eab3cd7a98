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

std::vector<std::string> allgather_strings(const std::string& mine, MPI_Comm comm) {
  int size = 0;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(size), offsets(size, 0);
  MPI_CHECK(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm));
  for (int r = 1; r < size; ++r) offsets[r] = offsets[r - 1] + lens[r - 1];
  std::string all(static_cast<size_t>(offsets.back() + lens.back()), '\0');
  MPI_CHECK(MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, comm));
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r) out.push_back(all.substr(offsets[r], lens[r]));
  return out;
}

}  // namespace llmtrain::mpi
