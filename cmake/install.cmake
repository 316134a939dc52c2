# Install rules: the three libraries, their headers (under include/keras/, the source tree's
# layout), kerasConfig.cmake with version and components (engine, distribution, layers), and
# keras.pc for pkg-config. After `cmake --install <build> --prefix <dir>`, another project
# finds it with find_package(keras 0.1 REQUIRED) and links keras::keras (examples/consumer/).
include(CMakePackageConfigHelpers)

# One export set per component, so find_package(keras COMPONENTS engine) needs neither MPI
# nor Gloo: kerasConfig.cmake loads a component's targets after finding its dependencies.
install(TARGETS keras_engine EXPORT kerasEngineTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS keras_distribution EXPORT kerasDistributionTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS keras_layers keras EXPORT kerasLayersTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The public headers; the backends' own headers (engine/cpu/, engine/cuda/, engine/no_gpu/)
# need Eigen or CUDA and are internal.
foreach(folder engine distribution layers training saving io)
  install(DIRECTORY ${folder}/ DESTINATION ${KERAS_INSTALL_INCLUDE_DIR}/${folder}
          FILES_MATCHING PATTERN "*.h" PATTERN "cpu" EXCLUDE PATTERN "cuda" EXCLUDE
          PATTERN "no_gpu" EXCLUDE)
endforeach()
install(FILES keras.h DESTINATION ${KERAS_INSTALL_INCLUDE_DIR})
# version.h is generated in the build tree; it goes beside the engine's other headers.
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/generated/engine/version.h
        DESTINATION ${KERAS_INSTALL_INCLUDE_DIR}/engine)

set(KERAS_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/keras)
foreach(component Engine Distribution Layers)
  install(EXPORT keras${component}Targets NAMESPACE keras:: DESTINATION ${KERAS_CMAKE_DIR})
endforeach()
configure_package_config_file(cmake/kerasConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/kerasConfig.cmake
                              INSTALL_DESTINATION ${KERAS_CMAKE_DIR})
# 0.x releases make no promise across minor versions: SameMinorVersion.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/kerasConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kerasConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/kerasConfigVersion.cmake
        DESTINATION ${KERAS_CMAKE_DIR})

# pkg-config. The libraries are static archives, so their dependencies go in Libs, not
# Libs.private: a plain `pkg-config --libs keras` must link.
set(KERAS_PKG_CUDA_LIBS "")
set(KERAS_PKG_CUDA_CFLAGS "")
if(KERAS_HAS_CUDA)
  # cuBLAS is loaded at run time (engine/cuda/cublas_library.h): dlopen, not -lcublas.
  set(KERAS_PKG_CUDA_LIBS "-L${CUDAToolkit_LIBRARY_DIR} -lcudart -ldl")
  if(KERAS_HAS_NCCL)
    set(KERAS_PKG_CUDA_LIBS "-L${CUDAToolkit_LIBRARY_DIR} -lnccl -lcudart -ldl")
  endif()
  set(KERAS_PKG_CUDA_CFLAGS "-DKERAS_HAS_CUDA=1")
endif()
# The prefix is given relative to the .pc file, since `cmake --install --prefix` may put the
# tree elsewhere than CMAKE_INSTALL_PREFIX said at configure time.
file(RELATIVE_PATH KERAS_PKG_PREFIX_FROM_PC "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" KERAS_PKG_PREFIX_FROM_PC "${KERAS_PKG_PREFIX_FROM_PC}")
configure_file(cmake/keras.pc.in ${CMAKE_CURRENT_BINARY_DIR}/keras.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/keras.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
