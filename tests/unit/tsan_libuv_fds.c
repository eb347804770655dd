/* Run under the TSan build with tests/lib/tsan.options: a descriptor
 * number that libuv made and closed (a syscall TSan does not see), taken
 * next by a thread's openat() and written, must not be reported as a race.
 * The thread is ordered after the close by a raw read() of a pipe, which
 * TSan does not see either, as nothing orders the agent's loop and its
 * checkpoint threads for TSan. Exit 0: the number was reused and nothing
 * was reported (a report exits 66 under halt_on_error). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <uv.h>

static int wake[2];
static int thread_fd = -1;
static char path[] = "/tmp/tsan_libuv_fds.XXXXXX";

static void *reuse_number(void *arg) {
  (void)arg;
  char b;
  if (syscall(SYS_read, wake[0], &b, 1) != 1)
    return NULL;
  thread_fd = openat(AT_FDCWD, path, O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (thread_fd >= 0 && write(thread_fd, "x", 1) != 1)
    perror("write");
  return NULL;
}

int main(void) {
  int tmp = mkstemp(path);
  if (tmp < 0 || close(tmp) != 0 || pipe2(wake, O_CLOEXEC) != 0) {
    perror("tsan_libuv_fds: set-up");
    return 1;
  }
  pthread_t t;
  if (pthread_create(&t, NULL, reuse_number, NULL) != 0)
    return 1;

  uv_loop_t loop;
  uv_tcp_t tcp;
  uv_os_fd_t made = -1;
  int rc = uv_loop_init(&loop);
  if (rc == 0)
    rc = uv_tcp_init_ex(&loop, &tcp, AF_INET); /* libuv calls socket() */
  if (rc == 0)
    rc = uv_fileno((uv_handle_t *)&tcp, &made);
  if (rc != 0) {
    fprintf(stderr, "tsan_libuv_fds: libuv: %s\n", uv_strerror(rc));
    return 1;
  }
  uv_close((uv_handle_t *)&tcp, NULL); /* libuv's raw close */
  uv_run(&loop, UV_RUN_DEFAULT); /* the loop's own descriptors stay open */

  if (syscall(SYS_write, wake[1], "g", 1) != 1)
    return 1;
  pthread_join(t, NULL);
  uv_loop_close(&loop);
  unlink(path);
  if (thread_fd != made) {
    fprintf(stderr,
            "tsan_libuv_fds: the thread got descriptor %d, not libuv's %d: "
            "nothing was shown\n",
            thread_fd, made);
    return 1;
  }
  close(thread_fd);
  printf("descriptor %d: made and closed by libuv, opened and written by a "
         "thread, no report\n",
         made);
  return 0;
}
