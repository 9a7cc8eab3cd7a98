// Links the NCCL/CUDA-runtime layer and calls what works without a GPU.
#include <gtest/gtest.h>

#include "dist/raw_nccl.hpp"

namespace llmtrain {
namespace {

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

}  // namespace
}  // namespace llmtrain
