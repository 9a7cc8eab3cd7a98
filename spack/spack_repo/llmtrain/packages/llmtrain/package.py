# Spack package for llmtrain, kept next to the sources (spack/spack_repo/llmtrain
# is a package repository; spack.yaml at the top of the checkout uses it and builds
# the checkout itself through its develop: section). Package API v2 (Spack >= 1.0):
# the build systems come from the builtin repository, spack/spack-packages
# (scripts/spack-check.py checks every name below against its pinned commit).
import glob
import os

from spack_repo.builtin.build_systems.cmake import CMakePackage
from spack_repo.builtin.build_systems.cuda import CudaPackage

from spack.package import *


class Llmtrain(CMakePackage, CudaPackage):
    """LLM pretraining for Slurm clusters in C++17: one SPMD program started by
    srun/mpirun, LibTorch models, NCCL (GPU) or MPI (CPU) gradient traffic,
    sharded HDF5 token data with parallel I/O, sbatch templates for every test
    tier and scaling study."""

    # Built from the checkout (spack.yaml: develop: llmtrain: path: .). A
    # release would add url= and sha256= here.
    version("main")
    version("0.2.0")

    variant("tests", default=False, description="Build the GoogleTest/CTest suite (LLMTRAIN_BUILD_TESTS)")
    variant("benchmarks", default=False, description="Build the Google Benchmark programs (LLMTRAIN_BUILD_BENCHMARKS)")

    # Compilers are dependencies since Spack 0.23 (needed there for the wrappers).
    depends_on("c", type="build")
    depends_on("cxx", type="build")
    depends_on("cmake@3.20:", type="build")
    depends_on("pkgconfig", type="build")

    depends_on("mpi")
    depends_on("hdf5@1.10:+mpi")
    depends_on("boost@1.70:+program_options")
    depends_on("nlohmann-json@3.9:")
    depends_on("fmt")  # used only where the LibTorch has no fmt headers of its own (torch/include/fmt)
    depends_on("pcre2")  # tokenizer pre-split regex (libpcre2-8, Unicode properties)
    depends_on("icu4c")  # NFC normalization (Qwen3 tokenizer), found through pkg-config icu-uc
    # llmtrain-prepare's inputs: Parquet / Arrow IPC (cmake/LLMTrainArrow.cmake takes
    # an ArrowConfig.cmake from the prefix path) and .jsonl.zst / .gz / .xz.
    depends_on("arrow+parquet+ipc")
    depends_on("zstd")
    depends_on("zlib-api")
    depends_on("xz")

    # LibTorch comes from py-torch (its site-packages/torch holds the C++
    # headers, libraries and TorchConfig.cmake); see _torch_cmake_dir(). The
    # minimum is the major.minor of the pin in python/requirements.txt (2.11.0,
    # the PyPI wheel for CUDA 13): cmake/LLMTrainTorch.cmake refuses anything older.
    depends_on("py-torch@2.11:")
    depends_on("py-torch~cuda", when="~cuda")
    depends_on("py-torch+cuda", when="+cuda")
    depends_on("nccl", when="+cuda")
    depends_on("cuda@12:", when="+cuda")
    # The same GPU architecture everywhere (sm_90 = H100/H200, sm_100 = B200).
    for _arch in CudaPackage.cuda_arch_values:
        depends_on(f"py-torch cuda_arch={_arch}", when=f"+cuda cuda_arch={_arch}")
        depends_on(f"nccl cuda_arch={_arch}", when=f"+cuda cuda_arch={_arch}")

    depends_on("googletest@1.10:+gmock", when="+tests")
    depends_on("benchmark@1.5:", when="+benchmarks")

    def _torch_cmake_dir(self):
        """<py-torch prefix>/lib/pythonX.Y/site-packages/torch/share/cmake/Torch"""
        prefix = self.spec["py-torch"].prefix
        found = glob.glob(
            os.path.join(prefix, "lib*", "python*", "site-packages", "torch", "share", "cmake", "Torch")
        )
        if not found:
            raise InstallError(
                f"py-torch at {prefix} has no site-packages/torch/share/cmake/Torch "
                "(TorchConfig.cmake): cannot build against its LibTorch"
            )
        return found[0]

    def _capabilities(self):
        """cuda_arch=90,100a -> ["9.0", "10.0a"] (LibTorch's TORCH_CUDA_ARCH_LIST form)."""
        archs = [a for a in self.spec.variants["cuda_arch"].value if a != "none"]
        return CudaPackage.compute_capabilities(archs)

    def setup_build_environment(self, env):
        if self.spec.satisfies("+cuda"):
            # Torch's CMake config reads the architectures from TORCH_CUDA_ARCH_LIST ("9.0;10.0").
            env.set("TORCH_CUDA_ARCH_LIST", ";".join(self._capabilities()))

    def setup_run_environment(self, env):
        # jobs/common.sh finds inputs/ next to jobs/ under share/llmtrain.
        env.set("LLMTRAIN_JOBS_DIR", self.prefix.share.llmtrain.jobs)

    def cmake_args(self):
        spec = self.spec
        args = [
            self.define_from_variant("LLMTRAIN_BUILD_TESTS", "tests"),
            self.define_from_variant("LLMTRAIN_BUILD_BENCHMARKS", "benchmarks"),
            self.define("LLMTRAIN_WITH_CUDA", spec.satisfies("+cuda")),
            self.define("Torch_DIR", self._torch_cmake_dir()),
            self.define("HDF5_PREFER_PARALLEL", True),
            self.define("MPI_CXX_COMPILER", spec["mpi"].mpicxx),
        ]
        if spec.satisfies("+cuda"):
            # LibTorch's CMake config turns TORCH_CUDA_ARCH_LIST ("9.0;10.0") into -gencode flags.
            args.append(self.define("LLMTRAIN_CUDA_ARCH_LIST", ";".join(self._capabilities())))
            args.append(self.define("NCCL_ROOT", spec["nccl"].prefix))
            args.append(self.define("CUDAToolkit_ROOT", spec["cuda"].prefix))
        return args

    def check(self):
        # The unit/MPI tests; the Slurm template tests need a cluster of their own.
        with working_dir(self.build_directory):
            ctest = which("ctest", required=True)
            ctest("--output-on-failure", "-LE", "slurm")
