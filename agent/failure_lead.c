/* A failure's message, its failing line first (failure_lead.h). */
#include "failure_lead.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* Case-insensitive: does [p, p + n) contain word (lower case)? */
static int has_word(const char *p, size_t n, const char *word) {
  size_t w = strlen(word);
  for (size_t i = 0; w <= n && i <= n - w; i++) {
    size_t k = 0;
    while (k < w && tolower((unsigned char)p[i + k]) == word[k])
      k++;
    if (k == w)
      return 1;
  }
  return 0;
}

static int states_failure(const char *p, size_t n) {
  static const char *const words[] = {
      "error", "fail", "cannot", "can't", "no space", "denied", "killed",
      "abort", "exception", "fatal", "out of memory", "timed out",
      "refused", "(exit ", "lost rank",
  };
  for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
    if (has_word(p, n, words[i]))
      return 1;
  return 0;
}

static int blank(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isspace((unsigned char)p[i]))
      return 0;
  return 1;
}

int dr_failure_lead(char *msg, size_t cap) {
  size_t len = strnlen(msg, cap);
  if (len == 0 || len >= cap)
    return 0;
  /* The chosen line: [b, e). */
  size_t b = 0, e = 0, lb = 0, le = 0;
  int found = 0, any = 0;
  for (size_t s = 0; s < len;) {
    const char *nl = memchr(msg + s, '\n', len - s);
    size_t t = nl != NULL ? (size_t)(nl - msg) : len;
    if (!blank(msg + s, t - s)) {
      lb = s, le = t, any = 1;
      if (states_failure(msg + s, t - s))
        b = s, e = t, found = 1;
    }
    s = t + 1;
  }
  if (!found) {
    if (!any)
      return 0;
    b = lb, e = le;
  }
  if (b == 0)
    return 0;
  char *out = malloc(len + 2);
  if (out == NULL)
    return 0;
  size_t o = 0;
  memcpy(out, msg + b, e - b);
  o = e - b;
  out[o++] = '\n';
  memcpy(out + o, msg, b); /* the lines before it, their '\n' included */
  o += b;
  if (e < len) /* the lines after it, without its '\n' */
    memcpy(out + o, msg + e + 1, len - e - 1), o += len - e - 1;
  while (o > 0 && out[o - 1] == '\n')
    o--;
  out[o] = '\0';
  memcpy(msg, out, o + 1);
  free(out);
  return 1;
}
