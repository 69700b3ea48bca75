# Cross-compiling for 32-bit ARMv7 Linux (hard-float ABI) with Debian's cross g++
# (g++-arm-linux-gnueabihf) and the armhf multiarch development packages (libhwy-dev:armhf,
# libtbb-dev:armhf, libgtest-dev:armhf); scripts/test-arm.sh installs them.
#
# SIMD: Highway 1.0.3 compiles its NEON target into every kernel (its own `#pragma GCC target
# "+neon-vfpv4"`, so no -mfpu flag is needed here) next to a SCALAR fallback (GCC 12.2 predates
# the 12.3 fix Highway requires for EMU128). But Debian's armhf libhwy never reports NEON as
# supported: its run-time check reads AT_HWCAP and discards it (glibc names the bit
# HWCAP_ARM_NEON, not the HWCAP_NEON the check tests for), so the dispatcher always picks SCALAR.
# We keep Debian's baseline (armv7-a, vfpv3-d16, Thumb-2) rather than -mfpu=neon-vfpv4: making
# NEON the baseline would not change the dispatcher's choice and would stop the binaries from
# running on the NEON-less ARMv7 cores Debian's armhf supports.
#
# ctest runs the binaries under qemu-arm through qemu-run.sh; STREAMATTN_QEMU_CPU picks the
# emulated core when the tests run (default cortex-a15: NEON and VFPv4, like most ARMv7 boards).
set(CMAKE_SYSTEM_PROCESSOR armv7l)
set(STREAMATTN_CROSS_TRIPLET arm-linux-gnueabihf)
include(${CMAKE_CURRENT_LIST_DIR}/debian-multiarch.cmake)
# GCC notes every std::vector<int64_t> argument with "parameter passing ... changed in GCC 7.1"
# (-Wpsabi): that ABI change only matters when linking objects built by GCC 6 or older.
set(CMAKE_CXX_FLAGS_INIT -Wno-psabi)
set(CMAKE_CROSSCOMPILING_EMULATOR ${CMAKE_CURRENT_LIST_DIR}/qemu-run.sh qemu-arm cortex-a15)
