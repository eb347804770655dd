/* The benchmarks that time a ddprun job run after run; see bench_job.h. */
#include "bench_job.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#include "errors.h"

#define DEFAULT_TIMEOUT_S 30
#define MAX_TIMEOUT_S 86400

/* ---- scratch files ------------------------------------------------------- */

int bench_scratch_open(bench_scratch_t *s, const char *prog, char *err,
                       size_t err_len) {
  memset(s, 0, sizeof(*s));
  s->out_fd[0] = s->out_fd[1] = -1;
  const char *tmp = getenv("TMPDIR");
  if (tmp == NULL || tmp[0] == '\0')
    tmp = "/tmp";
  if ((size_t)snprintf(s->dir, sizeof(s->dir), "%s/%s.XXXXXX", tmp, prog) >=
      sizeof(s->dir)) {
    snprintf(err, err_len, "TMPDIR %.64s... is too long", tmp);
    s->dir[0] = '\0';
    return -ENAMETOOLONG;
  }
  if (mkdtemp(s->dir) == NULL) {
    int e = errno;
    snprintf(err, err_len, "mkdtemp() in %s failed (%d: %s)", tmp, e,
             strerror(e));
    s->dir[0] = '\0';
    return -e;
  }
  snprintf(s->stamps, sizeof(s->stamps), "%s/stamps", s->dir);
  for (int i = 0; i < 2; i++) {
    snprintf(s->out_path[i], sizeof(s->out_path[i]), "%s/out.%d", s->dir, i);
    s->out_fd[i] = open(s->out_path[i],
                        O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC,
                        0600);
    if (s->out_fd[i] < 0) {
      int e = errno;
      snprintf(err, err_len, "open() of %s failed (%d: %s)", s->out_path[i],
               e, strerror(e));
      return -e;
    }
  }
  return 0;
}

void bench_scratch_close(bench_scratch_t *s) {
  for (int i = 0; i < 2; i++) {
    if (s->out_fd[i] >= 0)
      close(s->out_fd[i]);
    s->out_fd[i] = -1;
    if (s->out_path[i][0] != '\0')
      unlink(s->out_path[i]);
  }
  if (s->stamps[0] != '\0')
    unlink(s->stamps);
  if (s->dir[0] != '\0')
    rmdir(s->dir);
  s->dir[0] = '\0';
}

int bench_scratch_reset(bench_scratch_t *s, int *in) {
  for (int i = 0; i < 2; i++)
    if (ftruncate(s->out_fd[i], 0) != 0)
      return -errno;
  if (in == NULL)
    return unlink(s->stamps) != 0 && errno != ENOENT ? -errno : 0;
  int fd = open(s->stamps, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return -errno;
  close(fd);
  *in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (*in < 0)
    return -errno;
  if (inotify_add_watch(*in, s->stamps, IN_MODIFY) < 0) {
    int e = -errno;
    close(*in);
    *in = -1;
    return e;
  }
  return 0;
}


/* ---- stamps -------------------------------------------------------------- */

int bench_stamps_read(const char *path, long count, uint32_t n,
                      bench_stamp_t *out, char *err, size_t err_len) {
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return errno == ENOENT ? 0 : -errno;
  unsigned char *seen = calloc(n, 1);
  if (seen == NULL) {
    fclose(f);
    return -ENOMEM;
  }
  int have = 0, rc = 0;
  char line[160];
  bench_stamp_t st;
  long long ns;
  while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
    if (sscanf(line, "%ld %ld %lld %ld", &st.count, &st.rank, &ns,
               &st.pid) != 4) {
      snprintf(err, err_len, "bad stamp line: %.64s", line);
      rc = DR_EBADARG;
    } else if (st.count != count) {
      continue;
    } else if (st.rank < 0 || (uint64_t)st.rank >= n || seen[st.rank]++) {
      snprintf(err, err_len, "attempt %ld: RANK %ld out of range or "
               "started twice", count, st.rank);
      rc = DR_EBADARG;
    } else {
      st.ns = ns;
      out[have++] = st;
    }
  }
  free(seen);
  fclose(f);
  return rc != 0 ? rc : have;
}

