# Cross-compiling for 64-bit Arm Linux with Debian's cross g++ and the arm64 multiarch
# development packages (libhwy-dev:arm64, libtbb-dev:arm64, libgtest-dev:arm64). ctest runs the
# binaries under qemu-user; STREAMATTN_QEMU_CPU picks the emulated core (cortex-a72: NEON,
# max: SVE2). qemu runs without -L: with -L /usr/aarch64-linux-gnu oneTBB's threads hang.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr/lib/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
if(NOT DEFINED STREAMATTN_QEMU_CPU)
  set(STREAMATTN_QEMU_CPU max)
endif()
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -cpu ${STREAMATTN_QEMU_CPU})
