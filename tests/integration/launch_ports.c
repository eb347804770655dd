/* The launch harness' ports: free ones the kernel picks, and ones a test
 * holds taken. See launch_harness.h. */
#include "launch_harness.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int bound_socket(uint16_t *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(sa);
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(sa.sin_port);
  return fd;
}

uint16_t dr_l_free_port(void) {
  uint16_t port = 0;
  int fd = bound_socket(&port);
  if (fd < 0)
    return 0;
  close(fd);
  return port;
}

uint16_t dr_l_hold_listening_port(dr_l_fixture_t *fx) {
  assert_true(fx->n_fds < DR_L_MAX_FDS);
  uint16_t port = 0;
  int fd = bound_socket(&port);
  assert_true(fd >= 0);
  assert_int_equal(listen(fd, 8), 0);
  fx->fds[fx->n_fds++] = fd;
  return port;
}
