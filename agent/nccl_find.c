/* Which libnccl.so.2 the workers will load, found the way they will find
 * it (node_env.h): a PyTorch program's torch loads the nvidia-nccl wheel's
 * copy from its Python environment before anything else; otherwise the
 * dynamic loader's LD_LIBRARY_PATH, then the system's directories. */
#include "node_env.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs.h"

#define LIB "libnccl.so.2"

const char *dr__env_get(char *const *envp, const char *name) {
  size_t n = strlen(name);
  for (size_t i = 0; envp != NULL && envp[i] != NULL; i++)
    if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=')
      return envp[i] + n + 1;
  return NULL;
}

static int is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* cmd resolved through PATH as execvp would, without following links (a
 * virtual environment's bin/python is a link to the system's). */
static int which(const char *cmd, char *const *envp, char *out, size_t n) {
  if (strchr(cmd, '/') != NULL)
    return snprintf(out, n, "%s", cmd) < (int)n && is_file(out) ? 0 : -ENOENT;
  return dr_find_program(cmd, dr__env_get(envp, "PATH"), out, n) == 0
             ? 0
             : -ENOENT;
}

static int is_python(const char *path) {
  const char *b = strrchr(path, '/');
  b = b != NULL ? b + 1 : path;
  return strncmp(b, "python", 6) == 0;
}

/* The Python interpreter that runs the program: argv[0] itself, or the
 * one its "#!" line names (through env). 0, or -ENOENT: not Python. */
static int python_of(const char *const *argv, char *const *envp, char *out,
                     size_t n) {
  char prog[PATH_MAX];
  if (argv == NULL || argv[0] == NULL ||
      which(argv[0], envp, prog, sizeof(prog)) != 0)
    return -ENOENT;
  if (is_python(prog))
    return snprintf(out, n, "%s", prog) < (int)n ? 0 : -ENOENT;
  FILE *f = fopen(prog, "re");
  if (f == NULL)
    return -ENOENT;
  char line[512];
  int ok = fgets(line, sizeof(line), f) != NULL && strncmp(line, "#!", 2) == 0;
  fclose(f);
  if (!ok)
    return -ENOENT;
  line[strcspn(line, "\r\n")] = '\0';
  char *save = NULL, *interp = strtok_r(line + 2, " \t", &save);
  if (interp == NULL)
    return -ENOENT;
  if (strcmp(strrchr(interp, '/') != NULL ? strrchr(interp, '/') + 1 : interp,
             "env") == 0) {
    interp = strtok_r(NULL, " \t", &save);
    while (interp != NULL && interp[0] == '-')
      interp = strtok_r(NULL, " \t", &save);
    if (interp == NULL)
      return -ENOENT;
  }
  return is_python(interp) && which(interp, envp, out, n) == 0 ? 0 : -ENOENT;
}

/* The version in a name like libnccl.so.2.21.5 (after LIB's "."). */
static void version_of_name(const char *real, char *v, size_t n) {
  const char *b = strrchr(real, '/');
  b = b != NULL ? b + 1 : real;
  if (strncmp(b, LIB ".", sizeof(LIB)) == 0)
    snprintf(v, n, "2.%s", b + sizeof(LIB));
}

/* The version NCCL prints in its banner, "NCCL version 2.28.9+cuda13.0",
 * read from the library's bytes when its name carries none. */
static void version_of_bytes(const char *path, char *v, size_t n) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0)
    return;
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    close(fd);
    return;
  }
  void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m == MAP_FAILED)
    return;
  /* The banner sits in .rodata, a few MiB in, before the device code
   * that makes most of the file: the search stops at 64 MiB. */
  static const char tag[] = "NCCL version 2.";
  size_t len = (size_t)st.st_size < (64u << 20) ? (size_t)st.st_size
                                                 : (64u << 20);
  const char *p = memmem(m, len, tag, sizeof(tag) - 1);
  if (p != NULL) {
    const char *s = p + sizeof(tag) - 3, *end = (const char *)m + st.st_size;
    size_t k = 0;
    while (s + k < end && k + 1 < n &&
           ((s[k] >= '0' && s[k] <= '9') || s[k] == '.' || s[k] == '+' ||
            (s[k] >= 'a' && s[k] <= 'z')))
      k++;
    snprintf(v, n, "%.*s", (int)k, s);
  }
  munmap(m, (size_t)st.st_size);
}

static int found(const char *path, char *out, size_t out_len, char *v,
                 size_t v_len) {
  snprintf(out, out_len, "%s", path);
  char real[PATH_MAX];
  v[0] = '\0';
  if (realpath(path, real) != NULL)
    version_of_name(real, v, v_len);
  if (v[0] == '\0')
    version_of_bytes(path, v, v_len);
  return 0;
}

/* The wheel's copy under the interpreter's prefix (bin/..), and its
 * version from the wheel's dist-info when the file name has none. */
