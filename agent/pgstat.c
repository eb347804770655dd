/* Process groups' CPU time from /proc/PID/stat; see pgstat.h. */
#include "pgstat.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dr_pgstat_parse(const char *line, char *state, pid_t *pgrp,
                    uint64_t *ticks) {
  /* "pid (comm) S ppid pgrp session tty tpgid flags minflt cminflt majflt
   * cmajflt utime stime ...": comm may hold spaces and parentheses, so
   * the fields start after the last ')'. */
  const char *p = strrchr(line, ')');
  if (p == NULL || p[1] != ' ' || p[2] == '\0')
    return -EINVAL;
  *state = p[2];
  p += 3;
  unsigned long long f[12];
  for (int i = 0; i < 12; i++) {
    char *end;
    errno = 0;
    f[i] = strtoull(p, &end, 10);
    if (end == p || errno != 0)
      return -EINVAL;
    p = end;
  }
  /* f[0] ppid, f[1] pgrp, f[2] session, f[3] tty, f[4] tpgid, f[5] flags,
   * f[6..9] fault counts, f[10] utime, f[11] stime (proc(5)). */
  *pgrp = (pid_t)f[1];
  *ticks = f[10] + f[11];
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
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9')
      continue;
    char buf[1024], state;
    pid_t pgrp;
    uint64_t ticks;
    if (read_stat(root, e->d_name, buf, sizeof(buf)) != 0 ||
        dr_pgstat_parse(buf, &state, &pgrp, &ticks) != 0 || state == 'Z' ||
        state == 'X')
      continue;
    pid_t pid = (pid_t)atoi(e->d_name);
    for (size_t i = 0; i < n; i++) {
      if (pgids[i] <= 0 || pgids[i] != pgrp)
        continue;
      dr_pgstat_t *g = &out[i];
      g->cpu_ticks += ticks;
      g->n_members++;
      g->members_id += (uint32_t)pid * 2654435761u; /* order-free */
      g->stopped |= state == 'T' || state == 't';
      g->job_stopped |= state == 'T';
      g->disk_wait |= state == 'D';
      if (pid == pgrp)
        g->leader_state = state;
      break;
    }
  }
  closedir(d);
  return 0;
}
