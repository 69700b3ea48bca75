# What the cross toolchain files share: Debian's cross gcc and g++ for the GNU triplet
# STREAMATTN_CROSS_TRIPLET (set by the file that includes this one), and find_package pointed at
# that architecture's multiarch development packages. Those install into /usr/lib/<triplet> of
# the host itself, so the library architecture, not a sysroot, is what points find_package at
# them; programs (compilers, code generators) are always the host's.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_C_COMPILER ${STREAMATTN_CROSS_TRIPLET}-gcc)
set(CMAKE_CXX_COMPILER ${STREAMATTN_CROSS_TRIPLET}-g++)
set(CMAKE_LIBRARY_ARCHITECTURE ${STREAMATTN_CROSS_TRIPLET})
set(CMAKE_FIND_ROOT_PATH /usr/${STREAMATTN_CROSS_TRIPLET})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
