/* A failure's message, its failing line first: a worker's last lines
 * often end with the line that states its failure after lines of its
 * start-up ("collectives on the waiting thread ...", the environment
 * summary); the summary table and the server's one-line root cause read
 * the first line first. */
#ifndef DR_FAILURE_LEAD_H
#define DR_FAILURE_LEAD_H

#include <stddef.h>

/* Moves the last line of msg (NUL-terminated, lines split on '\n') that
 * states a failure (an error, an exception, a failed or impossible call,
 * a full disk, a denial, a kill, an exit code) to the front, the others
 * keeping their order; with no such line, the last non-empty line. 1 when
 * it moved a line, 0 when the message was already so (or has one line). */
int dr_failure_lead(char *msg, size_t cap);

#endif /* DR_FAILURE_LEAD_H */
