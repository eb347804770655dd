/* A program's flags as a table: one row per flag with its name, kind of
 * value, metavar, default, help, section and setter. From the table come
 * the parsing of argv (and of the environment and a config file, for a
 * program that reads them) and the --help text, so that a flag cannot
 * exist without its documentation. ddprun (launcher/cli/options_table.c)
 * and ddprun-rdzv (launcher/server/rdzv_opts.c) are tables over it.
 *
 * On the command line a flag is --name VALUE or --name=VALUE, a switch is
 * --name alone; a name is spelled with dashes or underscores
 * (--nproc-per-node, --nproc_per_node). A row with a short name also takes
 * -x VALUE and -xVALUE. In the environment and the file a switch takes
 * 1/0/true/false/yes/no.
 *
 * Messages are one line without the program's prefix (the caller prints
 * "PROG: " before it): "unknown option '--nproc'; see ddprun --help",
 * "option '--nnodes' needs a value: --nnodes N|MIN:MAX". None of this
 * prints, but --help and --version, on stdout.
 */
#ifndef DR_FLAGS_H
#define DR_FLAGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
  DR_FLAG_VALUE,  /* --name VALUE or --name=VALUE */
  DR_FLAG_SWITCH, /* --name alone; its setter gets "1" from argv */
  DR_FLAG_HELP,   /* -h/--help: prints the help while argv is read */
  DR_FLAG_VERSION /* --version: prints "PROG VERSION" likewise */
} dr_flag_kind_t;

/* Where a row may be set from. */
#define DR_FLAG_FROM_ARGV 1u
#define DR_FLAG_FROM_ENV 2u
#define DR_FLAG_FROM_FILE 4u
#define DR_FLAG_FROM_ALL                                                       \
  (DR_FLAG_FROM_ARGV | DR_FLAG_FROM_ENV | DR_FLAG_FROM_FILE)

typedef struct dr_flag dr_flag_t;

/* Applies val to the program's options dst. `what` names where the value
 * came from, for the message: "--nnodes", "PET_NNODES" or
 * "cfg.ini:3: nnodes". A failing setter writes its one-line message to err
 * and returns DR_EBADARG (or -ENOMEM, see dr_flags_oom), and changes
 * nothing: a setter replaces everything its flag controls, so a later
 * layer fully overrides an earlier one. val is borrowed for the call (a
 * line of the file); a program that reads argv alone may keep it, as argv
 * outlives the parse. */
typedef int (*dr_flag_set_fn)(void *dst, const dr_flag_t *row, const char *val,
                              const char *what, char *err, size_t err_len);

struct dr_flag {
  const char *name;    /* canonical, dashed, without the leading "--" */
  char short_name;     /* 'h' for -h, or 0 */
  dr_flag_kind_t kind;
  unsigned from;       /* DR_FLAG_FROM_* */
  const char *metavar; /* shown by --help after the name; NULL: none */
  const char *def;     /* the default as --help shows it; NULL: none */
  const char *help;
  const char *section; /* a heading --help prints before this row, or NULL */
  dr_flag_set_fn set;  /* NULL for help and version */
  size_t off;          /* the field of dst the generic setters write */
};

typedef struct dr_flags dr_flags_t;

/* Reads the config file at path into dst (dr_flags_ini_read, flags_ini.h):
 * each value through dr_flags_apply. */
typedef int (*dr_flags_file_fn)(const dr_flags_t *spec, void *dst,
                                const char *path, uint64_t *given, char *err,
                                size_t err_len);

/* How argv is read (dr_flags_t.mode):
 * DR_FLAGS_PROGRAM: the first argument that is not an option (or the one
 *   after --) is a program to run; it and the rest are its argv. Without
 *   it, an argument that is not an option, wherever it is, is an error,
 *   reported once the options are applied (getopt's order).
 * DR_FLAGS_PREFIXES: a unique prefix of a long name stands for it (--max-r
 *   for --max-restarts), as with getopt_long. */
#define DR_FLAGS_PROGRAM 1u
#define DR_FLAGS_PREFIXES 2u

/* A program: its rows and the layers it reads, each overriding the one
 * before: defaults (set by the caller), config file, environment, argv. */
