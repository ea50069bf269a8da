# Called here too: the root adds fabric/ before it enables testing.
enable_testing()

# Tests of the provider through libfabric itself: Debian's fi_info and
# fi_pingpong, and a cmocka program using libfabric's API.
find_package(PkgConfig REQUIRED)
pkg_check_modules(FAB_CMOCKA REQUIRED IMPORTED_TARGET cmocka)

set(FAB_TEST_ENV FI_PROVIDER_PATH=${CMAKE_CURRENT_BINARY_DIR} FI_PROVIDER=tmx)

add_executable(fab_test fab_test.c)
target_link_libraries(fab_test PRIVATE PkgConfig::LIBFABRIC tmx_unit Threads::Threads)
add_dependencies(fab_test tmx-fi)
add_test(NAME fab_test COMMAND fab_test)
set_tests_properties(fab_test PROPERTIES TIMEOUT 300 ENVIRONMENT "${FAB_TEST_ENV}")

add_executable(fab_addr_test fab_addr_test.c)
target_link_libraries(fab_addr_test PRIVATE PkgConfig::LIBFABRIC tmx_unit Threads::Threads)
add_dependencies(fab_addr_test tmx-fi)
add_test(NAME fab_addr_test COMMAND fab_addr_test)
set_tests_properties(fab_addr_test PROPERTIES TIMEOUT 300 ENVIRONMENT "${FAB_TEST_ENV}")

# Edge cases of libfabric's API, each program a list of cases run in
# forked children with a watchdog (tests/fi_edge/fe_common.h): bad
# arguments, close order, flags, CQ formats and reads, AV abuse, the
# threading levels, a peer that dies.
foreach(p fe_args fe_getinfo fe_tagged fe_av fe_thread fe_fork fe_hostile)
  add_executable(${p} ${CMAKE_SOURCE_DIR}/tests/fi_edge/${p}.c)
  target_link_libraries(${p} PRIVATE PkgConfig::LIBFABRIC Threads::Threads)
  add_dependencies(${p} tmx-fi)
  add_test(NAME fab_edge_${p} COMMAND ${p})
  set_tests_properties(fab_edge_${p} PROPERTIES TIMEOUT 300 ENVIRONMENT "${FAB_TEST_ENV}")
endforeach()

# Debian's fi_info and fi_pingpong are not built with sanitizers: to load an
# ASan provider they need the sanitizer runtimes preloaded.
set(FAB_FOREIGN_ENV ${FAB_TEST_ENV})
if(TMX_SANITIZE MATCHES "address")
  set(preload "")
  foreach(rt asan ubsan)
    execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=lib${rt}.so
                    OUTPUT_VARIABLE rt_path OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(IS_ABSOLUTE "${rt_path}" AND EXISTS "${rt_path}")
      string(APPEND preload "${rt_path}:")
    endif()
  endforeach()
  list(APPEND FAB_FOREIGN_ENV LD_PRELOAD=${preload} ASAN_OPTIONS=detect_leaks=0)
endif()

add_test(NAME fab_fi_info COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/fi_info_test.sh)
set_tests_properties(fab_fi_info PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${FAB_FOREIGN_ENV}")

add_test(NAME fab_fi_pingpong COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/fi_pingpong_test.sh)
set_tests_properties(fab_fi_pingpong PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${FAB_FOREIGN_ENV}")

# libfabric's conformance suite, built by scripts/fabtests_build.sh outside
# the sources (skipped when it is not): every test that fits the provider,
# in both address modes. Sanitizer builds run a quick part of it.
set(FABTESTS_BIN "${CMAKE_SOURCE_DIR}/build/fabtests/fabtests/install/bin" CACHE PATH
    "fabtests' bin directory (scripts/fabtests_build.sh)")
set(FABTESTS_ENV ${FAB_FOREIGN_ENV} FABTESTS_BIN=${FABTESTS_BIN})
if(TMX_SANITIZE)
  list(APPEND FABTESTS_ENV FABTESTS_QUICK=1)
endif()
add_test(NAME fab_fabtests COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/fabtests_test.sh)
set_tests_properties(fab_fabtests PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${FABTESTS_ENV}")
