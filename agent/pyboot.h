/* The start-up hook of the Python programs the agent launches
 * (python/ddprun_boot: sitecustomize.py and ddprun_fr.py, built into the
 * agent): written into a directory that env.c puts first on the workers'
 * PYTHONPATH, so that every Python rank answers the agent's requests for
 * PyTorch's flight recorder without the program's help. */
#ifndef DR_PYBOOT_H
#define DR_PYBOOT_H

#include <stddef.h>

/* Writes the hook's files into root/pyboot and its path into dir, unless
 * DDPRUN_PYTHON_HOOKS=0 (then dir is "" and 0 is returned). 0, or -errno
 * with dir "" (the workers then start without it). */
int dr_pyboot_write(const char *root, char *dir, size_t n);

/* The PYTHONPATH value for the workers: dir, then the one the agent was
 * given (old, may be NULL or ""). 0, or -ENAMETOOLONG. */
int dr_pyboot_pythonpath(const char *dir, const char *old, char *out,
                         size_t n);

#endif /* DR_PYBOOT_H */
