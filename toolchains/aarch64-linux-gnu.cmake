# Cross-compiling for 64-bit Arm Linux with Debian's cross g++ (g++-aarch64-linux-gnu) and the
# arm64 multiarch development packages (libhwy-dev:arm64, libtbb-dev:arm64, libgtest-dev:arm64);
# scripts/test-arm.sh installs them. Highway compiles NEON (the ARMv8 baseline), SVE, SVE2,
# SVE_256 and SVE2_128 into every kernel and picks one at run time, so one build runs on any
# ARMv8 core.
#
# ctest (and gtest_discover_tests) run the binaries under qemu-user through qemu-run.sh; the
# emulated core is chosen when the tests run, with STREAMATTN_QEMU_CPU (cortex-a72: NEON only,
# max: SVE2; default max). The discovered test lists depend on the core: delete
# tests/*_tests.cmake in the build directory when switching (scripts/test-arm.sh does).
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(STREAMATTN_CROSS_TRIPLET aarch64-linux-gnu)
include(${CMAKE_CURRENT_LIST_DIR}/debian-multiarch.cmake)
set(CMAKE_CROSSCOMPILING_EMULATOR ${CMAKE_CURRENT_LIST_DIR}/qemu-run.sh qemu-aarch64 max)
