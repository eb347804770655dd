/* The config-file layer of flags.h, for a program that has one: an INI
 * file of `name = value` lines with the names of the program's flags
 * (dashes or underscores, any case), outside any section or in the
 * program's own (dr_flags_t.file_section); lines starting with '#' or ';'
 * are comments. Any other key or section, or a line that is neither, is
 * an error naming the file and the line. Kept apart from flags.c so that
 * a program without a file does not link the INI reader. */
#ifndef DR_FLAGS_INI_H
#define DR_FLAGS_INI_H

#include "flags.h"

/* A dr_flags_file_fn: reads path into dst. 0, DR_EBADARG with the message
 * in err ("cfg.ini:4: unknown key 'nprocs'; see ddprun --help"), or
 * -ENOMEM. A FIFO or other non-regular file is refused without blocking. */
int dr_flags_ini_read(const dr_flags_t *spec, void *dst, const char *path,
                      uint64_t *given, char *err, size_t err_len);

#endif /* DR_FLAGS_INI_H */
