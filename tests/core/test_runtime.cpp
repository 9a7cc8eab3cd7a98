#include <gtest/gtest.h>
#include <mpi.h>

#include <map>

#include <torch/cuda.h>

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

// Issue 36: the device decision, given device counts (no GPU needed).
TEST(Runtime, ChooseDeviceRefusesMoreRanksThanGpus) {
  using llmtrain::DeviceKind;
  using llmtrain::choose_device;
  // 2 ranks on a node with one GPU: refused before NCCL, in one line naming the
  // node, the ranks, the GPUs and the fix.
  for (DeviceKind want : {DeviceKind::automatic, DeviceKind::cuda}) {
    const auto c = choose_device(want, /*built_with_cuda=*/true, /*visible_gpus=*/1, /*node_gpus=*/1,
                                 /*local_rank=*/1, /*local_size=*/2, "gpu-node-7");
    ASSERT_FALSE(c.error.empty());
    EXPECT_EQ(c.error.find('\n'), std::string::npos) << c.error;
    for (const char* part : {"2 ranks", "gpu-node-7", "1 GPU", "one rank per GPU", "--ntasks-per-node=1",
                             "--gpus-per-node=1", "device=cpu"})
      EXPECT_NE(c.error.find(part), std::string::npos) << part << " not in: " << c.error;
  }
  // 8 ranks on 4 GPUs: the counts are the node's.
  const auto eight = choose_device(DeviceKind::automatic, true, 4, 4, 5, 8, "n1");
  EXPECT_NE(eight.error.find("8 ranks on node n1 for 4 GPU(s)"), std::string::npos) << eight.error;
  // One rank per GPU: rank r takes GPU r.
  for (int r = 0; r < 8; ++r) {
    const auto c = choose_device(DeviceKind::automatic, true, 8, 8, r, 8, "n1");
    EXPECT_TRUE(c.error.empty()) << c.error;
    EXPECT_TRUE(c.cuda);
    EXPECT_EQ(c.index, r);
  }
  // Fewer ranks than GPUs is fine.
  EXPECT_TRUE(choose_device(DeviceKind::cuda, true, 8, 8, 1, 2, "n1").error.empty());
  // Slurm gave each task its own GPU (--gpus-per-task=1): each rank sees one, the
  // node has 8, and each rank uses its index 0.
  const auto own = choose_device(DeviceKind::automatic, true, 1, 8, 5, 8, "n1");
  EXPECT_TRUE(own.error.empty()) << own.error;
  EXPECT_TRUE(own.cuda);
  EXPECT_EQ(own.index, 0);
  // device=cpu never looks at the GPUs: 8 ranks on a 1-GPU node run on the CPU.
  const auto cpu = choose_device(DeviceKind::cpu, true, 1, 1, 3, 8, "n1");
  EXPECT_TRUE(cpu.error.empty());
  EXPECT_FALSE(cpu.cuda);
}

TEST(Runtime, ChooseDeviceAutoWithoutCudaIsTheCpu) {
  using llmtrain::DeviceKind;
  using llmtrain::choose_device;
  // A build without CUDA: device=auto is the CPU even where GPUs are visible
  // (a CUDA-enabled torch underneath), and any number of ranks may share it.
  for (int visible : {0, 1, 8}) {
    const auto c = choose_device(DeviceKind::automatic, /*built_with_cuda=*/false, visible, visible, 1, 4, "n1");
    EXPECT_TRUE(c.error.empty()) << c.error;
    EXPECT_FALSE(c.cuda);
  }
  // A CUDA build on a node without a visible GPU: auto is the CPU too.
  const auto none = choose_device(DeviceKind::automatic, true, 0, 0, 1, 4, "n1");
  EXPECT_TRUE(none.error.empty()) << none.error;
  EXPECT_FALSE(none.cuda);
  // device=cuda where it cannot be: one line saying why.
  const auto unbuilt = choose_device(DeviceKind::cuda, false, 8, 8, 0, 1, "n1");
  EXPECT_NE(unbuilt.error.find("built without CUDA"), std::string::npos) << unbuilt.error;
  const auto invisible = choose_device(DeviceKind::cuda, true, 0, 0, 0, 1, "n1");
  EXPECT_NE(invisible.error.find("no CUDA device is visible"), std::string::npos) << invisible.error;
}

// This build on this machine without a GPU (a CPU-only build, or a node without
// one): device=auto is the CPU, for every rank of the test.
TEST(Runtime, SetupDeviceAutoWithoutGpuIsTheCpu) {
#ifdef LLMTRAIN_WITH_CUDA
  if (torch::cuda::is_available()) GTEST_SKIP() << "this node has a GPU: device=auto uses it";
#endif
  EXPECT_FALSE(runtime().setup_device(llmtrain::DeviceKind::automatic, 0).is_cuda());
}
