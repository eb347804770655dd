/* Helpers shared by the benchmarks: start ddprun-rdzv on an ephemeral port,
 * learn the port from its port file, and stop it again.
 *
 * Every function returns 0 or a negative code (-errno or a dr_errno_t) and
 * writes a one-line reason into errbuf; only main() turns a code into an
 * exit status. Times are CLOCK_MONOTONIC nanoseconds, which every process
 * on the machine shares.
 */
#ifndef DR_BENCH_SERVER_H
#define DR_BENCH_SERVER_H

#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
  pid_t pid;                 /* 0 when no server runs */
  uint16_t port;
  char dir[PATH_MAX];        /* private temporary directory */
  char port_file[PATH_MAX];
} bench_server_t;

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t bench_now_ns(void);

/* Raises the soft RLIMIT_NOFILE to the hard limit; *limit gets the new
 * soft limit (may be NULL). */
int bench_raise_nofile(uint64_t *limit);

/* Writes the default server path: ddprun-rdzv next to this executable. */
int bench_default_server_path(char *out, size_t out_len);

/* Starts `path --host 127.0.0.1 --port 0 --port-file F --rdzv-id bench
 * <extra args...> --log-level warn` and waits until the port file holds
 * the port, or until deadline_ns. extra is NULL-terminated. An exec failure
 * (ENOENT, EACCES) is reported here, through a close-on-exec pipe. The
 * server gets SIGKILL if this process dies first. On failure the server is
 * already stopped and reaped. */
int bench_server_start(bench_server_t *s, const char *path,
                       const char *const *extra, int64_t deadline_ns,
                       char *errbuf, size_t errbuf_len);

/* SIGTERM, up to grace_ms for it to exit, then SIGKILL; reaps it and
 * removes its temporary directory. Returns DR_EREMOTE when the server had
 * crashed (killed by a signal it was not sent), with the reason in errbuf.
 * Safe to call twice. */
int bench_server_stop(bench_server_t *s, int grace_ms, char *errbuf,
                      size_t errbuf_len);

/* Describes a wait() status: "exited with code 3", "killed by signal
 * SIGSEGV (core dumped)". */
void bench_describe_status(int status, char *out, size_t out_len);

/* Installs SIGINT/SIGTERM handlers that only set bench_stop_requested,
 * without SA_RESTART so blocking calls return EINTR. SIGPIPE is ignored. */
void bench_install_signals(void);
extern volatile sig_atomic_t bench_stop_requested;

#endif /* DR_BENCH_SERVER_H */
