/* Reading the stack tools' output: the main thread's frames out of
 * py-spy's, eu-stack's and gdb's text and the kernel's view, then what
 * they say the process is doing (stacks_place.c) and where
 * (stacks_where.c). Pure text; see stacks.h. */
#include "stacks.h"
#include "stacks_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *skip_blanks(const char *s) {
  while (*s == ' ' || *s == '\t')
    s++;
  return s;
}

/* The length of the line at s, without its newline. */
static size_t line_len(const char *s) {
  const char *nl = strchr(s, '\n');
  return nl != NULL ? (size_t)(nl - s) : strlen(s);
}

static const char *next_line(const char *s) {
  const char *nl = strchr(s, '\n');
  return nl != NULL ? nl + 1 : NULL;
}

/* A C or C++ name without its parameter list and symbol version:
 * "pthread_cond_wait@@GLIBC_2.3.2" -> "pthread_cond_wait",
 * "std::condition_variable::wait(std::unique_lock<std::mutex>&)" ->
 * "std::condition_variable::wait". Parentheses inside template arguments
 * and "(anonymous namespace)" stay. */
static void native_name(char *name) {
  char *at = strchr(name, '@');
  if (at != NULL)
    *at = '\0';
  int depth = 0;
  for (char *p = name; *p != '\0'; p++) {
    if (*p == '<')
      depth++;
    else if (*p == '>' && depth > 0)
      depth--;
    else if (*p == '(' && depth == 0 &&
             !dr__stacks_starts(p, "(anonymous namespace)") && p != name) {
      *p = '\0';
      break;
    }
  }
  size_t l = strlen(name);
  while (l > 0 && name[l - 1] == ' ')
    name[--l] = '\0';
}

/* ---- parsers ------------------------------------------------------------ */

static dr_frame_t *add_frame(dr_stack_t *s) {
  if (s->n_frames >= DR_STACK_MAX_FRAMES)
    return NULL;
  dr_frame_t *f = &s->frames[s->n_frames++];
  memset(f, 0, sizeof(*f));
  return f;
}

/* "    func (file:line)" (Python) or "    func (library)" (native). */
static void pyspy_frame(dr_stack_t *s, const char *l, size_t len) {
  char buf[600];
  dr__stacks_copy(buf, sizeof(buf), l, len);
  char *open = strstr(buf, " (");
  for (char *p = open; p != NULL; p = strstr(p + 1, " ("))
    open = p; /* the last one: C++ names hold parentheses */
  size_t bl = strlen(buf);
  if (open == NULL || bl == 0 || buf[bl - 1] != ')')
    return;
  buf[bl - 1] = '\0';
  *open = '\0';
  const char *loc = open + 2;
  dr_frame_t *f = add_frame(s);
  if (f == NULL)
    return;
  const char *colon = strrchr(loc, ':');
  if (colon != NULL && colon[1] != '\0' &&
      strspn(colon + 1, "0123456789") == strlen(colon + 1)) {
    f->python = 1;
    f->line = atoi(colon + 1);
    dr__stacks_copy(f->file, sizeof(f->file), loc, (size_t)(colon - loc));
    dr__stacks_copy(f->func, sizeof(f->func), buf, strlen(buf));
  } else {
    dr__stacks_copy(f->file, sizeof(f->file), loc, strlen(loc));
    dr__stacks_copy(f->func, sizeof(f->func), buf, strlen(buf));
    native_name(f->func);
  }
}

/* py-spy dump: "Thread TID (idle|active): "NAME"" headers, frames indented
 * four spaces (deeper lines are --locals). The main thread is the one whose
 * id is the pid, else "MainThread", else the first. */
static int parse_pyspy(const char *text, pid_t pid, dr_stack_t *s,
                       int *active) {
  const char *best = NULL;
  int best_score = 0;
  for (const char *l = text; l != NULL; l = next_line(l)) {
    if (!dr__stacks_starts(l, "Thread "))
      continue;
    long tid = strtol(l + 7, NULL, 0);
    size_t len = line_len(l);
    int score = tid == (long)pid                             ? 3
                : memmem(l, len, "\"MainThread\"", 12) != NULL ? 2
                                                             : 1;
    if (score > best_score) {
      best_score = score;
      best = l;
    }
  }
  if (best == NULL)
    return -ENODATA;
  *active = memmem(best, line_len(best), "(active", 7) != NULL;
  for (const char *l = next_line(best); l != NULL; l = next_line(l)) {
    size_t len = line_len(l);
    if (len < 5 || !dr__stacks_starts(l, "    "))
      break;
    if (l[4] == ' ')
      continue;
    pyspy_frame(s, l + 4, len - 4);
  }
  return s->n_frames > 0 ? 0 : -ENODATA;
}

