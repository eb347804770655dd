/* A local failure: a worker that exited on its own, one that could not
 * start, a rank that --hang-timeout declared hung. Whoever finds one
 * describes it; one entry records it for the failure summary, reports it
 * to the server and stops the local workers. */
#include "agent_internal.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>

#include "events.h"
#include "exit_codes.h"
#include "failure_lead.h"
#include "log.h"

static double wall_now(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + tv.tv_usec / 1e6;
}

/* The last whole lines of text within max bytes. */
static dr_bytes_t last_lines(const char *text, uint32_t max) {
  dr_bytes_t m = dr_str(text);
  if (m.len > max) {
    m.p += m.len - max;
    m.len = max;
    const uint8_t *nl = max > 0 ? memchr(m.p, '\n', m.len - 1) : NULL;
    if (nl != NULL) {
      m.len -= (uint32_t)(nl + 1 - m.p);
      m.p = nl + 1;
    }
  }
  return m;
}

void dr__agent_report_failure(dr_agent_t *ag, const dr_failure_rec_t *f) {
  dr_buf_t b;
  dr_buf_init(&b);
  dr_failure_t x;
  x.gen = ag->asg.gen;
  x.rank = f->rank;
  x.local_rank = f->local_rank;
  x.pid = (uint32_t)f->pid;
  x.exit_code = f->exit_code;
  x.signal = f->signal;
  x.kind = f->kind;
  /* The server says how it ended ("was killed by signal SIGKILL"): an OOM
   * kill is named on the message's first line, which the budget keeps. */
  char oom[DR_FAILURE_MSG_MAX + 1];
  if (f->oom_killed) {
    char line[96];
    int k = snprintf(oom, sizeof(oom), "%s%s",
                     dr_failure_oom_line(f, line, sizeof(line)),
                     f->message[0] != '\0' ? "\n" : "");
    dr_bytes_t tail = last_lines(f->message, DR_FAILURE_MSG_MAX - (uint32_t)k);
    memcpy(oom + k, tail.p, tail.len);
    oom[k + tail.len] = '\0';
    x.message = dr_str(oom);
  } else {
    x.message = last_lines(f->message, DR_FAILURE_MSG_MAX);
  }
  dr_enc_failure(&b, 0, &x);
  dr__agent_send(ag, &b);
  char esc[2100];
  dr_events_emit(ag->events, "failure",
                 ",\"gen\":%llu,\"rank\":%u,\"local_rank\":%u,\"pid\":%d,"
                 "\"exit_code\":%d,\"signal\":%d,\"kind\":\"%s\","
                 "\"oom_killed\":%s,\"message\":\"%s\"",
                 (unsigned long long)ag->asg.gen, f->rank, f->local_rank,
                 (int)f->pid, f->exit_code, f->signal,
                 dr_fail_kind_name(f->kind), f->oom_killed ? "true" : "false",
                 dr_json_escape(f->message, esc, sizeof(esc)));
}

/* The wait after an echo is over: the workers stop, as after any failure
 * (unless a failure of its own came meanwhile and stopped them). */
static void on_echo_wait(uv_timer_t *t) {
  dr_agent_t *ag = t->data;
  /* Only the generation of the echo: an order may have restarted the
   * workers meanwhile, and those run on. */
  if (ag->state == DR_AG_RUNNING && ag->asg.gen == ag->echo_gen)
    dr__agent_stop_local(ag, SIGTERM, DR_NEXT_WAIT);
}

/* After a failure that may echo another (a peer went away), the other
 * workers run this long before they are stopped: a rank whose own failure
 * caused it (an exception that closed its sockets before its process
 * ended) then fails on its own, and is reported as what it is. */
#define ECHO_WAIT_MS 500

