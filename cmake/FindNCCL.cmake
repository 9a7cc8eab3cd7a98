# FindNCCL: locates NCCL headers and library.
# Hints, in order: NCCL_ROOT (cmake/LLMTrainTorch.cmake sets it to the nvidia-nccl
# wheel beside a pip torch, the NCCL libtorch_cuda loads), NCCL_HOME, CUDA_HOME,
# CUDAToolkit_ROOT, /usr/local/cuda. The wheel ships only libnccl.so.2, so every
# directory is tried for both names before the next (NAMES_PER_DIR).
# Defines NCCL_FOUND, NCCL_VERSION, imported target NCCL::NCCL.
set(_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME} ${CUDAToolkit_ROOT} $ENV{CUDA_HOME} /usr/local/cuda /usr)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_nccl_hints} PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu)
if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_major REGEX "^#define NCCL_MAJOR +[0-9]+")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_minor REGEX "^#define NCCL_MINOR +[0-9]+")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_patch REGEX "^#define NCCL_PATCH +[0-9]+")
  string(REGEX MATCH "[0-9]+$" _nccl_major "${_nccl_major}")
  string(REGEX MATCH "[0-9]+$" _nccl_minor "${_nccl_minor}")
  string(REGEX MATCH "[0-9]+$" _nccl_patch "${_nccl_patch}")
  set(NCCL_VERSION "${_nccl_major}.${_nccl_minor}.${_nccl_patch}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR VERSION_VAR NCCL_VERSION)
if(NCCL_FOUND AND NOT TARGET NCCL::NCCL)
  add_library(NCCL::NCCL UNKNOWN IMPORTED)
  set_target_properties(NCCL::NCCL PROPERTIES
    IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
