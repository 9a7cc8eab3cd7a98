# LLMTrainArrow: Apache Arrow's C++ libraries (libarrow, libparquet) and headers
# from the pyarrow wheel, as LibTorch comes from the torch wheel.
#
# 1. The pin: python/requirements.txt's `pyarrow==X.Y.Z`; scripts/install-deps.sh
#    installs it into the venv beside torch.
# 2. Which pyarrow: Arrow_DIR/Parquet_DIR or a CMAKE_PREFIX_PATH with
#    ArrowConfig.cmake (Spack's arrow, a system Arrow) win; otherwise
#    LLMTRAIN_PYTHON (the interpreter LLMTrainTorch chose) gives
#    pyarrow.get_include() and pyarrow.get_library_dirs().
# 3. The wheel's libraries carry only a versioned name (libarrow.so.2600, no
#    libarrow.so): the imported targets point at those files; their SONAME is what
#    the binaries record, and the build RPATH finds them in the wheel's folder.
# 4. ABI: the wheel is built with the new libstdc++ ABI (std::__cxx11) by a newer
#    GCC; the libstdc++-first link rule of src/CMakeLists.txt applies to it as to
#    LibTorch. Its headers need C++20: only src/data/*_arrow.cpp include them, and
#    they are compiled as C++20 in a target of their own (llmtrain_arrow).
# Targets: LLMTrain::arrow, LLMTrain::parquet (link only); LLMTRAIN_ARROW_INCLUDE_DIRS.

if(NOT TARGET LLMTrain::arrow)
  find_package(Arrow CONFIG QUIET)
  find_package(Parquet CONFIG QUIET)
  if(Arrow_FOUND AND Parquet_FOUND)
    add_library(LLMTrain::arrow INTERFACE IMPORTED)
    target_link_libraries(LLMTrain::arrow INTERFACE Arrow::arrow_shared)
    add_library(LLMTrain::parquet INTERFACE IMPORTED)
    target_link_libraries(LLMTrain::parquet INTERFACE Parquet::parquet_shared)
    get_target_property(LLMTRAIN_ARROW_INCLUDE_DIRS Arrow::arrow_shared INTERFACE_INCLUDE_DIRECTORIES)
    message(STATUS "llmtrain: Arrow ${Arrow_VERSION} from ${Arrow_DIR}")
  else()
    execute_process(
      COMMAND "${LLMTRAIN_PYTHON}" -c
              "import pyarrow as pa; print(pa.__version__); print(pa.get_include()); print(pa.get_library_dirs()[0])"
      OUTPUT_VARIABLE _pa ERROR_VARIABLE _pa_err RESULT_VARIABLE _rc OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT _rc EQUAL 0)
      message(FATAL_ERROR "llmtrain needs Apache Arrow's C++ libraries (Parquet/Arrow input of llmtrain-prepare): "
                          "${LLMTRAIN_PYTHON} does not import pyarrow (${_pa_err}). Run scripts/install-deps.sh "
                          "(python/requirements.txt pins pyarrow), or set Arrow_DIR and Parquet_DIR.")
    endif()
    string(REPLACE "\n" ";" _pa "${_pa}")
    list(GET _pa 0 _pa_version)
    list(GET _pa 1 _pa_include)
    list(GET _pa 2 _pa_libdir)
    foreach(_lib arrow parquet)
      file(GLOB _so "${_pa_libdir}/lib${_lib}.so.[0-9]*")
      list(FILTER _so EXCLUDE REGEX "\\.so\\.[0-9]+\\.[0-9]")  # the SONAME file, not a longer version link
      if(NOT _so)
        message(FATAL_ERROR "pyarrow ${_pa_version} at ${_pa_libdir} has no lib${_lib}.so.N")
      endif()
      list(GET _so 0 _so)
      add_library(LLMTrain::${_lib} SHARED IMPORTED)
      set_target_properties(LLMTrain::${_lib} PROPERTIES IMPORTED_LOCATION "${_so}")
    endforeach()
    # Only the *_arrow.cpp sources get it (src/CMakeLists.txt): the others, and
    # their precompiled header, compile as before.
    set(LLMTRAIN_ARROW_INCLUDE_DIRS "${_pa_include}")
    message(STATUS "llmtrain: Arrow ${_pa_version} from the pyarrow wheel (${_pa_libdir})")
  endif()
endif()

# Debian's codecs for compressed JSONL.
find_package(ZLIB REQUIRED)
find_package(LibLZMA REQUIRED)
find_path(ZSTD_INCLUDE_DIR zstd.h)
find_library(ZSTD_LIBRARY zstd)
if(NOT ZSTD_INCLUDE_DIR OR NOT ZSTD_LIBRARY)
  message(FATAL_ERROR "libzstd not found (Debian: libzstd-dev; scripts/install-deps.sh installs it)")
endif()
add_library(LLMTrain::zstd UNKNOWN IMPORTED)
set_target_properties(LLMTrain::zstd PROPERTIES IMPORTED_LOCATION "${ZSTD_LIBRARY}"
                      INTERFACE_INCLUDE_DIRECTORIES "${ZSTD_INCLUDE_DIR}")
