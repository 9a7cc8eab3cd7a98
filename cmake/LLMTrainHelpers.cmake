# llmtrain_add_test(NAME <name> SOURCES <files...> [NPROCS <n>] [LABELS <labels...>]
#                   [ARGS <args...>] [TIMEOUT <s>])
# One test executable (GoogleTest main, links llmtrain). NPROCS > 0 runs it under
#   ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} N ${MPIEXEC_PREFLAGS} <exe> ${MPIEXEC_POSTFLAGS}
# with Open MPI's run-as-root and oversubscribe settings and OMP_NUM_THREADS=1.
# Several NPROCS values may be given: one CTest test per value, named <name>_np<N>.
function(llmtrain_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;NPROCS;LABELS;ARGS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE llmtrain llmtrain_test_main)
  if(NOT T_NPROCS)
    add_test(NAME ${T_NAME} COMMAND ${T_NAME} ${T_ARGS})
    set(_tests ${T_NAME})
    set_tests_properties(${T_NAME} PROPERTIES PROCESSORS 1)
  else()
    set(_tests)
    foreach(np IN LISTS T_NPROCS)
      set(_t ${T_NAME}_np${np})
      add_test(NAME ${_t}
        COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${MPIEXEC_PREFLAGS}
                $<TARGET_FILE:${T_NAME}> ${MPIEXEC_POSTFLAGS} ${T_ARGS})
      set_tests_properties(${_t} PROPERTIES PROCESSORS ${np})
      list(APPEND _tests ${_t})
    endforeach()
  endif()
  foreach(_t IN LISTS _tests)
    set_tests_properties(${_t} PROPERTIES
      TIMEOUT ${T_TIMEOUT}
      LABELS "${T_LABELS}"
      SKIP_RETURN_CODE 77
      WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}
      ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;LLMTRAIN_SOURCE_DIR=${PROJECT_SOURCE_DIR};LLMTRAIN_BUILD_DIR=${PROJECT_BINARY_DIR}")
  endforeach()
endfunction()
