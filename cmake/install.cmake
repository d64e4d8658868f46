# `cmake --install BUILD [--prefix DIR]`: the libraries, their headers, the `tessera` command, a
# CMake package (find_package(tessera) -> tessera::sim, tessera::sc_main, ...) and a pkg-config
# file (docs/packaging.md). tests/install builds an out-of-tree consumer against it.
include(CMakePackageConfigHelpers)

foreach(lib isa mapper models traces sim sc_main systemc warnings)
  set_target_properties(tessera_${lib} PROPERTIES EXPORT_NAME ${lib})
endforeach()
install(TARGETS tessera_isa tessera_mapper tessera_models tessera_traces tessera_sim tessera_sc_main
                tessera_systemc tessera_warnings
        EXPORT tesseraTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        OBJECTS DESTINATION ${CMAKE_INSTALL_LIBDIR}/tessera)
install(TARGETS tessera RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY isa mapper models traces sim DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tessera
        FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")

set(cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/tessera)
install(EXPORT tesseraTargets NAMESPACE tessera:: DESTINATION ${cmake_dir})
# MPI, when tessera was built with it (sim/jobs.cpp), is a dependency of tessera::sim.
if(MPI_CXX_FOUND)
  set(TESSERA_WITH_MPI TRUE)
  set(TESSERA_PC_MPI " ompi-cxx")
else()
  set(TESSERA_WITH_MPI FALSE)
  set(TESSERA_PC_MPI "")
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/tesseraConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/tesseraConfig.cmake INSTALL_DESTINATION ${cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tesseraConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tesseraConfig.cmake ${PROJECT_BINARY_DIR}/tesseraConfigVersion.cmake
        DESTINATION ${cmake_dir})

# Relocatable: the prefix is found from the .pc file's own place (an install with --prefix works).
file(RELATIVE_PATH pc_to_prefix "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(${PROJECT_SOURCE_DIR}/cmake/tessera.pc.in ${PROJECT_BINARY_DIR}/tessera.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tessera.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