/* eu-stack: "TID N:" headers, "#K  0xADDR NAME" frames (NAME may be
 * absent), optionally "    FILE:LINE" under a frame (-s). */
static int parse_eustack(const char *text, pid_t pid, dr_stack_t *s) {
  int in_main = 0, seen = 0;
  for (const char *l = text; l != NULL; l = next_line(l)) {
    size_t len = line_len(l);
    if (dr__stacks_starts(l, "TID ")) {
      in_main = strtol(l + 4, NULL, 10) == (long)pid;
      seen |= in_main;
      continue;
    }
    if (!in_main)
      continue;
    if (l[0] == '#') {
      const char *p = l + 1;
      while (isdigit((unsigned char)*p))
        p++;
      p = skip_blanks(p);
      if (dr__stacks_starts(p, "0x"))
        while (*p != '\0' && *p != ' ' && *p != '\n')
          p++;
      p = skip_blanks(p);
      dr_frame_t *f = add_frame(s);
      if (f == NULL)
        break;
      size_t nl = len - (size_t)(p - l);
      const char *dash = memmem(p, nl, " - ", 3); /* -m: " - /lib/x.so" */
      dr__stacks_copy(f->func, sizeof(f->func), p,
                      dash != NULL ? (size_t)(dash - p) : nl);
      native_name(f->func);
    } else if (s->n_frames > 0 && dr__stacks_starts(l, "    ")) {
      dr_frame_t *f = &s->frames[s->n_frames - 1];
      char buf[300];
      const char *b = skip_blanks(l);
      dr__stacks_copy(buf, sizeof(buf), b, len - (size_t)(b - l));
      char *colon = strrchr(buf, ':');
      if (colon != NULL) {
        f->line = atoi(colon + 1);
        *colon = '\0';
        dr__stacks_copy(f->file, sizeof(f->file), buf, strlen(buf));
      }
    }
  }
  return seen && s->n_frames > 0 ? 0 : -ENODATA;
}

/* gdb "thread apply all bt": "Thread N (Thread 0x... (LWP TID) "name"):"
 * headers; frames "#K  [0xADDR in ]NAME (ARGS) [at FILE:LINE | from LIB]";
 * inlined frames have no address. */
static int parse_gdb(const char *text, pid_t pid, dr_stack_t *s) {
  char lwp[40];
  snprintf(lwp, sizeof(lwp), "(LWP %d)", (int)pid);
  int in_main = 0, seen = 0, single = strstr(text, "(LWP ") == NULL;
  for (const char *l = text; l != NULL; l = next_line(l)) {
    size_t len = line_len(l);
    if (dr__stacks_starts(l, "Thread ")) {
      in_main = memmem(l, len, lwp, strlen(lwp)) != NULL;
      seen |= in_main;
      continue;
    }
    if (l[0] != '#' || !(in_main || single))
      continue;
    seen = 1;
    char buf[1200];
    dr__stacks_copy(buf, sizeof(buf), l, len);
    char *p = buf + 1;
    while (isdigit((unsigned char)*p))
      p++;
    p = (char *)skip_blanks(p);
    if (dr__stacks_starts(p, "0x")) {
      char *in = strstr(p, " in ");
      if (in == NULL)
        continue;
      p = in + 4;
    }
    dr_frame_t *f = add_frame(s);
    if (f == NULL)
      break;
    char *at = strstr(p, " at ");
    char *from = strstr(p, " from ");
    char *tail = at != NULL ? at : from;
    if (tail != NULL) {
      *tail = '\0';
      const char *loc = tail + (at != NULL ? 4 : 6);
      const char *colon = at != NULL ? strrchr(loc, ':') : NULL;
      if (colon != NULL) {
        f->line = atoi(colon + 1);
        dr__stacks_copy(f->file, sizeof(f->file), loc, (size_t)(colon - loc));
      } else {
        dr__stacks_copy(f->file, sizeof(f->file), loc, strlen(loc));
      }
    }
    /* The name ends at the argument list: " (" outside template brackets. */
    int depth = 0;
    for (char *q = p; *q != '\0'; q++) {
      if (*q == '<')
        depth++;
      else if (*q == '>' && depth > 0)
        depth--;
      else if (depth == 0 && q[0] == ' ' && q[1] == '(') {
        *q = '\0';
        break;
      }
    }
    dr__stacks_copy(f->func, sizeof(f->func), p, strlen(p));
    native_name(f->func);
  }
  return seen && s->n_frames > 0 ? 0 : -ENODATA;
}

