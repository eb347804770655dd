# What `cmake --install` and the .deb put beside the programs: the systemd
# unit of ddprun-rdzv and its environment file, the Slurm batch script, the
# progress and checkpoint modules and the README. A wheel (SKBUILD) carries
# the programs and the Python modules only (pyproject.toml).
if(SKBUILD)
  return()
endif()

# The unit and its settings file: at install time (cmake/install_systemd.cmake),
# for the prefix of that install.
install(CODE "set(DDPRUN_SRC \"${CMAKE_SOURCE_DIR}\")
set(DDPRUN_BINARY_DIR \"${CMAKE_BINARY_DIR}\")
set(DDPRUN_BINDIR \"${CMAKE_INSTALL_BINDIR}\")")
install(SCRIPT ${CMAKE_CURRENT_LIST_DIR}/install_systemd.cmake)
install(PROGRAMS ${CMAKE_SOURCE_DIR}/deploy/slurm/ddprun.sbatch
        DESTINATION ${CMAKE_INSTALL_DATADIR}/ddprun/slurm)
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})

# The Python modules where the system's python3 finds them under /usr
# (Debian's dist-packages); elsewhere beside the Slurm script, for
# PYTHONPATH.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(DDPRUN_INSTALL_PYDIR lib/python3/dist-packages)
else()
  set(DDPRUN_INSTALL_PYDIR ${CMAKE_INSTALL_DATADIR}/ddprun/python)
endif()
install(DIRECTORY ${CMAKE_SOURCE_DIR}/python/ddprun_progress
                  ${CMAKE_SOURCE_DIR}/python/ddprun_ckpt
        DESTINATION ${DDPRUN_INSTALL_PYDIR}
        PATTERN __pycache__ EXCLUDE)
