# Installation and packaging, in one place (included at the end of the top-level CMakeLists.txt,
# once every target exists). The folders' CMakeLists.txt declare no install rules.
#
#   cmake --install BUILD [--prefix P]   everything below, into P (default CMAKE_INSTALL_PREFIX)
#   cpack -G DEB (in BUILD)              tensorcompute_<version>_<arch>.deb: the server and the CLI
#                                        tensorcompute-dev_<version>_<arch>.deb: the C++ client
#
# What goes where (GNUInstallDirs), by component:
#   runtime  bin/tensorcompute-server, bin/tensorcompute
#   dev      lib/libtc_client.a, libtc_proto.a, libtc_core.a (exported as tensorcompute::client,
#            ::proto, ::core); include/tensorcompute/{client,core,proto}/*.h and the generated
#            include/tensorcompute/tensorcompute/v1/*.pb.h, so that the headers' own includes
#            ("client/client.h", "core/dtype.h", "tensorcompute/v1/tensorcompute.pb.h") resolve
#            from include/tensorcompute; lib/cmake/tensorcompute/, the CMake package:
#
#     find_package(tensorcompute CONFIG REQUIRED)
#     target_link_libraries(app PRIVATE tensorcompute::client)
#
# The package is relocatable (every path in it is relative to where it is found) and finds what
# the exported targets link (cmake/tensorcompute-config.cmake.in). tests/package checks all of
# it: an outside project built against an installed copy calls the installed server.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TC_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/tensorcompute)
set(TC_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/tensorcompute)

# --- The exported targets: tensorcompute::client and what it links -------------------------
# The folders give their targets include directories in the source and build trees, which an
# installed package must not name. tc_export_includes keeps them for the build tree only
# ($<BUILD_INTERFACE:...>) and adds the installed include root instead.
function(tc_export_includes target)
  get_target_property(dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
  set(exported "")
  if(dirs)
    foreach(dir IN LISTS dirs)
      if(dir MATCHES "^\\$<")  # already a generator expression: the folder chose
        list(APPEND exported "${dir}")
      else()
        list(APPEND exported "$<BUILD_INTERFACE:${dir}>")
      endif()
    endforeach()
  endif()
  list(APPEND exported "$<INSTALL_INTERFACE:${TC_INSTALL_INCLUDEDIR}>")
  set_property(TARGET ${target} PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${exported}")
endfunction()

foreach(target tc_core tc_proto tc_client)
  tc_export_includes(${target})
endforeach()
# The headers are C++20; say so to whoever links them (the build sets CMAKE_CXX_STANDARD).
target_compile_features(tc_core INTERFACE cxx_std_20)
set_target_properties(tc_core PROPERTIES EXPORT_NAME core)
set_target_properties(tc_proto PROPERTIES EXPORT_NAME proto)
set_target_properties(tc_client PROPERTIES EXPORT_NAME client)
# The same names in this build tree, for projects that add tensorcompute as a subdirectory.
add_library(tensorcompute::core ALIAS tc_core)
add_library(tensorcompute::proto ALIAS tc_proto)
add_library(tensorcompute::client ALIAS tc_client)

install(TARGETS tc_core tc_proto tc_client
  EXPORT tensorcompute-targets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
)

# --- Headers: those of the exported targets, at the paths they include each other by --------
# The client's own (its CLI's cli_*.h are not part of the library), core's (not batching/ or
# cuda/, which the client never includes), proto's codec, and the generated messages and stubs.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/client/
  DESTINATION ${TC_INSTALL_INCLUDEDIR}/client COMPONENT dev
  FILES_MATCHING PATTERN "*.h"
  PATTERN "cli_*" EXCLUDE
  PATTERN "python" EXCLUDE
)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/core/
  DESTINATION ${TC_INSTALL_INCLUDEDIR}/core COMPONENT dev
  FILES_MATCHING PATTERN "*.h"
  PATTERN "batching" EXCLUDE
  PATTERN "cuda" EXCLUDE
)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/proto/
  DESTINATION ${TC_INSTALL_INCLUDEDIR}/proto COMPONENT dev
  FILES_MATCHING PATTERN "*.h"
  PATTERN "grpc" EXCLUDE
  PATTERN "inference" EXCLUDE
  PATTERN "tensorcompute" EXCLUDE
)
# proto/CMakeLists.txt generates into <its binary dir>/gen (TC_PROTO_GEN_DIR there). Only the
# tensorcompute/v1 headers: the health and KServe stubs in tc_proto are the server's business,
# and their generic paths (grpc/health/v1/health.pb.h) could shadow a user's own.
get_target_property(tc_proto_binary_dir tc_proto BINARY_DIR)
install(DIRECTORY ${tc_proto_binary_dir}/gen/tensorcompute/v1/
  DESTINATION ${TC_INSTALL_INCLUDEDIR}/tensorcompute/v1 COMPONENT dev
  FILES_MATCHING PATTERN "*.pb.h"
)

