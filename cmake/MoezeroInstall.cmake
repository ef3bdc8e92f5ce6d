# The moezero CMake package: `cmake --install build --prefix P` installs
#   P/lib/libmoezero_*.a                      every static library, exported as moezero::<name>
#   P/include/moezero/moezero.h, api.h         the umbrella header and the API conveniences
#   P/include/moezero/{core,kernels,comm,prefetch,zero,layers,moe,model,hf,train}/
#                                              every header of those layers (subfolders too)
#   P/lib/cmake/moezero/moezeroConfig.cmake    + version file and moezeroTargets.cmake
#   P/bin/moezero                              the CLI
# so that a program does find_package(moezero) and links moezero::moezero. Include dirs of an
# installed target are P/include (`#include <moezero/moezero.h>`) and P/include/moezero (the
# in-tree "core/tensor.h" style the headers use among themselves).
#
# Dependencies recorded for consumers: Threads, TBB, nlohmann_json, ZLIB and, in a CUDA build,
# CUDAToolkit and, in an MPI build, MPI (C) are found again by moezeroConfig.cmake. The BLAS libraries and NCCL are linked
# by the absolute paths found at build time: right on the machine (or image) that built the
# package, not relocatable to one whose OpenBLAS/NCCL lives elsewhere.
# A sanitizer build (MOEZERO_SANITIZE) installs instrumented libraries: moezero::moezero then
# carries the -fsanitize link flag, so that a consumer links the sanitizer runtime.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MOEZERO_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/moezero)

set(_moezero_libs moezero_core moezero_kernels_cpu moezero_sim moezero_kernels moezero_comm
                  moezero_prefetch
                  moezero_zero moezero_layers moezero_moe moezero_model moezero_hf moezero_trainer
                  moezero_api)
if(MOEZERO_HAVE_CUDA)
  list(APPEND _moezero_libs moezero_kernels_cuda)
endif()

if(MOEZERO_SANITIZE)
  string(REPLACE ";" "," _moezero_san "${MOEZERO_SANITIZE}")
  target_link_options(moezero_all INTERFACE $<INSTALL_INTERFACE:-fsanitize=${_moezero_san}>)
endif()

install(TARGETS ${_moezero_libs} moezero_all
  EXPORT moezeroTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} ${CMAKE_INSTALL_INCLUDEDIR}/moezero)
install(TARGETS moezero RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Headers: globbed at install time, so headers added later are installed without an edit here.
foreach(_dir core kernels comm prefetch zero layers moe model hf train)
  if(IS_DIRECTORY ${PROJECT_SOURCE_DIR}/${_dir})
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${_dir}/
      DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/moezero/${_dir}
      FILES_MATCHING PATTERN "*.h" PATTERN "*.def")
  endif()
endforeach()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/moezero/
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/moezero
  FILES_MATCHING PATTERN "*.h")

install(EXPORT moezeroTargets
  NAMESPACE moezero::
  FILE moezeroTargets.cmake
  DESTINATION ${MOEZERO_INSTALL_CMAKEDIR})

# Values baked into moezeroConfig.cmake.
set(MOEZERO_PACKAGE_CUDA ${MOEZERO_HAVE_CUDA})
set(MOEZERO_PACKAGE_MPI ${MOEZERO_HAVE_MPI})
set(MOEZERO_PACKAGE_CUDA_ROOT "")
if(MOEZERO_HAVE_CUDA)
  get_filename_component(MOEZERO_PACKAGE_CUDA_ROOT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/moezeroConfig.cmake.in
  ${PROJECT_BINARY_DIR}/moezeroConfig.cmake
  INSTALL_DESTINATION ${MOEZERO_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/moezeroConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/moezeroConfig.cmake
              ${PROJECT_BINARY_DIR}/moezeroConfigVersion.cmake
  DESTINATION ${MOEZERO_INSTALL_CMAKEDIR})
