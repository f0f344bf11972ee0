# tc_add_test(NAME SOURCES <files...> DEPS <targets...>)
#
# Declares one GoogleTest binary and registers its tests with CTest, one CTest entry per
# test case (gtest_discover_tests), so `ctest` reports each case by name.
include(GoogleTest)
function(tc_add_test name)
  cmake_parse_arguments(TC "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${TC_SOURCES})
  target_link_libraries(${name} PRIVATE ${TC_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  gtest_discover_tests(${name} TEST_PREFIX "${name}." DISCOVERY_TIMEOUT 60
                       PROPERTIES TIMEOUT 600)
endfunction()
