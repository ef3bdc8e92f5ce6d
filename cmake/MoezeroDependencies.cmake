# Finds every dependency with a clear message when one is missing.
# scripts/install_deps.sh installs all of them on Debian.

macro(moezero_require found what package)
  if(NOT ${found})
    message(FATAL_ERROR "moezero: ${what} not found. Install the Debian package '${package}' "
                        "(or run scripts/install_deps.sh).")
  endif()
endmacro()

find_package(Threads REQUIRED)

find_package(TBB CONFIG QUIET)
moezero_require(TBB_FOUND "oneTBB" libtbb-dev)

# A CBLAS: OpenBLAS preferred (we pin it to one thread per call, see kernels/cpu).
set(BLA_VENDOR OpenBLAS)
find_package(BLAS QUIET)
if(NOT BLAS_FOUND)
  unset(BLA_VENDOR)
  find_package(BLAS QUIET)
endif()
moezero_require(BLAS_FOUND "a CBLAS library" libopenblas-dev)
# Debian keeps cblas.h under include/<arch>/openblas-pthread (also in scripts/gpu_bundle.sh's
# prefix, found through CMAKE_PREFIX_PATH).
find_path(MOEZERO_CBLAS_INCLUDE cblas.h
          PATH_SUFFIXES x86_64-linux-gnu/openblas-pthread openblas
          PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas)
moezero_require(MOEZERO_CBLAS_INCLUDE "cblas.h" libopenblas-dev)
include(CheckSymbolExists)
set(CMAKE_REQUIRED_LIBRARIES ${BLAS_LIBRARIES})
check_symbol_exists(openblas_set_num_threads "${MOEZERO_CBLAS_INCLUDE}/cblas.h" MOEZERO_HAVE_OPENBLAS)
unset(CMAKE_REQUIRED_LIBRARIES)

find_package(nlohmann_json 3 CONFIG QUIET)
moezero_require(nlohmann_json_FOUND "nlohmann-json" nlohmann-json3-dev)

# PCRE2: the byte-level BPE pre-tokenizer's regex (hf/). Through pkg-config when there is one;
# else (the bare GPU machine has none: scripts/gpu_bundle.sh's prefix) pcre2.h and libpcre2-8
# found directly, as an imported target of the same name, PkgConfig::PCRE2, so that every
# consumer links one target either way.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PCRE2 QUIET IMPORTED_TARGET libpcre2-8)
endif()
if(NOT PCRE2_FOUND)
  find_path(MOEZERO_PCRE2_INCLUDE pcre2.h)
  find_library(MOEZERO_PCRE2_LIBRARY NAMES pcre2-8)
  if(MOEZERO_PCRE2_INCLUDE AND MOEZERO_PCRE2_LIBRARY)
    add_library(PkgConfig::PCRE2 UNKNOWN IMPORTED)
    set_target_properties(PkgConfig::PCRE2 PROPERTIES
      IMPORTED_LOCATION "${MOEZERO_PCRE2_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${MOEZERO_PCRE2_INCLUDE}")
    set(PCRE2_FOUND TRUE)
    message(STATUS "moezero: PCRE2 without pkg-config: ${MOEZERO_PCRE2_LIBRARY}")
  endif()
endif()
moezero_require(PCRE2_FOUND "PCRE2 (libpcre2-8)" libpcre2-dev)

find_package(ZLIB QUIET)  # crc32 of checkpoint files
moezero_require(ZLIB_FOUND "zlib" zlib1g-dev)

if(MOEZERO_BUILD_TESTS)
  find_package(GTest CONFIG QUIET)
  moezero_require(GTest_FOUND "GoogleTest" libgtest-dev)
endif()
if(MOEZERO_BUILD_BENCHMARKS)
  find_package(benchmark CONFIG QUIET)
  moezero_require(benchmark_FOUND "Google Benchmark" libbenchmark-dev)
endif()

# ---- CUDA ------------------------------------------------------------------------------
set(MOEZERO_HAVE_CUDA OFF)
# GPU: as AUTO, but only when this machine shows a GPU (the NVIDIA driver lists one under
# /proc/driver/nvidia/gpus). scripts/run.sh configures so: the first result needs no CUDA
# kernels that cannot run here. scripts/build.sh (the test build, CI) switches GPU to AUTO, so
# every CUDA target is compiled wherever nvcc is.
set(_moezero_cuda_wanted ON)
if(MOEZERO_CUDA STREQUAL "OFF")
  set(_moezero_cuda_wanted OFF)
