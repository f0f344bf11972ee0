# Python end-to-end tests: scripts run with `python -m unittest -v SCRIPT` against the real
# binaries, from the folder that holds them, with tests/testing (server_process.py) importable.
#
# They need a Python with the test dependencies: tools/install-deps.sh makes one in .venv.
# TC_PYTHON_FOUND says whether there is one; without it, each folder registers one test that
# says so and is reported as skipped (tc_add_python_test does it).
#
# tc_add_python_test(SCRIPT [TRITON] [FIXTURES <fixtures...>] [TIMEOUT <s>] [COST <s>])
#
# COST: about how many seconds the test takes on a 2-core machine. `ctest -j` starts tests in
# descending COST when it has no timings of its own (a clean clone), so the long ones start
# first and none is left running alone at the end while the other core idles.
#
# TRITON: run it with the Python of .venv-triton instead (NVIDIA's tritonclient pins a protobuf
# that .venv's grpcio-tools refuses, so install-deps.sh keeps it apart); without one, the test
# is registered as skipped and says why.
set(TC_PYTHON "${PROJECT_SOURCE_DIR}/.venv/bin/python3" CACHE FILEPATH
    "Python with the test dependencies (numpy, grpcio, ml_dtypes, prometheus_client, ...)")
execute_process(
  COMMAND ${TC_PYTHON} -c
    "import numpy, grpc, grpc_tools, grpc_health, ml_dtypes, setuptools, wheel, prometheus_client"
  RESULT_VARIABLE tc_python_missing OUTPUT_QUIET ERROR_QUIET
)
if(tc_python_missing)
  set(TC_PYTHON_FOUND OFF)
else()
  set(TC_PYTHON_FOUND ON)
endif()
set(TC_TRITON_PYTHON "${PROJECT_SOURCE_DIR}/.venv-triton/bin/python3" CACHE FILEPATH
    "Python with numpy and tritonclient[grpc,http] (the KServe v2 tests)")
execute_process(
  COMMAND ${TC_TRITON_PYTHON} -c "import numpy, ml_dtypes, tritonclient.grpc, tritonclient.http"
  RESULT_VARIABLE tc_triton_missing OUTPUT_QUIET ERROR_QUIET
)
if(tc_triton_missing)
  set(TC_TRITON_PYTHON_FOUND OFF)
else()
  set(TC_TRITON_PYTHON_FOUND ON)
endif()


function(tc_add_python_test script)
  cmake_parse_arguments(TC "TRITON" "TIMEOUT;COST" "FIXTURES" ${ARGN})
  set(python ${TC_PYTHON})
  if(TC_TRITON)
    set(python ${TC_TRITON_PYTHON})
    if(NOT TC_TRITON_PYTHON_FOUND)
      add_test(NAME python.${script}.SKIPPED
        COMMAND sh -c "echo 'SKIPPED: no Python with numpy and tritonclient at ${TC_TRITON_PYTHON}; run tools/install-deps.sh'; exit 77")
      set_tests_properties(python.${script}.SKIPPED PROPERTIES SKIP_RETURN_CODE 77)
      return()
    endif()
  endif()
  if(NOT TC_TRITON AND NOT TC_PYTHON_FOUND)
    file(RELATIVE_PATH folder ${PROJECT_SOURCE_DIR}/tests ${CMAKE_CURRENT_SOURCE_DIR})
    if(NOT TEST python_tests.${folder}.SKIPPED)
      add_test(NAME python_tests.${folder}.SKIPPED
        COMMAND sh -c "echo 'SKIPPED: no Python with numpy/grpcio/ml_dtypes/prometheus_client at ${TC_PYTHON}; run tools/install-deps.sh'; exit 77")
      set_tests_properties(python_tests.${folder}.SKIPPED PROPERTIES SKIP_RETURN_CODE 77)
    endif()
    return()
  endif()
  if(NOT TC_TIMEOUT)
    set(TC_TIMEOUT 600)
  endif()
  add_test(NAME python.${script}
    COMMAND ${python} -m unittest -v ${script}
    WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(python.${script} PROPERTIES
    ENVIRONMENT
      "TC_SERVER_BINARY=$<TARGET_FILE:tensorcompute-server>;TC_CLI_BINARY=$<TARGET_FILE:tensorcompute>;TC_ECHO_SERVER_BINARY=$<TARGET_FILE:tensorcompute-echo-server>;PYTHONDONTWRITEBYTECODE=1;PYTHONPATH=${PROJECT_SOURCE_DIR}/tests/testing"
    TIMEOUT ${TC_TIMEOUT})
  list(APPEND TC_FIXTURES ${TC_NO_LEFTOVERS})
  set_tests_properties(python.${script} PROPERTIES FIXTURES_REQUIRED "${TC_FIXTURES}")
  if(TC_COST)
    set_tests_properties(python.${script} PROPERTIES COST ${TC_COST})
  endif()
endfunction()
