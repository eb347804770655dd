/* One process's stacks as the text that travels and is kept: a header
 * (the tool, the kind of place, "where:" and "missing:" lines), a blank
 * line, then the tool's full output. stack.txt beside a rank's logs and
 * the STACK_DUMP records of `ddprun status --stacks` are this text, and
 * dr_stack_text_where reads the place back out of it to group ranks. */
#include <stdio.h>
#include <string.h>

#include "stacks.h"

size_t dr_stack_format(const dr_stack_t *s, const char *who, char *out,
                       size_t n) {
  if (n == 0)
    return 0;
  int k = snprintf(out, n, "%s%s%s, %s\n", who != NULL ? who : "",
                   who != NULL ? ": " : "",
                   s->tool[0] != '\0' ? s->tool : "no tool",
                   dr_place_name(s->place));
  size_t o = k < 0 ? 0 : (size_t)k < n ? (size_t)k : n - 1;
  if (s->where[0] != '\0' && o < n)
    o += (size_t)snprintf(out + o, n - o, "where: %s\n", s->where);
  if (s->missing[0] != '\0' && o < n)
    o += (size_t)snprintf(out + o, n - o, "missing: %s\n", s->missing);
  if (o < n)
    o += (size_t)snprintf(out + o, n - o, "\n%s",
                          s->text != NULL ? s->text : "");
  return o < n ? o : n - 1;
}

int dr_stack_text_where(const char *text, size_t len, char *out, size_t n) {
  if (n == 0)
    return -1;
  out[0] = '\0';
  /* The header ends at the first blank line. */
  for (size_t i = 0; i < len;) {
    const char *line = text + i;
    const char *nl = memchr(line, '\n', len - i);
    size_t l = nl != NULL ? (size_t)(nl - line) : len - i;
    if (l == 0)
      break;
    if (l > 7 && memcmp(line, "where: ", 7) == 0) {
      size_t w = l - 7 < n - 1 ? l - 7 : n - 1;
      memcpy(out, line + 7, w);
      out[w] = '\0';
      return 0;
    }
    i += l + 1;
  }
  return -1;
}
