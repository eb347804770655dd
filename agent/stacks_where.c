/* The place of a stack in one line: the program's own innermost frame and
 * what it is in ("time.sleep <- load_batch at train.py:17"), or the
 * innermost native frames that matter. Pure text, except that a Python
 * frame's source line is read to name the call on it; see stacks.h. */
#include "stacks.h"
#include "stacks_internal.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* snprintf for text that may be cut: places and labels are bounded. */
static void cut(char *out, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void cut(char *out, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out, n, fmt, ap);
  va_end(ap);
}

static const char *base_name(const char *path) {
  const char *b = strrchr(path, '/');
  return b != NULL ? b + 1 : path;
}

/* ---- the place in one line ----------------------------------------------- */

/* The call on a source line, to say what a frame is waiting in: the first
 * dotted name followed by '(' before any comment ("    time.sleep(3600)"
 * -> "time.sleep"). Only absolute paths: the agent's working directory is
 * not the program's. */
static int call_on_line(const char *file, int line, char *out, size_t n) {
  if (file[0] != '/' || line <= 0)
    return -1;
  FILE *fp = fopen(file, "r");
  if (fp == NULL)
    return -1;
  char buf[1024];
  int k = 0, found = 0;
  while (fgets(buf, sizeof(buf), fp) != NULL)
    if (++k == line) {
      found = 1;
      break;
    }
  fclose(fp);
  if (!found)
    return -1;
  char *hash = strchr(buf, '#');
  if (hash != NULL)
    *hash = '\0';
  for (const char *p = buf + 1; *p != '\0'; p++) {
    if (*p != '(')
      continue;
    const char *b = p;
    while (b > buf && (isalnum((unsigned char)b[-1]) || b[-1] == '_' ||
                       b[-1] == '.'))
      b--;
    while (b < p && (*b == '.' || isdigit((unsigned char)*b)))
      b++;
    if (p > b) {
      dr__stacks_copy(out, n, b, (size_t)(p - b));
      return 0;
    }
  }
  return -1;
}

/* The program's own frames are those under the directory of its script:
 * the outermost Python frame that is not a library's. Packages elsewhere
 * (a pip --target directory, a virtual environment) are libraries. */
static int py_user(const dr_frame_t *f, const char *root, size_t root_len) {
  if (dr__stacks_py_library(f->file))
    return 0;
  if (root_len == 0)
    return strchr(f->file, '/') == NULL;
  return strncmp(f->file, root, root_len) == 0 && f->file[root_len] == '/';
}

static void describe_python(dr_stack_t *s) {
  const dr_frame_t *inner = dr__stacks_innermost_python(s);
  const char *root = "";
  size_t root_len = 0;
  for (size_t i = s->n_frames; i-- > 0;)
    if (s->frames[i].python && !dr__stacks_py_library(s->frames[i].file)) {
      root = s->frames[i].file;
      const char *slash = strrchr(root, '/');
      root_len = slash != NULL ? (size_t)(slash - root) : 0;
      break;
    }
  const dr_frame_t *user = NULL;
  for (size_t i = 0; i < s->n_frames && user == NULL; i++)
    if (s->frames[i].python && py_user(&s->frames[i], root, root_len))
      user = &s->frames[i];
  if (user == NULL) {
    cut(s->where, sizeof(s->where), "%s at %s:%d", inner->func,
        base_name(inner->file), inner->line);
    return;
  }
  /* What the program's frame is in: the innermost native frame that
   * matters (py-spy --native), else the innermost library frame, else the
   * call on its source line. */
  char callee[128] = "";
  for (size_t i = 0; i < s->n_frames && !s->frames[i].python; i++)
    if (dr__stacks_wait_kind(s->frames[i].func) == 0 &&
        !dr__stacks_plumbing(s->frames[i].func)) {
      cut(callee, sizeof(callee), "%s", s->frames[i].func);
      break;
    }
  if (callee[0] == '\0' && inner != user)
    cut(callee, sizeof(callee), "%s", inner->func);
  else if (callee[0] == '\0')
    call_on_line(user->file, user->line, callee, sizeof(callee));
  cut(s->where, sizeof(s->where), "%s%s%s at %s:%d", callee,
      callee[0] != '\0' ? " <- " : "", user->func, base_name(user->file),
      user->line);
}

static void describe_native(dr_stack_t *s, int kernel) {
  const dr_frame_t *m[2] = {NULL, NULL};
  const dr_frame_t *wait = NULL;
  size_t k = 0;
  for (size_t i = 0; i < s->n_frames && k < 2; i++) {
    const dr_frame_t *f = &s->frames[i];
    if (!kernel && dr__stacks_wait_kind(f->func) != 0) {
      if (wait == NULL)
        wait = f;
      continue;
    }
    if (!kernel && dr__stacks_plumbing(f->func))
      continue;
    m[k++] = f;
  }
  if (m[0] == NULL)
    m[0] = wait != NULL ? wait : s->n_frames > 0 ? &s->frames[0] : NULL;
  if (m[0] == NULL)
    return;
  char loc[300] = "";
  if (m[0]->line > 0)
    cut(loc, sizeof(loc), " at %s:%d", base_name(m[0]->file),
             m[0]->line);
  /* Where the wait itself says nothing ("main"), say that it sleeps: a
   * rank asleep in main is not with its peers polling in main. */
  int say_sleep = !kernel && wait != NULL &&
                  dr__stacks_wait_kind(wait->func) == DR_PLACE_SLEEP &&
                  strstr(m[0]->func, "sleep") == NULL;
  cut(s->where, sizeof(s->where), "%s%s%s%s%s%s", kernel ? "kernel: " : "",
      m[0]->func, loc, m[1] != NULL ? " <- " : "",
      m[1] != NULL ? m[1]->func : "", say_sleep ? " (sleeping)" : "");
}

void dr_stack_describe(dr_stack_t *s) {
  s->where[0] = '\0';
  if (s->n_frames == 0)
    return;
  if (dr__stacks_innermost_python(s) != NULL)
    describe_python(s);
  else
    describe_native(s, dr__stacks_starts(s->tool, "kernel"));
}
