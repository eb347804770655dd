# Install-time part of cmake/install.cmake (install(SCRIPT)): the systemd
# unit of ddprun-rdzv, naming where this install puts the program and its
# settings, and the settings file. It runs with the prefix of the install
# (`cmake --install --prefix`, or cpack's), so nothing lands outside it:
# settings in /etc for /usr (the .deb), else in <prefix>/etc.
# Set by install(CODE) before it: DDPRUN_SRC, DDPRUN_BINARY_DIR, DDPRUN_BINDIR.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(_etc /etc/ddprun)
else()
  set(_etc ${CMAKE_INSTALL_PREFIX}/etc/ddprun)
endif()
# The unit as written names /usr/local/bin/ddprun-rdzv and /etc/ddprun/.
file(READ ${DDPRUN_SRC}/deploy/systemd/ddprun-rdzv.service _unit)
string(REPLACE "/usr/local/bin/ddprun-rdzv"
       "${CMAKE_INSTALL_PREFIX}/${DDPRUN_BINDIR}/ddprun-rdzv" _unit "${_unit}")
string(REPLACE "/etc/ddprun/" "${_etc}/" _unit "${_unit}")
set(_out ${DDPRUN_BINARY_DIR}/deploy/ddprun-rdzv.service)
file(WRITE ${_out} "${_unit}")
# lib/, not LIBDIR: systemd looks in /usr/lib/systemd/system and
# /usr/local/lib/systemd/system, never in a multiarch directory.
# file(INSTALL) adds DESTDIR and records the files in the manifest.
file(INSTALL DESTINATION ${CMAKE_INSTALL_PREFIX}/lib/systemd/system
     TYPE FILE PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
     FILES ${_out})
file(INSTALL DESTINATION ${_etc}
     TYPE FILE PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
     FILES ${DDPRUN_SRC}/deploy/systemd/ddprun-rdzv.env)
