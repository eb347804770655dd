/* File-system helpers that several folders use. */
#ifndef DR_FS_H
#define DR_FS_H

/* mkdir -p: creates path and its missing parents (mode 0755). 0 or
 * -errno. */
int dr_mkdirs(const char *path);

#endif /* DR_FS_H */