void dr__agent_local_failure(dr_agent_t *ag, const dr_failure_rec_t *d) {
  /* The list holds a generation's failures; one beyond it still stops
   * the group. */
  if (ag->n_fails < sizeof(ag->fails) / sizeof(ag->fails[0])) {
    dr_failure_rec_t *f = &ag->fails[ag->n_fails++];
    *f = *d;
    f->time = wall_now();
    f->node_rank = ag->asg.node_rank;
    f->rank = ag->asg.first_rank + d->local_rank;
    dr__agent_report_failure(ag, f);
  }
  if (d->kind == DR_FAIL_EXIT && ag->state == DR_AG_RUNNING &&
      ag->n_alive > 0 && !uv_is_active((uv_handle_t *)&ag->echo_timer) &&
      dr_failure_is_echo(d->exit_code, d->signal, d->message,
                         strlen(d->message))) {
    ag->echo_gen = ag->asg.gen;
    uv_timer_start(&ag->echo_timer, on_echo_wait, ECHO_WAIT_MS, 0);
    return;
  }
  uv_timer_stop(&ag->echo_timer);
  dr__agent_stop_local(ag, SIGTERM, DR_NEXT_WAIT);
}

/* NCCL's watchdog dumps its flight recorder (a pickle) as it times out a
 * collective: a dump of w's rank written since w started is named, with
 * the command that reads every rank's. */
static void say_nccl_dump(dr_agent_t *ag, const dr_worker_t *w) {
  char prefix[1100], path[1200];
  dr_env_nccl_dump_prefix(ag->o, w->error_file, prefix, sizeof(prefix));
  snprintf(path, sizeof(path), "%s%u", prefix, w->rank);
  struct stat st;
  double started = wall_now() - (double)(uv_hrtime() - w->start_ns) / 1e9;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
      (double)st.st_mtime + 1 < started)
    return;
  const char *slash = strrchr(prefix, '/');
  DR_SAY(DR_LOG_ERROR, "rank %u: NCCL's flight recorder, dumped as it timed "
         "out a collective: %s (every rank's: torchfrtrace %.*s -p %s)",
         w->rank, path, slash != NULL ? (int)(slash - prefix) : 1,
         slash != NULL ? prefix : ".", slash != NULL ? slash + 1 : prefix);
}

void dr__agent_worker_failed(dr_agent_t *ag, dr_worker_t *w) {
  dr_failure_rec_t d;
  memset(&d, 0, sizeof(d));
  d.local_rank = w->local_rank;
  d.pid = w->pid;
  d.exit_code = w->exit_code;
  d.signal = w->signal;
  d.core_dumped = w->core_dumped;
  d.kind = w->signal != 0 ? DR_FAIL_SIGNAL : DR_FAIL_EXIT;
  /* Only signals the agent did not send come here: a SIGKILL (or a
   * shell's 137) while the OOM killer ran is its, named with the rank's
   * memory as last seen. */
  d.rss_bytes = d.rss_peak_bytes = DR_NONE;
  if (w->hl_pid == w->pid) {
    d.rss_bytes = w->hl_use.rss_bytes;
    d.rss_peak_bytes = w->hl_use.rss_peak_bytes;
  }
  d.oom_killed = dr__agent_rank_oom_killed(ag, w);
  /* Everything it wrote, first: its stderr's tail is the message, and its
   * last lines come before the line that says it failed. */
  dr__workers_drain(w);
  if (w->error_file[0] == '\0' ||
      dr_error_file_read(w->error_file, d.message, sizeof(d.message)) != 0)
    if (w->fwd[1] != NULL)
      dr_logfwd_tail(w->fwd[1], d.message, sizeof(d.message));
  dr_failure_lead(d.message, sizeof(d.message)); /* the failing line first */
  if (ag->state == DR_AG_RUNNING) {
    char what[96];
    DR_SAY(DR_LOG_ERROR, "rank %u (local rank %u, pid %d) %s; stopping "
            "the workers of this node", w->rank, w->local_rank,
            (int)w->pid, dr_failure_what(&d, what, sizeof(what)));
  }
  say_nccl_dump(ag, w);
  dr__agent_local_failure(ag, &d);
}

void dr__agent_hang_verdict(dr_agent_t *ag, const dr_hang_verdict_t *v) {
  dr_failure_rec_t d;
  memset(&d, 0, sizeof(d));
  d.local_rank = v->local_rank;
  d.pid = ag->w[v->local_rank].pid;
  d.exit_code = DR_EXIT_TIMEOUT; /* as a worker's own timeout would be */
  d.kind = v->kind;
  snprintf(d.message, sizeof(d.message), "%s", v->message);
  dr__agent_local_failure(ag, &d);
}
