/* --help, printed from a program's table (flags.h): its usage text, then
 * every flag with its value, default and meaning, under the headings of
 * their sections, then whatever the program adds. */
#include <stdio.h>
#include <string.h>

#include "flags.h"

#define HELP_COL 30
#define HELP_WIDTH 79

/* A word longer than the space runs past HELP_WIDTH. */
void dr_flags_wrap(FILE *f, const char *text, int col) {
  const char *p = text;
  int x = col;
  while (*p != '\0') {
    size_t w = strcspn(p, " ");
    if (x > col && x + 1 + (int)w > HELP_WIDTH) {
      fprintf(f, "\n%*s", col, "");
      x = col;
    } else if (x > col) {
      fputc(' ', f);
      x++;
    }
    fprintf(f, "%.*s", (int)w, p);
    x += (int)w;
    p += w;
    p += strspn(p, " ");
  }
  fputc('\n', f);
}

void dr_flags_usage(const dr_flags_t *spec, FILE *f) {
  fputs(spec->usage, f);
  for (size_t i = 0; i < spec->n_rows; i++) {
    const dr_flag_t *r = &spec->rows[i];
    if (r->section != NULL)
      fprintf(f, "\n%s:\n", r->section);
    char left[96];
    if (r->short_name != 0)
      snprintf(left, sizeof(left), "  -%c, --%s%s%s", r->short_name, r->name,
               r->metavar != NULL ? " " : "",
               r->metavar != NULL ? r->metavar : "");
    else
      snprintf(left, sizeof(left), "      --%s%s%s", r->name,
               r->metavar != NULL ? " " : "",
               r->metavar != NULL ? r->metavar : "");
    char text[1024];
    if (r->def != NULL)
      snprintf(text, sizeof(text), "%s (default: %s)", r->help, r->def);
    else
      snprintf(text, sizeof(text), "%s", r->help);
    int at = (int)strlen(left);
    fputs(left, f);
    if (at + 2 > HELP_COL)
      fprintf(f, "\n%*s", HELP_COL, "");
    else
      fprintf(f, "%*s", HELP_COL - at, "");
    dr_flags_wrap(f, text, HELP_COL);
  }
  if (spec->usage_tail != NULL)
    spec->usage_tail(f);
}