static int in_python_env(const char *python, char *out, size_t out_len,
                         char *v, size_t v_len) {
  char prefix[PATH_MAX], pat[PATH_MAX + 64];
  snprintf(prefix, sizeof(prefix), "%s", python);
  for (int up = 0; up < 2; up++) {
    char *slash = strrchr(prefix, '/');
    if (slash == NULL)
      return -ENOENT;
    *slash = '\0';
  }
  snprintf(pat, sizeof(pat),
           "%s/lib/python3*/site-packages/nvidia/nccl/lib/" LIB, prefix);
  glob_t g;
  if (glob(pat, 0, NULL, &g) != 0)
    return -ENOENT;
  found(g.gl_pathv[0], out, out_len, v, v_len);
  globfree(&g);
  snprintf(pat, sizeof(pat),
           "%s/lib/python3*/site-packages/nvidia_nccl_cu*-*.dist-info", prefix);
  if (glob(pat, 0, NULL, &g) == 0) {
    /* .../nvidia_nccl_cu12-2.21.5.dist-info */
    const char *s = strchr(strrchr(g.gl_pathv[0], '/'), '-');
    const char *e = strstr(g.gl_pathv[0], ".dist-info");
    if (s != NULL && e != NULL && e > s)
      snprintf(v, v_len, "%.*s", (int)(e - s - 1), s + 1);
    globfree(&g);
  }
  return 0;
}

static int in_dir(const char *root, const char *dir, char *out,
                  size_t out_len, char *v, size_t v_len) {
  char p[PATH_MAX];
  if (snprintf(p, sizeof(p), "%s%s/" LIB, root, dir) >= (int)sizeof(p) ||
      !is_file(p))
    return -ENOENT;
  return found(p, out, out_len, v, v_len);
}

/* The directories of an ld.so.conf file (full path; its include lines
 * followed), each under root. */
static int in_ld_conf(const char *root, const char *conf, int depth,
                      char *out, size_t out_len, char *v, size_t v_len) {
  FILE *f = depth <= 4 ? fopen(conf, "re") : NULL;
  if (f == NULL)
    return -ENOENT;
  char line[PATH_MAX];
  int rc = -ENOENT;
  while (rc != 0 && fgets(line, sizeof(line), f) != NULL) {
    line[strcspn(line, "#\r\n")] = '\0';
    char *s = line + strspn(line, " \t");
    if (strncmp(s, "include", 7) == 0 && (s[7] == ' ' || s[7] == '\t')) {
      char pat[PATH_MAX + 8];
      s += 7 + strspn(s + 7, " \t");
      snprintf(pat, sizeof(pat), "%s%s", root, s);
      glob_t g;
      if (glob(pat, 0, NULL, &g) == 0) {
        for (size_t i = 0; rc != 0 && i < g.gl_pathc; i++)
          rc = in_ld_conf(root, g.gl_pathv[i], depth + 1, out, out_len, v,
                          v_len);
        globfree(&g);
      }
    } else if (*s == '/') {
      s[strcspn(s, " \t")] = '\0';
      rc = in_dir(root, s, out, out_len, v, v_len);
    }
  }
  fclose(f);
  return rc;
}

int dr__nccl_find(const char *root, const char *const *prog_argv,
                  char *const *envp, char *path, size_t path_len,
                  char *version, size_t version_len, const char **where) {
  version[0] = '\0';
  root = root != NULL ? root : "";
  char python[PATH_MAX];
  if (python_of(prog_argv, envp, python, sizeof(python)) == 0 &&
      in_python_env(python, path, path_len, version, version_len) == 0) {
    *where = "the program's Python environment";
    return 0;
  }
  const char *ldp = dr__env_get(envp, "LD_LIBRARY_PATH");
  while (ldp != NULL && *ldp != '\0') {
    const char *colon = strchrnul(ldp, ':');
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%.*s", (int)(colon - ldp), ldp);
    if (dir[0] != '\0' &&
        in_dir("", dir, path, path_len, version, version_len) == 0) {
      *where = "LD_LIBRARY_PATH";
      return 0;
    }
    ldp = *colon == ':' ? colon + 1 : colon;
  }
  static const char *const sys[] = {"/lib/x86_64-linux-gnu",
                                    "/usr/lib/x86_64-linux-gnu", "/lib64",
                                    "/usr/lib64", "/lib", "/usr/lib"};
  *where = "the system";
  char conf[PATH_MAX];
  snprintf(conf, sizeof(conf), "%s/etc/ld.so.conf", root);
  if (in_ld_conf(root, conf, 0, path, path_len, version, version_len) == 0)
    return 0;
  for (size_t i = 0; i < sizeof(sys) / sizeof(sys[0]); i++)
    if (in_dir(root, sys[i], path, path_len, version, version_len) == 0)
      return 0;
  snprintf(path, path_len, "%s%s%s",
           prog_argv != NULL && python_of(prog_argv, envp, python,
                                          sizeof(python)) == 0
               ? "the program's Python environment, "
               : "",
           ldp != NULL || dr__env_get(envp, "LD_LIBRARY_PATH") != NULL
               ? "LD_LIBRARY_PATH, "
               : "",
           "/etc/ld.so.conf and the system's library directories");
  return -ENOENT;
}
