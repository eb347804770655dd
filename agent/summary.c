/* The failure summary ddprun prints when a job fails: the root cause
 * first, then the other failures, each with where, who and why. */
#include "agent_internal.h"

#include "log.h"

#include "exit_codes.h"
#include "size_text.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


const char *dr_failure_oom_line(const dr_failure_rec_t *f, char *out,
                                size_t n) {
  char rss[24], peak[24];
  if (f->rss_bytes != DR_NONE && f->rss_peak_bytes != DR_NONE)
    snprintf(out, n, "the OOM killer killed it (its last RSS %s, peak %s)",
             dr_size_text(f->rss_bytes, rss, sizeof(rss)),
             dr_size_text(f->rss_peak_bytes, peak, sizeof(peak)));
  else
    snprintf(out, n, "the OOM killer killed it");
  return out;
}

const char *dr_failure_what(const dr_failure_rec_t *f, char *out, size_t n) {
  if (f->oom_killed) {
    /* Killed itself, or a shell passed its child's SIGKILL on. */
    const char *how = f->signal != 0 ? "killed by the OOM killer (SIGKILL"
                                     : "exited with code 137 (the OOM killer";
    char rss[24], peak[24];
    if (f->rss_bytes != DR_NONE && f->rss_peak_bytes != DR_NONE)
      snprintf(out, n, "%s; its last RSS %s, peak %s)", how,
               dr_size_text(f->rss_bytes, rss, sizeof(rss)),
               dr_size_text(f->rss_peak_bytes, peak, sizeof(peak)));
    else
      snprintf(out, n, "%s)", how);
  } else if (f->signal != 0) {
    const char *name = sigabbrev_np(f->signal);
    snprintf(out, n, "killed by signal SIG%s%s", name != NULL ? name : "?",
             f->core_dumped ? " (core dumped)" : "");
  } else {
    snprintf(out, n, "exited with code %d", f->exit_code);
  }
  return out;
}

/* Copies the JSON string starting after its opening quote at s into out,
 * undoing the common escapes. */
static void json_string(const char *s, char *out, size_t n) {
  size_t o = 0;
  for (; *s != '\0' && *s != '"' && o + 1 < n; s++) {
    if (*s == '\\' && s[1] != '\0') {
      s++;
      char c = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s;
      out[o++] = c;
    } else {
      out[o++] = *s;
    }
  }
  out[o] = '\0';
}

int dr_error_file_read(const char *path, char *out, size_t n) {
  char buf[16384];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  ssize_t len;
  do
    len = read(fd, buf, sizeof(buf) - 1);
  while (len < 0 && errno == EINTR);
  int e = errno;
  close(fd);
  if (len < 0)
    return -e;
  buf[len] = '\0';
  /* torchelastic writes {"message": {"message": "...", "extraInfo": ...}};
   * the innermost "message" string is what a person wants. */
  const char *best = NULL;
  for (const char *p = strstr(buf, "\"message\""); p != NULL;
       p = strstr(p + 1, "\"message\"")) {
    const char *q = p + 9;
    while (*q == ' ' || *q == ':' || *q == '\n' || *q == '\t')
      q++;
    if (*q == '"') {
      best = q + 1;
      break;
    }
  }
  if (best != NULL)
    json_string(best, out, n);
  else
    snprintf(out, n, "%s", buf);
  size_t l = strlen(out);
  while (l > 0 && (out[l - 1] == '\n' || out[l - 1] == ' '))
    out[--l] = '\0';
  return l > 0 ? 0 : -ENODATA;
}

static void print_indented(const char *text) {
  const char *p = text;
  while (*p != '\0') {
    const char *nl = strchr(p, '\n');
    int len = nl != NULL ? (int)(nl - p) : (int)strlen(p);
    DR_SAY(DR_LOG_ERROR, "    | %.*s", len, p);
    p += len;
    if (*p == '\n')
      p++;
  }
}

static void print_rec(const char *host, const dr_failure_rec_t *f) {
  char when[64], what[96];
  time_t t = (time_t)f->time;
  struct tm tm;
  localtime_r(&t, &tm);
  strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
  DR_SAY(DR_LOG_ERROR, "  time %s.%03d  host %s  node %u  rank %u  local rank %u  "
          "pid %d  %s",
          when, (int)((f->time - (double)t) * 1000), host, f->node_rank,
          f->rank, f->local_rank, (int)f->pid,
          dr_failure_what(f, what, sizeof(what)));
  if (f->message[0] != '\0')
    print_indented(f->message);
}

void dr_summary_print(int exit_code, const char *host, const char *server_reason,
                      const dr_failure_rec_t *recs, size_t n_recs) {
  const dr_exit_info_t *e = dr_exit_info(exit_code);
  if (exit_code == DR_EXIT_PREEMPTED)
    DR_SAY(DR_LOG_ERROR, "job preempted (exit code %d): the workers "
            "stopped on SIGUSR1; run it again to resume", exit_code);
  else if (e != NULL)
    DR_SAY(DR_LOG_ERROR, "job failed with exit code %d (%s)", exit_code,
            e->brief);
  else
    DR_SAY(DR_LOG_ERROR, "job failed with exit code %d", exit_code);
  int have_reason = server_reason != NULL && server_reason[0] != '\0';
  /* The server names the job's root cause: this node's failure that it
   * names (not always the first one here: a failure that echoes another
   * may come first), or, when it names none of them, its account. Without
   * the server's word, this node's first failure. */
  size_t root = n_recs;
  for (size_t i = 0; i < n_recs && root == n_recs; i++) {
    char who[96];
    snprintf(who, sizeof(who), "pid %d) on node %u", (int)recs[i].pid,
             recs[i].node_rank);
    if (!have_reason || strstr(server_reason, who) != NULL)
      root = i;
  }
  if (root < n_recs) {
    DR_SAY(DR_LOG_ERROR, "root cause (first failure):");
    print_rec(host, &recs[root]);
  } else if (have_reason) {
    DR_SAY(DR_LOG_ERROR, "root cause (first failure, reported by the "
                    "rendezvous server): %s", server_reason);
  }
  if (n_recs > (root < n_recs ? 1u : 0u)) {
    DR_SAY(DR_LOG_ERROR, "other failures on this node:");
    for (size_t i = 0; i < n_recs; i++)
      if (i != root)
        print_rec(host, &recs[i]);
  }
}
