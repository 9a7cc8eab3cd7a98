// The standard library of every llmtrain program is libstdc++.so.6, never the
// copies the pip LibTorch exports. The wheel's GCC toolset linked parts of
// libstdc++ into libtorch.so and libtorch_cpu.so (from libstdc++_nonshared.a)
// and exports them without a symbol version, which glibc's dynamic linker
// accepts for a versioned reference (remove_all@GLIBCXX_3.4.26): whichever
// library comes first in the search order wins. libtorch.so's remove_all calls
// recursive_directory_iterator::__erase through a weak reference nothing
// defines, so bound there it jumps to address 0. cmake/LLMTrainTorch.cmake
// keeps libtorch.so (a shim whose every export is such a copy) out of the
// programs; src/CMakeLists.txt names libstdc++ first among their libraries.
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

// The shared objects of this process in the dynamic linker's search order (the
// main program's breadth-first load order), the program itself left out.
std::vector<std::string> search_order() {
  std::vector<std::string> out;
  void* self = dlopen(nullptr, RTLD_LAZY | RTLD_NOLOAD);
  link_map* m = nullptr;
  if (!self || dlinfo(self, RTLD_DI_LINKMAP, &m) != 0) return out;
  for (m = m ? m->l_next : nullptr; m; m = m->l_next)
    if (m->l_name && *m->l_name) out.emplace_back(m->l_name);
  return out;
}

// Which object a reference to `symbol` from this program binds to: the first
// object in the search order that defines it (what ld.so does for a PLT slot,
// whatever the symbol's version: see above). Works the same whether the program
// is a PIE or not (a non-PIE program's canonical PLT entry is left out).
std::string binding_of(const char* symbol) {
  for (const auto& name : search_order()) {
    void* h = dlopen(name.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (!h) continue;
    void* p = dlsym(h, symbol);  // this object or its dependencies
    Dl_info info{};
    const bool here = p && dladdr(p, &info) != 0 && info.dli_fname && name == info.dli_fname;
    dlclose(h);
    if (here) return name;
  }
  return "(none)";
}

TEST(Linkage, StandardLibraryBindsToLibstdcxx) {
  (void)torch::ones({1});  // LibTorch is linked and loaded in this process
  // What the copies in LibTorch also define: std::filesystem (remove_all, the
  // recursive iterator remove_all uses), strings, GCC 13's iostream init.
  const char* symbols[] = {
      "_ZNSt10filesystem10remove_allERKNS_7__cxx114pathE",
      "_ZNSt10filesystem10remove_allERKNS_7__cxx114pathERSt10error_code",
      "_ZNSt10filesystem7__cxx1128recursive_directory_iteratorC1ERKNS0_4pathENS_17directory_optionsEPSt10error_code",
      "_ZNSt10filesystem18create_directoriesERKNS_7__cxx114pathE",
      "_ZNSt10filesystem19temp_directory_pathB5cxx11Ev",
      "_ZSt21ios_base_library_initv",
  };
  void* libstdcxx = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD);
  ASSERT_NE(libstdcxx, nullptr) << "libstdc++.so.6 is not loaded";
  for (const char* s : symbols) {
    // Only what this libstdc++ defines: a program cannot refer to the rest (GCC
    // 12's has no ios_base_library_init; LibTorch's copies still define it).
    if (!dlsym(libstdcxx, s)) continue;
    const std::string where = binding_of(s);
    EXPECT_NE(where.find("libstdc++"), std::string::npos) << s << " binds to " << where;
  }
  dlclose(libstdcxx);
  // And it works on a real tree (what crashed).
  const auto dir = std::filesystem::temp_directory_path() / ("llmtrain-linkage-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir / "a" / "b");
  std::ofstream(dir / "a" / "b" / "f") << "x";
  EXPECT_EQ(std::filesystem::remove_all(dir), 4u);
}

// libtorch.so is not loaded at all: its remove_all is the one that jumps to 0,
// whatever the link order.
TEST(Linkage, LibtorchShimIsNotLoaded) {
  for (const auto& name : search_order())
    EXPECT_NE(std::filesystem::path(name).filename(), "libtorch.so") << "loaded: " << name;
  bool torch_cpu = false;
  for (const auto& name : search_order()) torch_cpu = torch_cpu || name.find("libtorch_cpu.so") != std::string::npos;
  EXPECT_TRUE(torch_cpu) << "libtorch_cpu.so is not among this program's libraries";
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
