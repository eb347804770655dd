# `cpack -G DEB` in a build directory makes ddprun_<version>_<arch>.deb:
# the programs, the systemd unit and its environment file (a conffile),
# the Slurm batch script, the progress and checkpoint modules and the
# README (what cmake/install.cmake installs). Its run-time dependencies are
# the library packages that dpkg-shlibdeps finds for the programs (libuv1,
# libsodium23, libopenblas0, ...), so `apt-get install ./ddprun_*.deb`
# pulls them.
# A Debian package installs under /usr: configure with
# -DCMAKE_INSTALL_PREFIX=/usr (deploy/deb.sh does).
if(SKBUILD)
  return()
endif()

set(CPACK_PACKAGE_NAME ddprun)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "ddprun maintainers <ddprun@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "launcher and elastic supervisor for data-parallel training")
set(CPACK_PACKAGE_DESCRIPTION
    "ddprun starts and supervises data-parallel training jobs as torchrun does, in C; ddprun-rdzv is its standalone rendezvous server and train its data-parallel worker. Build: ${DDPRUN_BUILD_FEATURES}.")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# dpkg-shlibdeps skips a library that no Debian package owns (the CUDA
# toolkit's). The GPU module needs cuBLAS and NCCL, which Debian's archive
# does not have: NVIDIA's CUDA repository's packages are recommended, not
# required, as train runs on the CPU without them (worker/train/gpu/gpu_loader.c).
if(DDPRUN_HAVE_CUDA)
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _cuda_mm "${CUDAToolkit_VERSION}")
  string(REPLACE "." "-" _cuda_mm "${_cuda_mm}")
  set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libcublas-${_cuda_mm}, libnccl2")
endif()
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3, slurm-client, systemd")
configure_file(${CMAKE_CURRENT_LIST_DIR}/conffiles.in
               ${CMAKE_BINARY_DIR}/deploy/conffiles @ONLY)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/deploy/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

include(CPack)
