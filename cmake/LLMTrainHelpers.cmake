# llmtrain_add_test(NAME <name> SOURCES <files...> [NPROCS <n>] [LABELS <labels...>]
#                   [ARGS <args...>] [TIMEOUT <s>] [AREA <area>] [AREAS <areas...>])
# One test executable (GoogleTest main). It links the area of its folder
# (tests/<area>/ -> llmtrain_<area>; AREA names another, a folder that is no
# area links all of `llmtrain`) and, through the test main, distributed/'s
# Runtime: a test sees the headers of its area and of what that area links,
# so a test of model/ that includes a train/ header does not build. AREAS adds
# areas a test compares against on purpose (named where it is declared).
# NPROCS > 0 runs it under
#   ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} N ${MPIEXEC_PREFLAGS} <exe> ${MPIEXEC_POSTFLAGS}
# with Open MPI's run-as-root and oversubscribe settings and OMP_NUM_THREADS=1.
# Several NPROCS values may be given: one CTest test per value, named <name>_np<N>.
# Open MPI 5's (PRRTE's) oversubscribe setting is set for every test at once, by
# LLMTrainTestEnv.cmake, which CTest reads first.
set_property(DIRECTORY "${PROJECT_SOURCE_DIR}" APPEND PROPERTY TEST_INCLUDE_FILES
  "${CMAKE_CURRENT_LIST_DIR}/LLMTrainTestEnv.cmake")
function(llmtrain_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT;AREA" "SOURCES;NPROCS;LABELS;ARGS;AREAS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  if(NOT T_AREA)
    get_filename_component(T_AREA ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  endif()
  set(_links)
  foreach(_a IN LISTS T_AREA T_AREAS)
    if(TARGET llmtrain_${_a})
      list(APPEND _links llmtrain_${_a})
    endif()
  endforeach()
  if(NOT TARGET llmtrain_${T_AREA})
    set(_links llmtrain)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${_links} llmtrain_test_main)
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