elseif(MOEZERO_CUDA STREQUAL "GPU")
  file(GLOB _moezero_gpus /proc/driver/nvidia/gpus/*)
  if(NOT _moezero_gpus)
    set(_moezero_cuda_wanted OFF)
    message(STATUS "moezero: MOEZERO_CUDA=GPU and no GPU visible, CUDA backend OFF")
  endif()
elseif(NOT MOEZERO_CUDA MATCHES "^(AUTO|ON)$")
  message(FATAL_ERROR "moezero: MOEZERO_CUDA=${MOEZERO_CUDA}: expected AUTO, GPU, ON or OFF")
endif()
if(_moezero_cuda_wanted)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES 90)
    enable_language(CUDA)
    # CMake < 3.26 has no C++20 flag for nvcc (try_compile of enable_language fails when
    # CMAKE_CUDA_STANDARD is 20 before it). nvcc >= 12 accepts -std=c++20: teach CMake, then ask.
    if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    # NCCL: MOEZERO_NCCL_ROOT (e.g. a pip wheel's nvidia/nccl, which ships libnccl.so.2 only;
    # scripts/gpu_check.sh passes it), then next to the CUDA toolkit, then the system.
    find_library(MOEZERO_NCCL_LIBRARY NAMES nccl libnccl.so.2
                 HINTS ${MOEZERO_NCCL_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
    find_path(MOEZERO_NCCL_INCLUDE nccl.h
              HINTS ${MOEZERO_NCCL_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
    if(NOT MOEZERO_NCCL_LIBRARY OR NOT MOEZERO_NCCL_INCLUDE)
      message(FATAL_ERROR "moezero: CUDA is on but NCCL (nccl.h, libnccl.so) was not found next to "
                          "the CUDA toolkit (${CUDAToolkit_LIBRARY_DIR}).")
    endif()
    find_path(MOEZERO_CCCL_INCLUDE cub/cub.cuh HINTS ${CUDAToolkit_INCLUDE_DIRS}/cccl /usr/local/cuda/include/cccl)
    if(NOT MOEZERO_CCCL_INCLUDE)
      message(FATAL_ERROR "moezero: CUB/Thrust (CCCL) headers not found in the CUDA toolkit.")
    endif()
    set(MOEZERO_HAVE_CUDA ON)
    message(STATUS "moezero: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, sm_90, NCCL ${MOEZERO_NCCL_LIBRARY})")
  elseif(MOEZERO_CUDA STREQUAL "ON")
    message(FATAL_ERROR "moezero: MOEZERO_CUDA=ON but no nvcc was found (looked in PATH and /usr/local/cuda/bin).")
  else()
    message(STATUS "moezero: nvcc not found, CUDA backend OFF")
  endif()
endif()

# ---- MPI (multi-process launch: mpirun -np N moezero train ...) -------------------------
set(MOEZERO_HAVE_MPI OFF)
if(NOT MOEZERO_MPI STREQUAL "OFF")
  # FindMPI's C component probes with the C compiler; moezero uses MPI's C API from C++.
  enable_language(C)
  find_package(MPI QUIET COMPONENTS C)
  if(MPI_C_FOUND)
    set(MOEZERO_HAVE_MPI ON)
    find_program(MOEZERO_MPIEXEC NAMES mpirun mpiexec HINTS ${MPI_C_COMPILER_DIR})
    if(MPIEXEC_EXECUTABLE)
      set(MOEZERO_MPIEXEC ${MPIEXEC_EXECUTABLE})
    endif()
    message(STATUS "moezero: MPI ON (${MPI_C_LIBRARIES}; launcher ${MOEZERO_MPIEXEC})")
  elseif(MOEZERO_MPI STREQUAL "ON")
    message(FATAL_ERROR "moezero: MOEZERO_MPI=ON but no MPI was found. Install the Debian packages "
                        "'openmpi-bin libopenmpi-dev' (or run scripts/install_deps.sh).")
  else()
    message(STATUS "moezero: MPI not found, multi-process launch OFF (threads-as-ranks only)")
  endif()
endif()