/* The kernel's view as stacks.c writes it: "state C", "wchan NAME", then
 * the main thread's /proc/PID/stack lines "[<0>] name+0x../0x..", then
 * "threads:" and one line per thread. */
static int parse_kernel(const char *text, dr_stack_t *s, char *state,
                        char *wchan, size_t wchan_n) {
  for (const char *l = text; l != NULL; l = next_line(l)) {
    size_t len = line_len(l);
    if (dr__stacks_starts(l, "threads:"))
      break;
    if (dr__stacks_starts(l, "state ") && len > 6) {
      *state = l[6];
    } else if (dr__stacks_starts(l, "wchan ")) {
      dr__stacks_copy(wchan, wchan_n, l + 6, len - 6);
    } else if (dr__stacks_starts(l, "[<")) {
      const char *p = memchr(l, ']', len);
      if (p == NULL)
        continue;
      p = skip_blanks(p + 1);
      size_t nl = len - (size_t)(p - l);
      const char *plus = memchr(p, '+', nl);
      dr_frame_t *f = add_frame(s);
      if (f == NULL)
        break;
      dr__stacks_copy(f->func, sizeof(f->func), p,
                      plus != NULL ? (size_t)(plus - p) : nl);
    }
  }
  if (s->n_frames == 0 && wchan[0] != '\0' && strcmp(wchan, "0") != 0) {
    dr_frame_t *f = add_frame(s);
    if (f != NULL)
      dr__stacks_copy(f->func, sizeof(f->func), wchan, strlen(wchan));
  }
  return s->n_frames > 0 || *state != '\0' ? 0 : -ENODATA;
}

int dr_stack_parse(const char *tool, const char *text, pid_t pid,
                   dr_stack_t *out) {
  out->n_frames = 0;
  out->place = DR_PLACE_UNKNOWN;
  out->where[0] = '\0';
  if (text == NULL)
    return -ENODATA;
  int rc, active = 0;
  char state = '\0', wchan[128] = "";
  if (dr__stacks_starts(tool, "py-spy")) {
    rc = parse_pyspy(text, pid, out, &active);
    if (rc == 0) {
      const dr_frame_t *py = dr__stacks_innermost_python(out);
      if (py != NULL && dr__stacks_py_collective(py))
        out->place = DR_PLACE_COLLECTIVE;
      else if (out->n_frames > 0 && !out->frames[0].python)
        out->place = dr__stacks_native_place(out); /* --native */
      else if (active)
        out->place = DR_PLACE_CODE;
    }
  } else if (dr__stacks_starts(tool, "eu-stack") ||
             dr__stacks_starts(tool, "gdb")) {
    rc = dr__stacks_starts(tool, "gdb") ? parse_gdb(text, pid, out)
                                        : parse_eustack(text, pid, out);
    if (rc == 0)
      out->place = dr__stacks_native_place(out);
  } else if (dr__stacks_starts(tool, "kernel")) {
    rc = parse_kernel(text, out, &state, wchan, sizeof(wchan));
    if (rc == 0) {
      for (size_t i = 0; i < out->n_frames && out->place == 0; i++)
        out->place = dr__stacks_kernel_kind(out->frames[i].func);
      dr_stack_refine(out, state, wchan);
    }
  } else {
    rc = -EINVAL;
  }
  if (rc == 0)
    dr_stack_describe(out);
  return rc;
}
