/* `ddprun diagnose`: reads every rank's trace of a data-parallel job and
 * says why it is slow, with numbers, and which bucket size to use (the
 * analysis: diag_analyze.h; the reports: diag_report.h). */
#ifndef DR_DIAG_CMD_H
#define DR_DIAG_CMD_H

/* argv[0] is "diagnose". Reads the traces through dr_dg_read, prints the
 * report (or JSON) on stdout, progress and errors on stderr. Returns the
 * exit status: 0, or 2 for bad input (a bad option, no trace that can be
 * read, a failed --merge). */
int dr_diagnose_main(int argc, char **argv);

#endif /* DR_DIAG_CMD_H */
