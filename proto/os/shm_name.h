/* Names of the POSIX shared-memory segments (/dev/shm) that a job's
 * workers create (the CPU backend's rings, train's shared weights), and
 * their removal by the agent.
 *
 * A name is "/" PREFIX DIGITS "-" TAG: DIGITS are 16 hex digits from
 * getrandom(), so that no other local user can predict a name and create
 * it first (a segment created with O_EXCL fails with EEXIST on a taken
 * name; dr_shm_create tries new digits then). PREFIX is the agent's: it
 * gives its workers DDPRUN_SHM_PREFIX (dr_shm_prefix_new) and, once they
 * have exited, removes every /dev/shm entry that begins with it
 * (dr_shm_remove_prefix), so that no segment outlives the job, whatever
 * killed a worker between creating a segment and removing its name.
 * Without the variable (a worker not started by ddprun) the prefix is
 * "ddprun-".
 *
 * Test hooks (tests/train/shm_names.sh; train --help lists them), read at
 * each dr_shm_create:
 *   DDPRUN_SHM_TEST_TAKEN=N       the first N names each call tries are
 *                                 taken: created empty just before, as
 *                                 another user's would be (they carry the
 *                                 prefix, so the agent removes them)
 *   DDPRUN_SHM_TEST_KILL=TAG[:R]  the process (of RANK R only, when
 *                                 given) SIGKILLs itself right after
 *                                 creating a segment whose tag begins with
 *                                 TAG, before anybody else knows its name;
 *                                 on the job's first attempt only
 *                                 (TORCHELASTIC_RESTART_COUNT unset or 0),
 *                                 announced on stderr
 */
#ifndef DR_SHM_NAME_H
#define DR_SHM_NAME_H

#include <stddef.h>

#define DR_SHM_PREFIX_ENV "DDPRUN_SHM_PREFIX"
/* Longest prefix (characters of [A-Za-z0-9._-]) taken from the
 * environment; another one is ignored for the default. */
#define DR_SHM_PREFIX_MAX 64
/* Names one dr_shm_create tries before it gives up on EEXIST. */
#define DR_SHM_NAME_TRIES 8
/* Longest tag. */
#define DR_SHM_TAG_MAX 48

/* Creates the segment `name` (O_EXCL): 0, -EEXIST when the name is
 * taken, or another negative code, which ends the tries. */
typedef int (*dr_shm_create_fn)(const char *name, void *arg);

/* Makes a name with tag ([A-Za-z0-9._-], at most DR_SHM_TAG_MAX) into
 * name (n bytes: at least 1 + DR_SHM_PREFIX_MAX + 17 + DR_SHM_TAG_MAX + 1)
 * and calls create with it; while create says -EEXIST, again with new
 * digits, DR_SHM_NAME_TRIES names in all. Returns create's last code (0
 * with the name it took in name), -EINVAL for a bad tag or a short
 * buffer, or -errno of getrandom(); *taken (may be NULL) gets how many
 * names were found taken. */
int dr_shm_create(char *name, size_t n, const char *tag,
                  dr_shm_create_fn create, void *arg, int *taken);

/* The agent's: a new prefix for its workers, "ddprun-<pid>-<8 random hex
 * digits>-" (unique among the agents of a host). 0 or -errno. */
int dr_shm_prefix_new(char *buf, size_t n);

/* The agent's: removes every /dev/shm entry whose name begins with
 * prefix (never following a link). Returns how many it removed, or
 * -errno when /dev/shm cannot be read (a missing one holds nothing: 0). */
int dr_shm_remove_prefix(const char *prefix);

#endif /* DR_SHM_NAME_H */
