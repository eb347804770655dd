/* Process groups' CPU time and memory from /proc/PID/stat, and the OOM
 * killer's count; see pgstat.h. */
#include "pgstat.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dr_pgstat_parse_proc(const char *line, dr_pgstat_proc_t *out) {
  /* "pid (comm) S ppid pgrp session tty tpgid flags minflt cminflt majflt
   * cmajflt utime stime cutime cstime priority nice num_threads
   * itrealvalue starttime vsize rss ...": comm may hold spaces and
   * parentheses, so the fields start after the last ')'. */
  const char *p = strrchr(line, ')');
  if (p == NULL || p[1] != ' ' || p[2] == '\0')
    return -EINVAL;
  out->state = p[2];
  p += 3;
  /* f[0] ppid, f[1] pgrp, ..., f[10] utime, f[11] stime, f[12..19]
   * cutime to vsize, f[20] rss (proc(5)); priority and nice may be
   * negative, which strtoull takes (their values are not used). */
  unsigned long long f[21];
  int k = 0;
  for (; k < 21; k++) {
    char *end;
    errno = 0;
    f[k] = strtoull(p, &end, 10);
    if (end == p || errno != 0)
      break;
    p = end;
  }
  if (k < 12)
    return -EINVAL;
  out->pgrp = (pid_t)f[1];
  out->ticks = f[10] + f[11];
  out->rss_pages = k == 21 ? f[20] : 0;
  return 0;
}

int dr_pgstat_parse(const char *line, char *state, pid_t *pgrp,
                    uint64_t *ticks) {
  dr_pgstat_proc_t x;
  int rc = dr_pgstat_parse_proc(line, &x);
  if (rc != 0)
    return rc;
  *state = x.state;
  *pgrp = x.pgrp;
  *ticks = x.ticks;
  return 0;
}

static int read_stat(const char *root, const char *pid, char *buf, size_t n) {
  char path[300];
  snprintf(path, sizeof(path), "%s/%s/stat", root, pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  ssize_t k = read(fd, buf, n - 1);
  close(fd);
  if (k <= 0)
    return -EIO;
  buf[k] = '\0';
  return 0;
}

pid_t dr_pgstat_pgrp(const char *root, pid_t pid) {
  char name[24], buf[1024], state;
  pid_t pgrp;
  uint64_t ticks;
  snprintf(name, sizeof(name), "%d", (int)pid);
  if (read_stat(root != NULL ? root : "/proc", name, buf, sizeof(buf)) != 0 ||
      dr_pgstat_parse(buf, &state, &pgrp, &ticks) != 0)
    return -1;
  return pgrp;
}

int dr_pgstat_scan(const char *root, const pid_t *pgids, size_t n,
                   dr_pgstat_t *out) {
  if (root == NULL)
    root = "/proc";
  memset(out, 0, n * sizeof(*out));
  DIR *d = opendir(root);
  if (d == NULL)
    return -errno;
  long page = sysconf(_SC_PAGESIZE);
  uint64_t page_bytes = page > 0 ? (uint64_t)page : 4096;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9')
      continue;
    char buf[1024];
    dr_pgstat_proc_t x;
    if (read_stat(root, e->d_name, buf, sizeof(buf)) != 0 ||
        dr_pgstat_parse_proc(buf, &x) != 0 || x.state == 'Z' ||
        x.state == 'X')
      continue;
    pid_t pid = (pid_t)atoi(e->d_name);
    for (size_t i = 0; i < n; i++) {
      if (pgids[i] <= 0 || pgids[i] != x.pgrp)
        continue;
      dr_pgstat_t *g = &out[i];
      g->cpu_ticks += x.ticks;
      g->rss_bytes += x.rss_pages * page_bytes;
      g->n_members++;
      g->members_id += (uint32_t)pid * 2654435761u; /* order-free */
      g->stopped |= x.state == 'T' || x.state == 't';
      g->job_stopped |= x.state == 'T';
      g->disk_wait |= x.state == 'D';
      if (pid == x.pgrp)
        g->leader_state = x.state;
      break;
    }
  }
  closedir(d);
  return 0;
}

/* ---- a group's use over time ------------------------------------------- */

void dr_pgstat_use_init(dr_pgstat_use_t *u) {
  memset(u, 0, sizeof(*u));
  u->rss_bytes = u->rss_peak_bytes = DR_PGSTAT_UNKNOWN;
  u->cpu_milli = UINT32_MAX;
}

void dr_pgstat_use_sample(dr_pgstat_use_t *u, const dr_pgstat_t *g,
                          uint64_t now_ms, long clk_tck) {
  u->live = g->n_members > 0;
  if (!u->live) {
    u->win_open = 0; /* its CPU use is over; the figures stay the last */
    return;
  }
  u->rss_bytes = g->rss_bytes;
  if (u->rss_peak_bytes == DR_PGSTAT_UNKNOWN ||
      g->rss_bytes > u->rss_peak_bytes)
    u->rss_peak_bytes = g->rss_bytes;
  if (!u->win_open) {
    u->win_open = 1;
    u->win_ms = now_ms;
    u->win_ticks = g->cpu_ticks;
    return;
  }
  uint64_t span = now_ms > u->win_ms ? now_ms - u->win_ms : 0;
  if (span < DR_PGSTAT_CPU_WINDOW_MS || clk_tck <= 0)
    return;
  uint64_t d = g->cpu_ticks > u->win_ticks ? g->cpu_ticks - u->win_ticks : 0;
  /* ticks / clk_tck CPU seconds over span / 1000 s, in thousandths. */
  double milli = (double)d * 1e6 / (double)clk_tck / (double)span;
  u->cpu_milli = milli >= (double)UINT32_MAX - 1 ? UINT32_MAX - 1
                                                 : (uint32_t)(milli + 0.5);
  u->win_ms = now_ms;
  u->win_ticks = g->cpu_ticks;
}

/* ---- the kernel's OOM killer --------------------------------------------- */

/* The value of the line "key N" of path: 0, -ENOENT without one, or
 * -errno. */
static int keyed_counter(const char *path, const char *key, uint64_t *out) {
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return -errno;
  size_t klen = strlen(key);
  char line[256];
  int rc = -ENOENT;
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strncmp(line, key, klen) != 0 || line[klen] != ' ')
      continue;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(line + klen + 1, &end, 10);
    if (end != line + klen + 1 && errno == 0) {
      *out = v;
      rc = 0;
    }
    break;
  }
  fclose(f);
  return rc;
}

int dr_pgstat_oom_kills(const char *root, uint64_t *out) {
  char path[300];
  snprintf(path, sizeof(path), "%s/vmstat", root != NULL ? root : "/proc");
  return keyed_counter(path, "oom_kill", out);
}

int dr_pgstat_cgroup_oom_kills(const char *events_path, uint64_t *out) {
  return keyed_counter(events_path, "oom_kill", out);
}
