# LockstepInstall.cmake: install rules and the CMake package config for find_package(lockstep).
include(CMakePackageConfigHelpers)
file(GLOB LOCKSTEP_PUBLIC_HEADERS
  ${PROJECT_SOURCE_DIR}/runtime/core/*.h ${PROJECT_SOURCE_DIR}/runtime/*.h
  ${PROJECT_SOURCE_DIR}/kernels/ops.h ${PROJECT_SOURCE_DIR}/collectives/*.h)
list(FILTER LOCKSTEP_PUBLIC_HEADERS EXCLUDE REGEX "_impl\\.h$|device_probe\\.h$")
install(FILES ${LOCKSTEP_PUBLIC_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/lockstep)
# The same <lockstep/...> names in the build tree (links to the sources), so in-tree programs such
# as examples/quickstart include the headers as an installed lockstep's users do.
# Made afresh at each configure (a header removed or made private leaves no link behind); two
# public headers of one name would collide here and in the install.
file(REMOVE_RECURSE ${PROJECT_BINARY_DIR}/include/lockstep)
file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/include/lockstep)
set(lockstep_header_names "")
foreach(h ${LOCKSTEP_PUBLIC_HEADERS})
  get_filename_component(hn ${h} NAME)
  if(hn IN_LIST lockstep_header_names)
    message(FATAL_ERROR "two public headers named ${hn}: they would collide in include/lockstep/")
  endif()
  list(APPEND lockstep_header_names ${hn})
  file(CREATE_LINK ${h} ${PROJECT_BINARY_DIR}/include/lockstep/${hn} SYMBOLIC)
endforeach()
target_include_directories(lockstep PUBLIC $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>)
install(TARGETS lockstep EXPORT lockstepTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT lockstepTargets NAMESPACE lockstep:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/lockstepConfig.cmake.in
  ${PROJECT_BINARY_DIR}/lockstepConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/lockstepConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/lockstepConfig.cmake ${PROJECT_BINARY_DIR}/lockstepConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)
