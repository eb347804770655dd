/* Signal dispositions around an event loop's signal handles, for ddprun and
 * ddprun-rdzv: a signal must be handled, held or ignored from the first
 * instruction of main to the process's exit, never left to its default
 * action (which would end the process by that signal, its exit code
 * lost). libuv restores the default action when the last handle of a
 * signal closes; dr_signals_ignore() is called right after. */
#ifndef DR_SIGNALS_H
#define DR_SIGNALS_H

#include <signal.h>

/* The signals that stop ddprun and ddprun-rdzv (INT, TERM, HUP, QUIT) and
 * those ddprun holds for its workers (USR1, USR2), into set. */
void dr_signals_stop_set(sigset_t *set);

/* Blocks (or unblocks) set in the calling thread; threads it starts later
 * inherit the mask, and a blocked signal waits, pending, until unblocked. */
void dr_signals_block(const sigset_t *set);
void dr_signals_unblock(const sigset_t *set);

/* Every signal of set is ignored from now on, in every thread, and those
 * pending are discarded: for the way out, once the loop's handles of them
 * are closed. */
void dr_signals_ignore(const sigset_t *set);

#endif /* DR_SIGNALS_H */
