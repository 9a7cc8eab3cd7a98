# LLMTrainAreas: one static library per area of src/ (llmtrain_<area>), each
# compiled with the headers of its own area and of the areas it links, and no
# others: an #include that points up the graph (model/ including train/) is a
# build error, "fatal error: llmtrain/train/x.hpp: No such file or directory".
#
# The headers stay in one tree (include/llmtrain/<area>/ public, src/<area>/*.hpp
# private). At configure time each area gets include roots of its own in the
# build tree, made of one symbolic link each:
#   build/include-areas/<area>/llmtrain/<area>      -> include/llmtrain/<area>
#   build/include-areas/<area>-internals/<area>     -> src/<area>
# llmtrain_<area> has its public root PUBLIC (users write "llmtrain/<area>/x.hpp",
# as before) and its private root PRIVATE ("<area>/x.hpp", as before). PUBLIC
# usage requirements travel along target_link_libraries, so a source sees the
# public headers of the areas its area links PUBLIC, directly or through them,
# and of those it links PRIVATE itself; nothing else.
#
# llmtrain_<area>_internals (INTERFACE) carries an area's private root for the
# few that are allowed to reach in, each named where it links it: the areas
# that use core's MPI/HDF5 helpers (core/hdf5_util.hpp, core/mpi_util.hpp: they
# include hdf5.h and mpi.h, so they stay out of include/), and tests of an
# area's private classes.

set(LLMTRAIN_AREA_ROOTS ${PROJECT_BINARY_DIR}/include-areas)

# A symbolic link `link` -> `target`, made again when it points elsewhere.
function(_llmtrain_area_link target link)
  if(IS_SYMLINK "${link}")
    file(READ_SYMLINK "${link}" _old)
    if(_old STREQUAL "${target}")
      return()
    endif()
    file(REMOVE "${link}")
  endif()
  get_filename_component(_parent "${link}" DIRECTORY)
  file(MAKE_DIRECTORY "${_parent}")
  file(CREATE_LINK "${target}" "${link}" SYMBOLIC)
endfunction()

