/* Where a process is: its stacks, taken by whichever tool this host has,
 * reduced to one short place ("time.sleep <- load_batch at train.py:17"),
 * classified (in a collective, waiting, sleeping, ...) and grouped over
 * any set of ranks ("ranks 0-2, 4-7: X; rank 3: Y").
 *
 * Tools, in order (DDPRUN_STACK_TOOLS="py-spy,eu-stack,gdb,kernel" or a
 * subset overrides it):
 *   Python programs:  py-spy dump, then eu-stack, then the kernel's view;
 *   other programs:   eu-stack, then gdb in batch mode, then the kernel's.
 * gdb is left out for Python programs: it loads the symbols of every
 * library (seconds for PyTorch) and shows interpreter frames. The kernel's
 * view is /proc/PID/stack of the main thread (root only) or else its
 * /proc/PID/wchan, with the wait channel of every thread. py-spy, eu-stack
 * and gdb are found on PATH and attach with ptrace (as root nothing else is
 * needed; otherwise kernel.yama.ptrace_scope must allow it).
 *
 * Collection blocks up to its timeout: call it off an event loop (the
 * agent runs it on libuv's thread pool). It never waits for a child it did
 * not start and tolerates a caller that reaps children with waitpid(-1):
 * a tool's output is judged by its content, not by its exit status.
 * Text functions are pure and thread-safe. */
#ifndef DR_STACKS_H
#define DR_STACKS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define DR_STACK_MAX_FRAMES 48

/* What the main thread is doing, judged from its innermost frames. */
typedef enum {
  DR_PLACE_UNKNOWN = 0, /* no stack, or nothing recognised */
  DR_PLACE_COLLECTIVE,  /* in a collective or a wait for one (all_reduce,
                           barrier, DDP's backward, NCCL, gloo, train's
                           process group) */
  DR_PLACE_WAIT,        /* blocked on something else: a lock, a queue, a
                           socket or pipe, poll */
  DR_PLACE_SLEEP,       /* sleeping (nanosleep, time.sleep) */
  DR_PLACE_IO,          /* in uninterruptible (disk) wait */
  DR_PLACE_CODE         /* running its own code */
} dr_place_t;

typedef struct {
  char func[128];  /* "all_reduce", "c10d::Reducer::finalize_backward" */
  char file[256];  /* Python: the full path; native: the source file or
                      the library, "" when unknown */
  int line;        /* 0 when unknown */
  int python;      /* a Python frame */
} dr_frame_t;

typedef struct {
  pid_t pid;
  char tool[48];     /* "py-spy 0.4.3", "eu-stack", "gdb", "kernel stack",
                        "kernel wchan", or "" when none could */
  char missing[256]; /* one line: what was missing or failed, "" if none */
  char *text;        /* the full stacks of every thread (malloc'd; may be
                        NULL) */
  dr_frame_t frames[DR_STACK_MAX_FRAMES]; /* the main thread's, innermost
                                             first */
  size_t n_frames;
  dr_place_t place;
  char where[200];   /* the place in one line; "" when unknown */
} dr_stack_t;

/* ---- collection (stacks.c) -------------------------------------------- */

/* Takes pid's stacks into *out (zeroed first; free with dr_stack_free).
 * is_python: 1 a Python program, 0 not, -1 decide from /proc/PID/exe.
 * Tries the tools in order within timeout_ms in all, kills a tool still
 * running at the deadline, and always ends with the kernel's view when no
 * tool gave a stack. Returns 0 when some stack was taken, else -ESRCH (pid
 * gone) or -ENODATA (nothing readable; out->missing says why). */
int dr_stacks_collect(pid_t pid, int is_python, int timeout_ms,
                      dr_stack_t *out);

typedef struct {
  pid_t pid;
  int is_python; /* as for dr_stacks_collect */
} dr_stack_req_t;

/* The same for n processes at once (their tools run side by side), within
 * timeout_ms in all: out[i] for reqs[i]. Returns how many got a stack. */
size_t dr_stacks_collect_all(const dr_stack_req_t *reqs, size_t n,
                             int timeout_ms, dr_stack_t *out);

/* 1 when pid runs a Python interpreter (its executable is python* or
 * pypy*). */
int dr_stacks_is_python(pid_t pid);

void dr_stack_free(dr_stack_t *s);

/* ---- text (stacks_parse.c, stacks_place.c, stacks_where.c, stacks_group.c) */

/* Parses a tool's output for pid: tool is "py-spy", "eu-stack", "gdb" or
 * "kernel" (a /proc/PID/stack, optionally followed by "wchan NAME" and
 * "state C" lines). Fills frames, place and where; keeps text. Returns 0,
 * or -ENODATA when the text holds no frame of pid's main thread. */
int dr_stack_parse(const char *tool, const char *text, pid_t pid,
                   dr_stack_t *out);

/* Refines place with the kernel's state of the main thread ('D': disk,
 * 'R': running) and its wait channel (nanosleep: sleeping); used when a
 * tool's frames do not say (py-spy shows no native frame). */
void dr_stack_refine(dr_stack_t *s, char state, const char *wchan);

/* Sets s->where from its frames. Python frames read the innermost user
 * frame's source line (to name the call on it) when the file is readable. */
void dr_stack_describe(dr_stack_t *s);

/* One rank's place, for grouping: where is borrowed. */
typedef struct {
  uint32_t rank;
  const char *where; /* NULL or "" groups as "unknown" */
} dr_rank_where_t;

/* Groups ranks by identical place, the largest group first (then by the
 * lowest rank), as "ranks 0-2, 4-7: X" items, one per group, separated by
 * sep ("; " for one line, "\n" for lines). Works on any set of ranks, from
 * one node or many. Writes at most n bytes (NUL included; an item that
 * does not fit is cut with "..."). Returns the number of groups. */
size_t dr_stacks_group(const dr_rank_where_t *in, size_t n_in,
                       const char *sep, char *out, size_t n);

/* "0-2, 4-7" for a sorted list of ranks; returns out. */
char *dr_ranks_format(const uint32_t *ranks, size_t n, char *out,
                      size_t out_n);

const char *dr_place_name(dr_place_t p);

/* ---- the kept text (stacks_format.c) ---------------------------------- */

/* s as the text kept in stack.txt and sent for `ddprun status --stacks`:
 * "WHO: TOOL, PLACE" (who may be NULL), "where: ..." and "missing: ..."
 * when known, a blank line, then the full stacks. Writes at most n bytes
 * (NUL included, cut at the end); returns the length written. */
size_t dr_stack_format(const dr_stack_t *s, const char *who, char *out,
                       size_t n);

/* The "where:" line of such a text (len bytes, not NUL-terminated) into
 * out: 0, or -1 (out "") when its header has none. */
int dr_stack_text_where(const char *text, size_t len, char *out, size_t n);

#endif /* DR_STACKS_H */