int bench_stamps_wait(int in, const char *path, long count, uint32_t n,
                      bench_stamp_t *out, int64_t deadline_ns, char *err,
                      size_t err_len) {
  for (;;) {
    int have = bench_stamps_read(path, count, n, out, err, err_len);
    if (have < 0)
      return have;
    if ((uint32_t)have == n)
      return 0;
    int64_t left = deadline_ns - bench_now_ns();
    if (left <= 0 || bench_stop_requested) {
      snprintf(err, err_len, "%d of %u workers of attempt %ld started in "
               "time", have, n, count);
      return -ETIMEDOUT;
    }
    struct pollfd p = {in, POLLIN, 0};
    if (poll(&p, 1, (int)(left / 1000000) + 1) > 0) {
      char buf[4096];
      (void)!read(in, buf, sizeof(buf));
    }
  }
}

/* ---- the job ------------------------------------------------------------- */

/* Appends the NULL-terminated list more to v[*n..cap-1), keeping room for
 * the terminating NULL. */
static void append_args(const char **v, size_t *n, size_t cap,
                        const char *const *more) {
  for (size_t i = 0; more != NULL && more[i] != NULL && *n + 1 < cap; i++)
    v[(*n)++] = more[i];
  v[*n] = NULL;
}

int bench_job_start(bench_job_t *j, const bench_repeat_t *b,
                    const bench_job_spec_t *sp, bench_scratch_t *s,
                    int64_t deadline_ns, int64_t *t0, char *err,
                    size_t err_len) {
  memset(j, 0, sizeof(*j));
  j->stamps_in = -1;
  for (int k = 0; k < 2; k++)
    j->node[k] = (bench_child_t){.pidfd = -1, .exec_fd = -1,
                                 .out_fd = s->out_fd[k], .name = sp->names[k]};
  int rc = bench_scratch_reset(s, sp->watch_stamps ? &j->stamps_in : NULL);
  if (rc != 0) {
    snprintf(err, err_len, "preparing %s failed (%s)", s->dir,
             dr_strerror(rc));
    return rc;
  }
  const char *sargs[24] = {"--nnodes", "2"};
  size_t n = 2;
  append_args(sargs, &n, 24, sp->server_args);
  rc = bench_server_start(&j->srv, b->server, sargs, deadline_ns, err,
                          err_len);
  if (rc != 0)
    return rc;

  char nproc[16], endpoint[32], conf[64], tmo[32];
  snprintf(nproc, sizeof(nproc), "%u", b->nproc);
  snprintf(endpoint, sizeof(endpoint), "127.0.0.1:%u", (unsigned)j->srv.port);
  snprintf(conf, sizeof(conf), "is_host=0,join_timeout=%.0f",
           b->timeout_s + 1);
  snprintf(tmo, sizeof(tmo), "%.0f", b->timeout_s + 1);
  setenv("DDPRUN_BENCH_TIMEOUT", tmo, 1);
  const char *argv[48] = {b->ddprun,         "--nnodes",    "2",
                          "--nproc-per-node", nproc,         "--rdzv-endpoint",
                          endpoint,          "--rdzv-id",   "bench",
                          "--rdzv-conf",     conf};
  n = 11;
  append_args(argv, &n, 44, sp->ddprun_args);
  argv[n++] = b->worker;
  if (b->worker_program == NULL)
    argv[n++] = "--worker";
  argv[n++] = s->stamps;
  argv[n] = NULL;

  if (t0 != NULL)
    *t0 = bench_now_ns();
  while (rc == 0 && j->started < 2)
    if ((rc = bench_child_fork(&j->node[j->started], (char *const *)argv, err,
                               err_len)) == 0)
      j->started++;
  for (size_t i = 0; rc == 0 && i < j->started; i++)
    rc = bench_child_confirm(&j->node[i], err, err_len);
  return rc;
}

