# LLMTrainTorch: finds LibTorch with no -D flags, decides the CUDA path, and makes
# the binaries load the same CUDA runtime and NCCL that libtorch_cuda loads.
#
# 1. The pin: python/requirements.txt's `torch==X.Y.Z` is the one place the
#    version is written; X.Y is the minimum accepted here (LLMTRAIN_TORCH_MIN).
# 2. Which torch: Torch_DIR or a CMAKE_PREFIX_PATH that already has TorchConfig
#    (Spack's py-torch, a LibTorch zip) wins. Otherwise the first interpreter of
#    LLMTRAIN_PYTHON (cache or environment), $LLMTRAIN_VENV/bin/python,
#    ~/.cache/llmtrain/venv/bin/python (scripts/install-deps.sh makes it), python3
#    that imports a torch >= the minimum gives torch.utils.cmake_prefix_path.
#    That interpreter is LLMTRAIN_PYTHON for the tests' Python oracles.
# 3. CUDA: LLMTRAIN_WITH_CUDA (default: on where nvcc and a CUDA LibTorch are
#    both found) compiles every CUDA source for LLMTRAIN_CUDA_ARCH_LIST (default
#    sm_90 + sm_100) and links libtorch_cuda and NCCL into the real binaries.
# 4. One copy of each library: a pip torch loads cudart, nvrtc and NCCL from the
#    nvidia-* wheels beside it (its RPATH); the imported targets are pointed at
#    those same files, so the binaries' RUNPATH resolves them there and not to
#    another toolkit on the machine (two copies of one library in a process).

file(STRINGS ${PROJECT_SOURCE_DIR}/python/requirements.txt _pin REGEX "^torch==")
string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" LLMTRAIN_TORCH_PIN "${_pin}")
string(REGEX MATCH "^[0-9]+\\.[0-9]+" LLMTRAIN_TORCH_MIN "${LLMTRAIN_TORCH_PIN}")
if(NOT LLMTRAIN_TORCH_MIN)
  message(FATAL_ERROR "python/requirements.txt has no 'torch==X.Y.Z' line")
endif()

set(LLMTRAIN_PYTHON "" CACHE FILEPATH "Python interpreter whose torch gives LibTorch and that runs the tests' oracles")
set(_torch_preset OFF)
if(Torch_DIR OR DEFINED ENV{Torch_DIR})
  set(_torch_preset ON)
else()
  foreach(_p IN LISTS CMAKE_PREFIX_PATH)
    if(EXISTS "${_p}/Torch/TorchConfig.cmake" OR EXISTS "${_p}/share/cmake/Torch/TorchConfig.cmake")
      set(_torch_preset ON)
    endif()
  endforeach()
endif()

# Interpreters to ask, in order.
set(_candidates ${LLMTRAIN_PYTHON})
if(DEFINED ENV{LLMTRAIN_PYTHON})
  list(APPEND _candidates $ENV{LLMTRAIN_PYTHON})
endif()
if(DEFINED ENV{LLMTRAIN_VENV})
  list(APPEND _candidates $ENV{LLMTRAIN_VENV}/bin/python)
endif()
list(APPEND _candidates $ENV{HOME}/.cache/llmtrain/venv/bin/python)
find_program(_python3 NAMES python3 NO_CACHE)
if(_python3)
  list(APPEND _candidates ${_python3})
endif()

set(_chosen "")
set(_tried "")
foreach(_py IN LISTS _candidates)
  if(NOT EXISTS "${_py}")
    continue()
  endif()
  execute_process(
    COMMAND "${_py}" -c "import torch, torch.utils; print(torch.__version__.split('+')[0]); print(torch.utils.cmake_prefix_path); print(torch.version.cuda or '')"
    OUTPUT_VARIABLE _out ERROR_QUIET RESULT_VARIABLE _rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _rc EQUAL 0)
    list(APPEND _tried "${_py} (no torch)")
    continue()
  endif()
  string(REPLACE "\n" ";" _out "${_out}")
  list(GET _out 0 _ver)
  list(GET _out 1 _prefix)
  if(_ver VERSION_LESS LLMTRAIN_TORCH_MIN)
    list(APPEND _tried "${_py} (torch ${_ver} < ${LLMTRAIN_TORCH_MIN})")
    continue()
  endif()
  set(_chosen "${_py}")
  break()
endforeach()

if(_chosen)
  set(LLMTRAIN_PYTHON "${_chosen}" CACHE FILEPATH "" FORCE)
  if(NOT _torch_preset)
    list(PREPEND CMAKE_PREFIX_PATH "${_prefix}")
  endif()
elseif(NOT _torch_preset)
  string(REPLACE ";" "\n    " _tried "${_tried}")
  message(FATAL_ERROR
    "llmtrain needs LibTorch >= ${LLMTRAIN_TORCH_MIN} (pinned: torch==${LLMTRAIN_TORCH_PIN}), and no interpreter "
    "imports one:\n    ${_tried}\n"
    "Run scripts/install-deps.sh (it makes ~/.cache/llmtrain/venv), or set LLMTRAIN_PYTHON to an interpreter "
    "with torch, or Torch_DIR to a LibTorch's share/cmake/Torch.")
endif()

# CUDA: on by default where nvcc exists (torch's own config then needs the toolkit).
include(CheckLanguage)
check_language(CUDA)
set(_cuda_default OFF)
if(CMAKE_CUDA_COMPILER)
  set(_cuda_default ON)
endif()
option(LLMTRAIN_WITH_CUDA "Compile and link the CUDA path (nvcc, libtorch_cuda, NCCL)" ${_cuda_default})
set(LLMTRAIN_CUDA_ARCH_LIST "9.0;10.0" CACHE STRING "GPU architectures for CUDA sources (TORCH_CUDA_ARCH_LIST form)")
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST} AND NOT TORCH_CUDA_ARCH_LIST)
  set(TORCH_CUDA_ARCH_LIST "${LLMTRAIN_CUDA_ARCH_LIST}")  # torch turns it into -gencode flags for every .cu
