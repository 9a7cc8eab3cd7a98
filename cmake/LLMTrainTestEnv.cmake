# Read by CTest before it runs any test (the top directory's TEST_INCLUDE_FILES,
# set in LLMTrainHelpers.cmake): environment every MPI test needs, whatever Open
# MPI launches it, set once here rather than in each test's ENVIRONMENT.
# Open MPI 5 (Debian 13's 5.0.7) launches through PRRTE, which ignores Open MPI
# 4's OMPI_MCA_rmaps_base_oversubscribe (the tests' ENVIRONMENT, Debian 12's and
# Ubuntu 24.04's 4.1) and refuses 3 ranks on 2 cores ("not enough slots"):
# PRRTE's own setting, unless the caller chose a mapping policy.
if(NOT DEFINED ENV{PRTE_MCA_rmaps_default_mapping_policy})
  set(ENV{PRTE_MCA_rmaps_default_mapping_policy} ":oversubscribe")
endif()
