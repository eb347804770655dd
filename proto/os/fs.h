/* File-system helpers that several folders use. */
#ifndef DR_FS_H
#define DR_FS_H

#include <stddef.h>

/* mkdir -p: creates path and its missing parents (mode 0755). 0 or
 * -errno. */
int dr_mkdirs(const char *path);

/* Opens path for reading only when it is a regular file, and never blocks
 * on it: open() of a FIFO without a writer would wait forever, so the
 * path is opened non-blocking and anything but a regular file (a FIFO, a
 * device, a socket) is refused before a byte is read. Returns the
 * descriptor (close-on-exec, back in blocking mode; caller closes it) or
 * a negative code: -errno of open() or fstat(), -EISDIR for a directory,
 * DR_ENOTREG for the rest; dr_strerror() words each. */
int dr_open_regular(const char *path);

/* Writes all n bytes to fd, again after EINTR and a short write. 0 or
 * -errno of the write() that failed. */
int dr_write_all(int fd, const void *buf, size_t n);

/* Replaces path with the n bytes of data, whole or not at all: written
 * to path.tmp.PID (mode 0644), then renamed over path; the temporary is
 * removed when a step fails. 0 or -errno of the step that failed. */
int dr_write_file(const char *path, const void *data, size_t n);

/* A small text file (of /proc or /sys) whole, at root followed by path
 * (root "" for the real ones; a test's stand-in tree else): at most cap - 1
 * bytes into buf, without its trailing blanks and newlines, and
 * NUL-terminated. Its length, or -errno (-ENAMETOOLONG for a path too
 * long). */
int dr_read_text(const char *root, const char *path, char *buf, size_t cap);

/* The program a shell would run for name: name itself when it holds a
 * '/', else the first entry of path (a PATH value; NULL or "": the
 * shell's default, /usr/local/bin:/usr/bin:/bin; an empty entry: the
 * working directory) that holds a name that is not a directory and that
 * this process may execute. 0 and its path in out; -ENOENT when no entry
 * holds one, -EACCES when one does that may not be executed (as execvp()
 * says), -ENAMETOOLONG when out is too small for the path. */
int dr_find_program(const char *name, const char *path, char *out, size_t n);

#endif /* DR_FS_H */
