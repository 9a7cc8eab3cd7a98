#include <gtest/gtest.h>
#include <mpi.h>

#include <map>

#include "llmtrain/core/error.hpp"
#include "llmtrain/distributed/runtime.hpp"
#include "test_util.hpp"

using llmtrain::testing::runtime;

TEST(Runtime, RanksAreConsistent) {
  auto& rt = runtime();
  int size = 0, rank = -1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  EXPECT_EQ(rt.world_size(), size);
  EXPECT_EQ(rt.rank(), rank);
  // All ranks of a CTest run are on this one node.
  EXPECT_EQ(rt.local_size(), size);
  EXPECT_EQ(rt.local_rank(), rank);
  EXPECT_EQ(rt.num_nodes(), 1);
  int sum = 0;
  int one = 1;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(sum, size);
}

TEST(Runtime, SlurmSingletonLaunchIsRefused) {
  std::map<std::string, std::string> env = {{"SLURM_JOB_ID", "42"}, {"SLURM_NTASKS", "4"}};
  auto get = [&](const char* k) -> const char* {
    auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  const std::string msg = llmtrain::check_launch(1, 0, get);
  EXPECT_NE(msg.find("singletons"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--mpi=pmix"), std::string::npos) << msg;
  EXPECT_EQ(llmtrain::check_launch(4, 0, get), "");
  EXPECT_NE(llmtrain::check_launch(2, 0, get), "");
  env["LLMTRAIN_SKIP_SLURM_CHECK"] = "1";
  EXPECT_EQ(llmtrain::check_launch(1, 0, get), "");
  env.erase("LLMTRAIN_SKIP_SLURM_CHECK");
  // mpirun across nodes: a rank on another node was started by an orted that
  // Slurm ran as task 0 of a one-task step; that step's SLURM_NTASKS=1 says
  // nothing about the ranks. Rank 0 (the batch shell's task) still checks.
  env["SLURM_NTASKS"] = "1";
  env["SLURM_PROCID"] = "0";
  EXPECT_EQ(llmtrain::check_launch(2, 1, get), "");
  EXPECT_NE(llmtrain::check_launch(2, 0, get), "");
  env["SLURM_NTASKS"] = "2";
  EXPECT_EQ(llmtrain::check_launch(2, 0, get), "");
  // srun without --mpi: singletons are rank 0 of world 1 whatever their task id.
  env["SLURM_PROCID"] = "1";
  EXPECT_NE(llmtrain::check_launch(1, 0, get), "");
  env.clear();
  EXPECT_EQ(llmtrain::check_launch(3, 0, get), "");  // not under Slurm
}

TEST(Runtime, CheckMacrosNameCallFileAndRank) {
  try {
    MPI_CHECK(MPI_Bcast(nullptr, 1, MPI_INT, 99, MPI_COMM_WORLD));  // invalid root
    FAIL() << "expected an error";
  } catch (const llmtrain::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("MPI_Bcast"), std::string::npos) << m;
    EXPECT_NE(m.find("test_runtime.cpp:"), std::string::npos) << m;
    EXPECT_NE(m.find("rank " + std::to_string(runtime().rank())), std::string::npos) << m;
  }
}

TEST(Runtime, DeviceNamesOfEveryRank) {
  auto& rt = runtime();
  const auto names = rt.all_device_names();
  ASSERT_EQ(static_cast<int>(names.size()), rt.world_size());
  for (const auto& n : names) EXPECT_EQ(n, rt.device_name());  // one CPU node in CTest
}