endif()

# LibTorch's config sets the architectures itself (from TORCH_CUDA_ARCH_LIST) and
# warns about a CMAKE_CUDA_ARCHITECTURES left from an earlier configure.
unset(CMAKE_CUDA_ARCHITECTURES)
unset(CMAKE_CUDA_ARCHITECTURES CACHE)
find_package(Torch REQUIRED)
if(Torch_VERSION VERSION_LESS LLMTRAIN_TORCH_MIN)
  message(FATAL_ERROR "LibTorch ${Torch_VERSION} at ${Torch_DIR} is older than the minimum ${LLMTRAIN_TORCH_MIN}")
endif()
set(LLMTRAIN_TORCH_HAS_CUDA OFF)
if(TARGET torch_cuda)
  set(LLMTRAIN_TORCH_HAS_CUDA ON)
endif()
if(LLMTRAIN_WITH_CUDA AND NOT LLMTRAIN_TORCH_HAS_CUDA)
  message(FATAL_ERROR "LLMTRAIN_WITH_CUDA=ON, but the LibTorch at ${Torch_DIR} is a CPU-only build: use a CUDA "
                      "torch (python/requirements.txt pins one) or configure with -DLLMTRAIN_WITH_CUDA=OFF")
endif()

# 5. No libtorch.so in the programs. It holds no torch code: it is the shim that
#    pulls in libtorch_cpu.so and libtorch_cuda.so, and everything it exports (182
#    symbols in the 2.11 wheel) is a copy of a libstdc++ function that the wheel's
#    GCC toolset linked in statically from its libstdc++_nonshared.a: std::filesystem,
#    std::__cxx11 strings and streams, std::chrono's time zones,
#    std::ios_base_library_init. Those copies carry no symbol version, and glibc's
#    dynamic linker lets an unversioned definition satisfy a versioned reference
#    (remove_all@GLIBCXX_3.4.26): the first library in the search order that
#    defines the name wins. libtorch.so's remove_all calls
#    recursive_directory_iterator::__erase through a weak reference that nothing
#    defines (libstdc++.so keeps __erase internal), so a program whose
#    remove_all binds there jumps to address 0 on the first directory it removes.
#    Linking libtorch_cpu/libtorch_cuda directly (TorchConfig's `torch` target
#    less its own file) keeps that copy out of every process; the libstdc++-first
#    link option of src/CMakeLists.txt binds the standard library to libstdc++.so.6
#    over libtorch_cpu.so's copies too. tests/core/test_linkage.cpp checks both.
if(TARGET torch AND TARGET torch_cpu_library)
  get_target_property(_torch_type torch TYPE)
  if(_torch_type STREQUAL "SHARED_LIBRARY")
    add_library(LLMTrain::torch INTERFACE IMPORTED)
    foreach(_p INTERFACE_INCLUDE_DIRECTORIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES INTERFACE_COMPILE_DEFINITIONS
               INTERFACE_COMPILE_OPTIONS)
      get_target_property(_v torch ${_p})
      if(_v)
        set_property(TARGET LLMTrain::torch PROPERTY ${_p} "${_v}")
      endif()
    endforeach()
    get_target_property(_v torch INTERFACE_LINK_LIBRARIES)  # torch_cpu_library;torch_cuda_library
    set_property(TARGET LLMTrain::torch PROPERTY INTERFACE_LINK_LIBRARIES "${_v}")
    list(TRANSFORM TORCH_LIBRARIES REPLACE "^torch$" "LLMTrain::torch")
    list(REMOVE_ITEM TORCH_LIBRARIES torch_library)
  endif()
endif()

# The libraries a pip torch loads (torch/lib/libtorch_cuda.so RPATH: ../../nvidia/*/lib).
get_filename_component(_torch_root "${TORCH_INSTALL_PREFIX}" ABSOLUTE)
set(_nv "${_torch_root}/../nvidia")
get_filename_component(_nv "${_nv}" ABSOLUTE)
set(LLMTRAIN_TORCH_NVIDIA_DIR "")
if(LLMTRAIN_TORCH_HAS_CUDA AND EXISTS "${_nv}")
  set(LLMTRAIN_TORCH_NVIDIA_DIR "${_nv}")
  file(GLOB _cudart "${_nv}/cu*/lib/libcudart.so.*")
  file(GLOB _nvrtc "${_nv}/cu*/lib/libnvrtc.so.[0-9]*")
  list(FILTER _nvrtc EXCLUDE REGEX "builtins|alt")
  if(_cudart AND TARGET CUDA::cudart)
    list(GET _cudart 0 _cudart)
    set_target_properties(CUDA::cudart PROPERTIES IMPORTED_LOCATION "${_cudart}")
  endif()
  if(_nvrtc)
    list(GET _nvrtc 0 _nvrtc)
    if(TARGET CUDA::nvrtc)
      set_target_properties(CUDA::nvrtc PROPERTIES IMPORTED_LOCATION "${_nvrtc}")
    endif()
    list(TRANSFORM TORCH_LIBRARIES REPLACE ".*/libnvrtc\\.so$" "${_nvrtc}")
  endif()
  if(EXISTS "${_nv}/nccl/include/nccl.h" AND NOT NCCL_ROOT)
    set(NCCL_ROOT "${_nv}/nccl")
  endif()
endif()

message(STATUS "llmtrain: LibTorch ${Torch_VERSION} (${_torch_root}), python ${LLMTRAIN_PYTHON}, "
               "CUDA path ${LLMTRAIN_WITH_CUDA}")
