# One version for every program and package: the project's own
# (project(ddprun VERSION ...)), with what this build put in, so that
# `ddprun --version`, `train --version`, `ddprun-rdzv --version`, the
# wheel's metadata and the .deb all say the same. Programs link dr_version
# and include ddprun_version.h (generated into the build directory).
if(DDPRUN_HAVE_CUDA)
  # nccl.h: "#define NCCL_MAJOR 2", NCCL_MINOR, NCCL_PATCH.
  set(_nccl "")
  foreach(_part MAJOR MINOR PATCH)
    file(STRINGS ${NCCL_INCLUDE_DIR}/nccl.h _line
         REGEX "^#define NCCL_${_part} +[0-9]+")
    string(REGEX REPLACE "^#define NCCL_${_part} +([0-9]+).*" "\\1" _n "${_line}")
    list(APPEND _nccl ${_n})
  endforeach()
  list(JOIN _nccl "." DDPRUN_NCCL_VERSION)
  set(DDPRUN_BUILD_FEATURES
      "CUDA ${CUDAToolkit_VERSION}, NCCL ${DDPRUN_NCCL_VERSION}")
else()
  set(DDPRUN_BUILD_FEATURES "no GPU code")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/ddprun_version.h.in
               ${CMAKE_BINARY_DIR}/generated/ddprun_version.h @ONLY)
add_library(dr_version INTERFACE)
target_include_directories(dr_version INTERFACE ${CMAKE_BINARY_DIR}/generated)
