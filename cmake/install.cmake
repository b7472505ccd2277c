# `cmake --install`: the static library, the public headers and a package config, so that
# find_package(h3rt) gives the target h3rt::h3rt (the CLI is installed too).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS h3rt EXPORT h3rtTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS h3rt_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/h3rt DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT h3rtTargets NAMESPACE h3rt:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/h3rt)

set(H3RT_CONFIG_NEEDS_JSON ${nlohmann_json_FOUND})
configure_package_config_file(cmake/h3rtConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/h3rtConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/h3rt)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/h3rtConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/h3rtConfig.cmake ${CMAKE_BINARY_DIR}/h3rtConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/h3rt)