int bench_job_end(bench_job_t *j, const bench_repeat_t *b,
                  bench_scratch_t *s, int rc, char *err, size_t err_len) {
  bench_children_stop(j->node, j->started, BENCH_STOP_GRACE_MS);
  char serr[256];
  int src = bench_server_stop(&j->srv, BENCH_STOP_GRACE_MS, serr,
                              sizeof(serr));
  if (rc == 0 && src != 0) {
    snprintf(err, err_len, "%s", serr);
    rc = src;
  }
  if (j->stamps_in >= 0)
    close(j->stamps_in);
  j->stamps_in = -1;
  for (int k = 0; rc != 0 && k < 2; k++)
    bench_show_output(b->prog, j->node[k].name, s->out_fd[k]);
  return rc;
}

/* ---- the runs ------------------------------------------------------------ */

/* The command line; bench_cli_parse's results. */
static int parse_args(bench_repeat_t *b, int argc, char **argv) {
  if (b->timeout_s == 0)
    b->timeout_s = DEFAULT_TIMEOUT_S;
  bench_opt_t opts[8] = {
      {"nproc", BENCH_OPT_U32, &b->nproc, .max = b->max_nproc},
      {"runs", BENCH_OPT_U32, &b->runs, .max = b->max_runs},
      {"timeout", BENCH_OPT_SECONDS, &b->timeout_s, .max = MAX_TIMEOUT_S,
       .min = b->min_timeout_s},
      {"ddprun", BENCH_OPT_PATH, b->ddprun, .program = "ddprun"},
      {"server", BENCH_OPT_PATH, b->server, .program = "ddprun-rdzv"}};
  size_t n = 5;
  if (b->worker_program != NULL)
    opts[n++] = (bench_opt_t){b->worker_program, BENCH_OPT_PATH, b->worker,
                              .program = b->worker_program};
  if (b->modes != NULL)
    opts[n++] = (bench_opt_t){"mode", BENCH_OPT_CHOICE, &b->mode,
                              .choices = b->modes};
  int rc = bench_cli_parse(b->prog, argc, argv, opts, n);
  if (rc == 0 && b->modes != NULL && b->mode < 0)
    rc = BENCH_CLI_USAGE;
  if (rc == 0 && b->worker_program == NULL &&
      bench_default_path(b->worker, NULL) != 0) {
    fprintf(stderr, "%s: cannot locate itself (/proc/self/exe)\n", b->prog);
    rc = BENCH_CLI_LOCATE;
  }
  if (rc == 0 && b->configure != NULL)
    rc = b->configure(b);
  return rc;
}

int bench_repeat_main(bench_repeat_t *b, int argc, char **argv) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts); /* a worker's start: first thing */
  if (b->worker_program == NULL && argc == 3 &&
      strcmp(argv[1], "--worker") == 0)
    return bench_stamp_worker(b->prog, argv[2], &ts);

  int rc = parse_args(b, argc, argv);
  if (rc != 0)
    return bench_cli_exit_status(rc, b->usage);
  bench_install_signals();

  double *fig[2] = {calloc(b->runs, sizeof(double)),
                    calloc(b->runs, sizeof(double))};
  int have_figs = fig[0] != NULL && fig[1] != NULL;
  bench_scratch_t s;
  char err[PATH_MAX + 256];
  rc = have_figs ? bench_scratch_open(&s, b->prog, err, sizeof(err))
                 : -ENOMEM;
  if (rc != 0)
    fprintf(stderr, "%s: %s\n", b->prog, have_figs ? err : "out of memory");
  uint32_t done = 0;
  while (rc == 0 && done < b->runs && !bench_stop_requested) {
    double f[2] = {0, 0};
    rc = b->run(b, &s, done, f, err, sizeof(err));
    if (rc != 0) {
      fprintf(stderr, "%s: run %u of %u failed: %s\n", b->prog, done + 1,
              b->runs, err);
      break;
    }
    fig[0][done] = f[0];
    fig[1][done] = f[1];
    done++;
  }
  if (have_figs)
    bench_scratch_close(&s);
  if (rc == 0 && done < b->runs) {
    fprintf(stderr, "%s: interrupted after %u runs\n", b->prog, done);
    rc = -EINTR;
  }
  if (rc == 0) {
    bench_summary_t sum[2] = {bench_summarize(fig[0], done),
                              bench_summarize(fig[1], done)};
    b->report(b, sum);
  }
  free(fig[0]);
  free(fig[1]);
  return rc == 0 ? 0 : 1;
}
