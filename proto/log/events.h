/* The job's event log: one JSON object per line appended to
 * <log-dir>/<run-id>/events.jsonl by every agent and the server, so a
 * job's history (join, round complete, spawn, exit, failure, restart,
 * node lost, node joined, stop) can be read after the fact.
 *
 *   {"time":1764410000.123,"source":"agent","host":"n1","pid":42,
 *    "event":"exit","rank":3,"exit_code":1}
 *
 * Each line is one write() on an O_APPEND file, so lines from several
 * processes never interleave. A NULL log (no --log-dir) ignores events. */
#ifndef DR_EVENTS_H
#define DR_EVENTS_H

#include <stddef.h>

typedef struct dr_events dr_events_t;

/* Creates log_dir/run_id/ as needed and opens events.jsonl. 0 or -errno. */
int dr_events_open(const char *log_dir, const char *run_id, const char *source,
                   const char *host, dr_events_t **out);

/* Appends an event; fields is printf-style JSON members without braces
 * (",\"rank\":%u"), or NULL. Strings inside must go through
 * dr_json_escape. */
void dr_events_emit(dr_events_t *e, const char *event, const char *fields, ...)
    __attribute__((format(printf, 3, 4)));

/* Escapes s for a JSON string (quotes, backslashes, control bytes);
 * returns out. */
char *dr_json_escape(const char *s, char *out, size_t n);

void dr_events_close(dr_events_t **e);

#endif /* DR_EVENTS_H */