# --- The CMake package -------------------------------------------------------------------
install(EXPORT tensorcompute-targets
  NAMESPACE tensorcompute::
  DESTINATION ${TC_INSTALL_CMAKEDIR} COMPONENT dev
)
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/tensorcompute-config.cmake.in
  ${PROJECT_BINARY_DIR}/tensorcompute-config.cmake
  INSTALL_DESTINATION ${TC_INSTALL_CMAKEDIR}
)
# 0.x: a minor version may break the API, so only the same minor version is compatible.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/tensorcompute-config-version.cmake
  COMPATIBILITY SameMinorVersion
)
install(FILES
  ${PROJECT_BINARY_DIR}/tensorcompute-config.cmake
  ${PROJECT_BINARY_DIR}/tensorcompute-config-version.cmake
  DESTINATION ${TC_INSTALL_CMAKEDIR} COMPONENT dev
)

# --- The programs ------------------------------------------------------------------------
install(TARGETS tensorcompute-server tensorcompute
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime
)

# --- Debian packages (CPack) ---------------------------------------------------------------
# One .deb per component: tensorcompute (runtime), whose Depends dpkg-shlibdeps computes from
# the binaries (Debian's dpkg-dev), and tensorcompute-dev, whose Depends are the -dev packages
# that the CMake package finds (static libraries have no shared-library dependencies to scan).
# The first line of each description is its package's synopsis (so no
# CPACK_PACKAGE_DESCRIPTION_SUMMARY, which CPack 3.25 would put first in both).
set(TC_PACKAGE_MAINTAINER
  "tensorcompute maintainers <maintainers@users.noreply.a-seed-b683c36e.example>"
  CACHE STRING "Maintainer of the Debian packages (cpack -G DEB)")
set(CPACK_PACKAGE_NAME tensorcompute)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${TC_PACKAGE_MAINTAINER}")
set(CPACK_GENERATOR DEB)
set(CPACK_COMPONENTS_ALL runtime dev)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME tensorcompute)
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION
  "Gather, GatherNd and EmbeddingBag as a gRPC service: server and CLI
tensorcompute-server computes tf.gather, tf.gather_nd and torch's embedding_bag for
callers in any language, over gRPC (its own API and KServe v2) and HTTP/REST, on NVIDIA
GPUs when there are some and on a CPU thread pool otherwise. tensorcompute is its
command-line client and load tester.")
set(CPACK_DEBIAN_DEV_PACKAGE_NAME tensorcompute-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_SHLIBDEPS OFF)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
  "libabsl-dev, libprotobuf-dev, libgrpc++-dev, protobuf-compiler-grpc, nlohmann-json3-dev, libboost1.81-dev")
set(CPACK_DEBIAN_DEV_DESCRIPTION
  "Gather, GatherNd and EmbeddingBag as a gRPC service: C++ client library
The static C++ client of tensorcompute-server (tensorcompute::client), its headers and
a CMake package: find_package(tensorcompute CONFIG REQUIRED).")
include(CPack)