# llmtrain_add_area(<area> [PUBLIC <areas/targets...>] [PRIVATE <...>] [INTERNALS <areas...>]
#                   [EXCLUDE <regex>] [SOURCES <extra sources...>] [TARGET <name>])
# Sources: every src/<area>/**.cpp (and .cu with LLMTRAIN_WITH_CUDA), picked up
# by glob so that a new file needs no edit; *_arrow.cpp (llmtrain_arrow) and
# those matching EXCLUDE are left to other targets. PUBLIC/PRIVATE name areas
# (core, model, ...) or other targets; INTERNALS names areas whose private
# headers this one includes. TARGET: a library of the area's folder under
# another name (its sources then come from SOURCES only).
function(llmtrain_add_area area)
  cmake_parse_arguments(A "" "EXCLUDE;TARGET" "PUBLIC;PRIVATE;INTERNALS;SOURCES" ${ARGN})
  set(_src_dir ${PROJECT_SOURCE_DIR}/src/${area})
  set(_pub ${LLMTRAIN_AREA_ROOTS}/${area})
  set(_priv ${LLMTRAIN_AREA_ROOTS}/${area}-internals)
  if(NOT A_TARGET)
    # The roots (once per area) and the area's internals target.
    if(IS_DIRECTORY ${PROJECT_SOURCE_DIR}/include/llmtrain/${area})
      _llmtrain_area_link(${PROJECT_SOURCE_DIR}/include/llmtrain/${area} ${_pub}/llmtrain/${area})
    else()
      file(MAKE_DIRECTORY ${_pub})
    endif()
    _llmtrain_area_link(${_src_dir} ${_priv}/${area})
    add_library(llmtrain_${area}_internals INTERFACE)
    target_include_directories(llmtrain_${area}_internals INTERFACE ${_priv})
    foreach(_i IN LISTS A_INTERNALS)
      target_link_libraries(llmtrain_${area}_internals INTERFACE llmtrain_${_i}_internals)
    endforeach()

    file(GLOB_RECURSE _sources CONFIGURE_DEPENDS ${_src_dir}/*.cpp)
    if(LLMTRAIN_WITH_CUDA)
      file(GLOB_RECURSE _cu CONFIGURE_DEPENDS ${_src_dir}/*.cu)
      list(APPEND _sources ${_cu})
      # Each .cu compiles alone under LLMTRAIN_UNITY_BUILD: CMake batches only C and
      # C++ before 3.31 (Debian 12's 3.25), CUDA too from 3.31 (Debian 13's), where
      # kernels' file-local names (kThreads in act.cu, norm.cu, xent.cu) then
      # collide in one batch. One rule for every CMake.
      if(_cu)
        set_source_files_properties(${_cu} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
      endif()
    else()
      list(FILTER _sources EXCLUDE REGEX "(_cuda\\.cpp|raw_nccl\\.cpp)$")
    endif()
    list(FILTER _sources EXCLUDE REGEX "_arrow\\.cpp$")  # C++20: llmtrain_arrow
    if(A_EXCLUDE)
      list(FILTER _sources EXCLUDE REGEX "${A_EXCLUDE}")
    endif()
    set(_name llmtrain_${area})
  else()
    set(_sources)
    set(_name ${A_TARGET})
  endif()
  list(APPEND _sources ${A_SOURCES})

  # Areas named by their word, other targets as they are.
  set(_PUBLIC)
  set(_PRIVATE)
  foreach(_kind PUBLIC PRIVATE)
    foreach(_d IN LISTS A_${_kind})
      if(TARGET llmtrain_${_d})
        list(APPEND _${_kind} llmtrain_${_d})
      elseif(TARGET ${_d})
        list(APPEND _${_kind} ${_d})
      elseif(NOT _d STREQUAL "kernels")  # kernels: a slot, filled once src/kernels exists
        message(FATAL_ERROR "llmtrain_add_area(${area}): '${_d}' is neither an area defined above nor a target")
      endif()
    endforeach()
  endforeach()

  if(NOT _sources)
    # Headers only: the area is its public root and what it links.
    add_library(${_name} INTERFACE)
    target_include_directories(${_name} INTERFACE $<BUILD_INTERFACE:${_pub}>)
    target_link_libraries(${_name} INTERFACE ${_PUBLIC} ${_PRIVATE})
    return()
  endif()

  add_library(${_name} STATIC ${_sources})
  target_include_directories(${_name} PUBLIC $<BUILD_INTERFACE:${_pub}>)
  target_link_libraries(${_name} PUBLIC ${_PUBLIC} PRIVATE ${_PRIVATE} llmtrain_${area}_internals)
  foreach(_i IN LISTS A_INTERNALS)
    target_link_libraries(${_name} PRIVATE llmtrain_${_i}_internals)
  endforeach()
  target_compile_options(${_name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  if(LLMTRAIN_WITH_CUDA)
    # The .cu sources' architectures are the -gencode flags LibTorch's config puts in
    # CMAKE_CUDA_FLAGS (LLMTRAIN_CUDA_ARCH_LIST); CMake adds none of its own (a
    # re-configure otherwise stops: "CUDA_ARCHITECTURES is empty").
    set_target_properties(${_name} PROPERTIES CUDA_ARCHITECTURES OFF)
  endif()
  # One precompiled header for the whole library (LibTorch, fmt, nlohmann/json):
  # made once for llmtrain_core, reused by every other area (same flags and
  # definitions: they all come from llmtrain_core).
  if(_name STREQUAL "llmtrain_core")
    target_precompile_headers(${_name} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:<torch/torch.h$<ANGLE-R>>
      $<$<COMPILE_LANGUAGE:CXX>:<fmt/format.h$<ANGLE-R>>
      $<$<COMPILE_LANGUAGE:CXX>:<nlohmann/json.hpp$<ANGLE-R>>)
  else()
    target_precompile_headers(${_name} REUSE_FROM llmtrain_core)
  endif()
  # LLMTRAIN_UNITY_BUILD: batches of 8 sources within this library (see src/CMakeLists.txt).
  if(LLMTRAIN_UNITY_BUILD)
    set_target_properties(${_name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE BATCH UNITY_BUILD_BATCH_SIZE 8)
    target_compile_options(${_name} PRIVATE $<$<COMPILE_LANG_AND_ID:CXX,GNU>:-Wno-subobject-linkage>)  # a GCC warning: Clang has none
  endif()
endfunction()
