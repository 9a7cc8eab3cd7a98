// CUDA builds link libtorch_cuda, NCCL and the CUDA runtime into the real
// binaries. This checks, in a process of those binaries, on a machine with or
// without a GPU:
//  - NCCL and the CUDA runtime answer what needs no GPU (version, device count);
//  - each of libnccl, libcudart is loaded exactly once, and it is the very file
//    libtorch_cuda would load by itself (its RPATH: ../../nvidia/<pkg>/lib for a
//    pip torch): two copies of one library in a process is a bug.
#include <dlfcn.h>
#include <link.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "distributed/raw_nccl.hpp"

namespace llmtrain {
namespace {
namespace fs = std::filesystem;

// Every shared object in the process, by path.
std::vector<std::string> loaded_objects() {
  std::vector<std::string> out;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        if (info->dlpi_name && *info->dlpi_name) static_cast<std::vector<std::string>*>(data)->push_back(info->dlpi_name);
        return 0;
      },
      &out);
  return out;
}

std::vector<std::string> loaded_matching(const std::string& stem) {
  std::vector<std::string> hits;
  for (const auto& p : loaded_objects())
    if (fs::path(p).filename().string().rfind(stem, 0) == 0) hits.push_back(fs::canonical(p).string());
  return hits;
}

TEST(NcclLink, VersionAndDeviceCount) {
  const int v = nccl::version();
  EXPECT_GE(v, 20000) << "ncclGetVersion returned " << v;
  EXPECT_EQ(nccl::version_string().substr(0, 2), "2.");
  std::string why;
  const int n = nccl::cuda_device_count(&why);
  // No GPU (or no driver) here is an error code, not a crash.
  if (n < 0) EXPECT_FALSE(why.empty());
  else EXPECT_GE(n, 0);
  std::printf("NCCL %s, CUDA devices: %d %s\n", nccl::version_string().c_str(), n, why.c_str());
}

TEST(NcclLink, OneCopyOfEachLibraryTheOneLibtorchCudaLoads) {
  (void)torch::cuda::is_available();  // libtorch_cuda is linked; make sure it is initialized
  const auto torch_cuda = loaded_matching("libtorch_cuda.so");
  ASSERT_EQ(torch_cuda.size(), 1u) << "libtorch_cuda.so is not loaded: the CUDA build must link it";
  const fs::path torch_lib = fs::path(torch_cuda.front()).parent_path();
  // What libtorch_cuda's RPATH ($ORIGIN/../../nvidia/<pkg>/lib) points at, for a pip torch.
  const fs::path nvidia = torch_lib / "../../nvidia";
  for (const std::string stem : {"libnccl.so", "libcudart.so"}) {
    const auto hits = loaded_matching(stem);
    ASSERT_EQ(hits.size(), 1u) << stem << " is loaded " << hits.size() << " times: "
                               << ::testing::PrintToString(hits);
    fs::path dir;
    if (fs::exists(nvidia))
      for (const auto& pkg : fs::directory_iterator(nvidia))
        if (fs::exists(pkg.path() / "lib"))
          for (const auto& f : fs::directory_iterator(pkg.path() / "lib"))
            if (f.path().filename().string().rfind(stem, 0) == 0) dir = pkg.path() / "lib";
    if (!dir.empty()) {
      EXPECT_EQ(fs::canonical(dir).string(), fs::path(hits.front()).parent_path().string())
          << stem << " comes from " << hits.front() << ", but libtorch_cuda loads it from " << dir;
    }
    std::printf("%s: %s\n", stem.c_str(), hits.front().c_str());
  }
}

}  // namespace
}  // namespace llmtrain
