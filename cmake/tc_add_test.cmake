# tc_add_test(NAME SOURCES <files...> DEPS <targets...> [PCH <headers...>])
#
# Declares one GoogleTest binary and registers its tests with CTest, one CTest entry per
# test case (gtest_discover_tests), so `ctest` reports each case by name.
#
# Every test binary compiles with a precompiled header: GoogleTest, GoogleMock and the
# standard and Abseil headers nearly every test includes, plus the binary's own PCH list (the
# gRPC, generated and server headers of the server and client tests, whose parse is most of a
# test file's compile). Only headers that every source of the binary may see go there: a PCH
# is included first in every source, and it changes no source's meaning (each still includes
# what it uses).
include(GoogleTest)
# Every test requires this fixture, whose cleanup (tests/tools: leftovers.py) runs after all of
# them and fails the run if a process a test started is still alive. Tests declared with a bare
# add_test name it in their FIXTURES_REQUIRED too.
set(TC_NO_LEFTOVERS tc_no_leftovers)
set(TC_TEST_PCH
  <algorithm> <cstdint> <cstring> <memory> <string> <utility> <vector>
  <gtest/gtest.h> <gmock/gmock.h>
  <absl/status/status.h> <absl/status/statusor.h> <absl/strings/str_cat.h> <absl/time/time.h>
)
function(tc_add_test name)
  cmake_parse_arguments(TC "" "" "SOURCES;DEPS;PCH" ${ARGN})
  add_executable(${name} ${TC_SOURCES})
  target_link_libraries(${name} PRIVATE ${TC_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_precompile_headers(${name} PRIVATE ${TC_TEST_PCH} ${TC_PCH})
  # GCC 12 at -O3 reports false positives of -Warray-bounds and -Wstringop-overflow inside
  # libstdc++'s std::string (GCC bugs 105329 and 105651), and with precompiled headers its
  # inlining brings them to test files that never had them. Tests only; clang (the ASan
  # build) keeps both warnings on them.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${name} PRIVATE -Wno-array-bounds -Wno-stringop-overflow)
  endif()
  # Clang stamps a PCH with its inputs' times, so every rebuilt PCH (another clone, another
  # checkout) differs and ccache misses every source using it; the ccache manual's remedy.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    target_compile_options(${name} PRIVATE "SHELL:-Xclang -fno-pch-timestamp")
  endif()
  gtest_discover_tests(${name} TEST_PREFIX "${name}." DISCOVERY_TIMEOUT 60
                       PROPERTIES TIMEOUT 600 FIXTURES_REQUIRED ${TC_NO_LEFTOVERS})
endfunction()