struct dr_flags {
  const char *prog;    /* "ddprun": "PROG VERSION", "see PROG --help" */
  const char *version; /* what --version prints after the name */
  const dr_flag_t *rows;
  size_t n_rows;       /* at most 64: a bit each in `given` */
  unsigned mode;       /* DR_FLAGS_* */
  /* The environment layer: PREFIX + the name in upper case with '_' for
   * '-' (PET_NPROC_PER_NODE); an empty variable counts as unset. NULL:
   * none. */
  const char *env_prefix;
  /* The file layer: the row that names the file (its last value in argv,
   * else its variable), the reader and the file's section. NULL: none. */
  const char *file_row;
  dr_flags_file_fn read_file;
  const char *file_section;
  /* --help: the text before the rows, and what comes after them (NULL:
   * nothing). */
  const char *usage;
  void (*usage_tail)(FILE *f);
};

/* What a parse found besides the values. */
typedef struct {
  uint64_t given;   /* bit i: rows[i] was set by some layer */
  char **prog_argv; /* DR_FLAGS_PROGRAM: the program and its arguments,
                       borrowed from argv; NULL when there is none */
  int prog_argc;
} dr_flags_result_t;

/* Parses argv (argv[0] is the program's own name) and, as spec says, the
 * environment envp (a NULL-terminated "NAME=value" array; getenv() is not
 * used) and the config file into dst, which the caller has filled with
 * the defaults. Returns 0; 1 when --help or --version was printed (exit
 * 0); DR_EBADARG with a one-line message in err (exit 2); or -ENOMEM.
 * err may be NULL. The values of argv are applied after the other layers,
 * so that they win, except in a program without any other layer: there
 * each is applied as it is read, so that the first mistake in argv is the
 * one reported. */
int dr_flags_parse(const dr_flags_t *spec, void *dst, int argc, char **argv,
                   char **envp, dr_flags_result_t *res, char *err,
                   size_t err_len);

/* The row named name[0..len) with dashes or underscores; case-insensitive
 * when nocase. NULL when there is none. */
const dr_flag_t *dr_flags_find(const dr_flags_t *spec, const char *name,
                               size_t len, int nocase);

/* Whether the row called name was set by some layer of the parse. */
int dr_flags_given(const dr_flags_t *spec, uint64_t given, const char *name);

/* Applies one value of any layer through row's setter, and records in
 * *given that the row was set. */
int dr_flags_apply(const dr_flags_t *spec, void *dst, const dr_flag_t *row,
                   const char *val, const char *what, uint64_t *given,
                   char *err, size_t err_len);

/* Writes the --help text to f (flags_usage.c), and text word-wrapped into
 * the columns from col to the help's width, the cursor being at col. */
void dr_flags_usage(const dr_flags_t *spec, FILE *f);
void dr_flags_wrap(FILE *f, const char *text, int col);

/* ---- for setters -------------------------------------------------------- */

/* Generic setters of the field at row->off: a string copied into a char *
 * (free it with the options; an empty one is refused), a switch into an
 * int (1/0/true/false/yes/no), seconds (0 to 86400, fractions allowed)
 * into a uint32_t of milliseconds. */
int dr_flag_set_str(void *dst, const dr_flag_t *row, const char *val,
                    const char *what, char *err, size_t err_len);
int dr_flag_set_bool(void *dst, const dr_flag_t *row, const char *val,
                     const char *what, char *err, size_t err_len);
int dr_flag_set_seconds(void *dst, const dr_flag_t *row, const char *val,
                        const char *what, char *err, size_t err_len);

/* "1", "0", "true", "false", "yes", "no" (any case). 0 or DR_EBADARG. */
int dr_flags_parse_bool(const char *s, int *out);

/* Formats into err (when there is room) and returns DR_EBADARG. */
int dr_flags_fail(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes "WHAT 'VALUE': REASON" (REASON from fmt, the value quoted) and
 * returns DR_EBADARG. */
int dr_flags_fail_value(char *err, size_t err_len, const char *what,
                        const char *val, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Writes "out of memory while reading the options" and returns -ENOMEM. */
int dr_flags_oom(char *err, size_t err_len);

/* A value as it may appear in a one-line message: non-printable bytes as
 * \xNN, cut after DR_FLAGS_QUOTE_MAX bytes with "...". Returns out. */
#define DR_FLAGS_QUOTE_MAX 100
#define DR_FLAGS_QUOTE_LEN (DR_FLAGS_QUOTE_MAX * 4 + 4)
char *dr_flags_quote(const char *v, char out[DR_FLAGS_QUOTE_LEN]);

/* Replaces *slot with a copy of s (NULL clears it). 0 or -ENOMEM. */
int dr_flags_replace_str(char **slot, const char *s, char *err, size_t err_len);

#endif /* DR_FLAGS_H */
