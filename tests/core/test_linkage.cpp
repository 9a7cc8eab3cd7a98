// The standard library of every llmtrain program is libstdc++.so.6, not the
// copies the pip LibTorch exports (built with a newer GCC toolset, they jump to
// address 0 inside std::filesystem::remove_all when bound to this libstdc++).
// src/CMakeLists.txt names libstdc++ first among the programs' libraries.
#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

std::string defining_object(const void* fn) {
  Dl_info info{};
  if (dladdr(fn, &info) == 0 || !info.dli_fname) return "?";
  return info.dli_fname;
}

TEST(Linkage, StandardLibraryBindsToLibstdcxx) {
  using remove_all_t = std::uintmax_t (*)(const std::filesystem::path&);
  const auto remove_all = static_cast<remove_all_t>(&std::filesystem::remove_all);
  const std::string where = defining_object(reinterpret_cast<const void*>(remove_all));
  EXPECT_NE(where.find("libstdc++"), std::string::npos) << "std::filesystem::remove_all comes from " << where;
  // And it works on a real tree (what crashed).
  const auto dir = std::filesystem::temp_directory_path() / "llmtrain-linkage-test";
  std::filesystem::create_directories(dir / "a" / "b");
  std::ofstream(dir / "a" / "b" / "f") << "x";
  EXPECT_EQ(std::filesystem::remove_all(dir), 4u);
  (void)torch::ones({1});  // LibTorch is linked and loaded in this process
}

// The programs name their libraries' directories in DT_RPATH, not DT_RUNPATH
// (src/CMakeLists.txt: --disable-new-dtags): the NCCL, CUDA runtime and
// LibTorch found at build time are the ones loaded, and LD_LIBRARY_PATH (a
// cluster module's other NCCL) cannot swap them in.
TEST(Linkage, LibraryDirectoriesAreRpathNotRunpath) {
  bool rpath = false, runpath = false;
  for (const ElfW(Dyn)* d = _DYNAMIC; d->d_tag != DT_NULL; ++d) {
    rpath = rpath || d->d_tag == DT_RPATH;
    runpath = runpath || d->d_tag == DT_RUNPATH;
  }
  EXPECT_TRUE(rpath) << "this program has no DT_RPATH";
  EXPECT_FALSE(runpath) << "this program has a DT_RUNPATH: LD_LIBRARY_PATH overrides its libraries";
}

}  // namespace
