# What `cmake --install` puts in the prefix: the headers (C ABI and C++ wrapper), the shared
# library under its SONAME (or the static libstreamattn.a), the CMake package (streamattn::streamattn, with a version file) and
# streamattn.pc for pkg-config, and the `streamattn` tool. tests/install/ builds a CMake and a
# pkg-config consumer against that tree.
include(CMakePackageConfigHelpers)

set(STREAMATTN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/streamattn)

install(FILES
    ${PROJECT_SOURCE_DIR}/include/streamattn/streamattn.h
    ${PROJECT_SOURCE_DIR}/include/streamattn/streamattn.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/streamattn
  COMPONENT Development)

install(TARGETS streamattn EXPORT streamattnTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT Runtime NAMELINK_COMPONENT Development
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT Development
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT Runtime)

install(EXPORT streamattnTargets
  NAMESPACE streamattn::
  DESTINATION ${STREAMATTN_CMAKE_DIR}
  COMPONENT Development)

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/streamattnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/streamattnConfig.cmake
  INSTALL_DESTINATION ${STREAMATTN_CMAKE_DIR})
# The SONAME changes with the major version, so only the same major is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/streamattnConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion)
install(FILES
    ${PROJECT_BINARY_DIR}/streamattnConfig.cmake
    ${PROJECT_BINARY_DIR}/streamattnConfigVersion.cmake
  DESTINATION ${STREAMATTN_CMAKE_DIR}
  COMPONENT Development)

# pkg-config: paths relative to the .pc file's directory unless GNUInstallDirs made them
# absolute (e.g. -DCMAKE_INSTALL_LIBDIR=/opt/lib), in which case they are used as given.
set(pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(STREAMATTN_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(STREAMATTN_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(STREAMATTN_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH up /prefix/${pc_dir} /prefix)
  string(REGEX REPLACE "/$" "" up "${up}")
  set(STREAMATTN_PC_PREFIX "\${pcfiledir}/${up}")
  set(STREAMATTN_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(STREAMATTN_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
set(STREAMATTN_PC_REQUIRES_PRIVATE libhwy)
if(STREAMATTN_TBB)
  string(APPEND STREAMATTN_PC_REQUIRES_PRIVATE " tbb")
endif()
set(STREAMATTN_PC_LIBS_PRIVATE "-lstdc++ -lm -lpthread")
foreach(lib IN LISTS CMAKE_DL_LIBS)
  string(APPEND STREAMATTN_PC_LIBS_PRIVATE " -l${lib}")
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/streamattn.pc.in ${PROJECT_BINARY_DIR}/streamattn.pc
  @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/streamattn.pc DESTINATION ${pc_dir} COMPONENT Development)

# The CUDA plugin goes beside the library, where the library looks for it at run time. A MODULE,
# not part of the exported CMake package: nothing links it.
if(TARGET streamattn_cuda)
  install(TARGETS streamattn_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT Runtime)
endif()

# The tool finds the library beside it in the prefix, wherever the prefix is.
if(TARGET streamattn_tool)
  set_target_properties(streamattn_tool PROPERTIES INSTALL_RPATH "\$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
  install(TARGETS streamattn_tool RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT Runtime)
endif()
