# What `cmake --install` and the .deb put beside the programs: the systemd
# unit of ddprun-rdzv and its environment file, the Slurm batch script, the
# progress module and the README. A wheel (SKBUILD) carries the programs and
# the progress module only (pyproject.toml).
if(SKBUILD)
  return()
endif()

# The unit as written names /usr/local/bin/ddprun-rdzv and /etc/ddprun/;
# the installed copy names where this prefix puts them (/usr/bin and /etc
# for the .deb, which is configured with CMAKE_INSTALL_PREFIX=/usr).
file(READ ${CMAKE_SOURCE_DIR}/deploy/systemd/ddprun-rdzv.service _unit)
string(REPLACE "/usr/local/bin/ddprun-rdzv"
       "${CMAKE_INSTALL_FULL_BINDIR}/ddprun-rdzv" _unit "${_unit}")
string(REPLACE "/etc/ddprun/" "${CMAKE_INSTALL_FULL_SYSCONFDIR}/ddprun/"
       _unit "${_unit}")
file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/deploy/ddprun-rdzv.service
     CONTENT "${_unit}")
# lib/, not LIBDIR: systemd looks in /usr/lib/systemd/system and
# /usr/local/lib/systemd/system, never in a multiarch directory.
install(FILES ${CMAKE_BINARY_DIR}/deploy/ddprun-rdzv.service
        DESTINATION lib/systemd/system)
install(FILES ${CMAKE_SOURCE_DIR}/deploy/systemd/ddprun-rdzv.env
        DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/ddprun)
install(PROGRAMS ${CMAKE_SOURCE_DIR}/deploy/slurm/ddprun.sbatch
        DESTINATION ${CMAKE_INSTALL_DATADIR}/ddprun/slurm)
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})

# The progress module where the system's python3 finds it under /usr
# (Debian's dist-packages); elsewhere beside the Slurm script, for
# PYTHONPATH.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(DDPRUN_INSTALL_PYDIR lib/python3/dist-packages)
else()
  set(DDPRUN_INSTALL_PYDIR ${CMAKE_INSTALL_DATADIR}/ddprun/python)
endif()
install(DIRECTORY ${CMAKE_SOURCE_DIR}/python/ddprun_progress
        DESTINATION ${DDPRUN_INSTALL_PYDIR}
        PATTERN __pycache__ EXCLUDE)
