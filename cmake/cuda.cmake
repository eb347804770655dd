# Detects the CUDA toolkit and NCCL. The GPU code is optional: without them
# the project builds and tests on the CPU alone.
set(DDPRUN_HAVE_CUDA OFF)
if(NOT DDPRUN_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  find_package(CUDAToolkit QUIET)
  find_path(NCCL_INCLUDE_DIR nccl.h
    HINTS ENV NCCL_HOME ${NCCL_HOME} ${CUDAToolkit_INCLUDE_DIRS}
    PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY nccl
    HINTS ENV NCCL_HOME ${NCCL_HOME} ${CUDAToolkit_LIBRARY_DIR}
    PATH_SUFFIXES lib lib64)
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(DDPRUN_HAVE_CUDA ON)
    message(STATUS "ddprun: GPU code enabled (CUDA ${CUDAToolkit_VERSION}, NCCL ${NCCL_LIBRARY})")
    # Kernels for the data-centre GPUs (A100 sm_80, H100/H200 sm_90) plus
    # PTX of the newest, which later GPUs compile at load time.
    if(NOT CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "80-real;90" CACHE STRING "GPU architectures")
    endif()
    enable_language(CUDA)
    # NCCL as an imported target: its headers are system headers, so our
    # warning flags do not apply to them.
    add_library(dr_nccl_lib SHARED IMPORTED)
    set_target_properties(dr_nccl_lib PROPERTIES
      IMPORTED_LOCATION ${NCCL_LIBRARY}
      INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})

    # The GPU module (worker/train/gpu): where it is installed, where train looks
    # for it relative to its own directory, and where the module looks for
    # cuBLAS and NCCL before the system's library path. In a wheel it sits
    # in site-packages/ddprun_gpu and train in site-packages/ddprun.scripts
    # (auditwheel moves the programs there), and PyPI's nvidia-nccl-cuN
    # and nvidia-cublas(-cuN) install their libraries in
    # site-packages/nvidia/{nccl,cuN,cublas}/lib.
    if(SKBUILD)
      set(DDPRUN_GPU_MODULE_DIR ddprun_gpu)
      set(DDPRUN_GPU_MODULE_RELDIR ../ddprun_gpu)
      set(DDPRUN_GPU_MODULE_RPATH
          "$ORIGIN/../nvidia/nccl/lib;$ORIGIN/../nvidia/cu${CUDAToolkit_VERSION_MAJOR}/lib;$ORIGIN/../nvidia/cublas/lib")
    else()
      set(DDPRUN_GPU_MODULE_DIR ${CMAKE_INSTALL_LIBDIR}/ddprun)
      file(RELATIVE_PATH DDPRUN_GPU_MODULE_RELDIR ${CMAKE_INSTALL_FULL_BINDIR}
           ${CMAKE_INSTALL_FULL_LIBDIR}/ddprun)
      set(DDPRUN_GPU_MODULE_RPATH "")
    endif()
    # The sonames the loader tries from $CUDA_HOME and /usr/local/cuda when
    # the library path does not find them (cuBLASLt first: cuBLAS needs it).
    set(DDPRUN_GPU_NEEDED
        "libcublasLt.so.${CUDAToolkit_VERSION_MAJOR}:libcublas.so.${CUDAToolkit_VERSION_MAJOR}:libnccl.so.2")
  else()
    set(_why "")
    if(NOT CMAKE_CUDA_COMPILER)
      string(APPEND _why " nvcc not found;")
    endif()
    if(NOT CUDAToolkit_FOUND)
      string(APPEND _why " CUDA toolkit not found;")
    endif()
    if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
      string(APPEND _why " NCCL not found (set NCCL_HOME);")
    endif()
    if(DDPRUN_CUDA STREQUAL "ON")
      message(FATAL_ERROR "ddprun: DDPRUN_CUDA=ON but:${_why}")
    endif()
    message(STATUS "ddprun: GPU code disabled:${_why} building for CPU only")
  endif()
endif()
