/* ddprun-rdzv for the benchmarks: started on an ephemeral port, its port
 * learnt from its port file, and stopped again.
 *
 * Every function returns 0 or a negative code (-errno or a dr_errno_t) and
 * writes a one-line reason into errbuf; only main() turns a code into an
 * exit status.
 */
#ifndef DR_BENCH_SERVER_H
#define DR_BENCH_SERVER_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bench_proc.h"
#include "bench_stats.h"

typedef struct {
  pid_t pid;                 /* 0 when no server runs */
  uint16_t port;
  char dir[PATH_MAX];        /* private temporary directory */
  char port_file[PATH_MAX];
} bench_server_t;

/* Raises the soft RLIMIT_NOFILE to the hard limit; *limit gets the new
 * soft limit (may be NULL). */
int bench_raise_nofile(uint64_t *limit);

/* Starts `path --host 127.0.0.1 --port 0 --port-file F --rdzv-id bench
 * <extra args...> --log-level warn`, its stdout on this process's stderr,
 * and waits until the port file holds the port, or until deadline_ns.
 * extra is NULL-terminated. An exec failure (ENOENT, EACCES) is reported
 * here (bench_child_start). The server gets SIGKILL if this process dies
 * first. On failure the server is already stopped and reaped. */
int bench_server_start(bench_server_t *s, const char *path,
                       const char *const *extra, int64_t deadline_ns,
                       char *errbuf, size_t errbuf_len);

/* SIGTERM, up to grace_ms for it to exit, then SIGKILL; reaps it and
 * removes its temporary directory. Returns DR_EREMOTE when the server had
 * crashed (killed by a signal it was not sent), with the reason in errbuf.
 * Safe to call twice. */
int bench_server_stop(bench_server_t *s, int grace_ms, char *errbuf,
                      size_t errbuf_len);

/* The start of a benchmark that talks to the server itself (store_bench,
 * rdzv_scale): the signal handlers (bench_install_signals), RLIMIT_NOFILE
 * raised (a failure is only said), and the server started. Reasons go to
 * stderr as "PROG: ...". 0 or a negative code. */
int bench_server_open(bench_server_t *s, const char *prog, const char *path,
                      const char *const *extra, int64_t deadline_ns);

#endif /* DR_BENCH_SERVER_H */
