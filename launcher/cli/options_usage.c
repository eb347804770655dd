/* What ddprun's --help says around the rows of options_table.c (which
 * launcher/flags_usage.c prints): the usage lines before them; the rules
 * for the program, the environment, the config file and schedulers, and
 * the exit codes after them. */
#include <stdio.h>
#include <string.h>

#include "exit_codes.h"
#include "options_internal.h"

const char dr__opt_usage_head[] =
    "usage: ddprun [options] PROGRAM [ARGS...]\n"
    "       ddprun plan [options]   (bucket planner; ddprun plan --help)\n"
    "       ddprun diagnose [options] TRACE... | DIR\n"
    "                               (why a job is slow, from its traces;\n"
    "                               ddprun diagnose --help)\n"
    "       ddprun status --rdzv-endpoint HOST:PORT --rdzv-id ID "
    "[--stacks]\n"
    "                               (a running job: its nodes and ranks,\n"
    "                               their steps; ddprun status --help)\n"
    "\n"
    "Starts PROGRAM once per local rank on this node, joins the other "
    "nodes\n"
    "of the job, and supervises and restarts the workers, as torchrun "
    "does.\n"
    "Options are also spelled with underscores (--nproc_per_node) and "
    "take\n"
    "their value as --name VALUE or --name=VALUE.\n";

static const char help_tail[] =
    "\n"
    "The program:\n"
    "  The first argument that does not start with '-', or the one after "
    "--,\n"
    "  is PROGRAM; every argument after it goes to PROGRAM unchanged, even "
    "one\n"
    "  that starts with '-'. A PROGRAM ending in .py runs as python3 -u "
    "PROGRAM\n"
    "  ($PYTHON_EXEC instead of python3 when set); -m runs python3 -u -m\n"
    "  PROGRAM; --no-python, or any other PROGRAM, is executed directly.\n"
    "\n"
    "Environment:\n"
    "  Each option can be set as PET_<NAME>: the name in upper case with "
    "'-'\n"
    "  as '_' (PET_NPROC_PER_NODE=4, PET_RDZV_ENDPOINT=host0, "
    "PET_STANDALONE=1).\n"
    "  Flags take 1/0, true/false or yes/no there. An empty variable is "
    "unset.\n"
    "  The command line overrides the environment, which overrides the "
    "config\n"
    "  file, which overrides the defaults.\n"
    "  DDPRUN_PYTHON_HOOKS=0 keeps ddprun's start-up hook off the workers'\n"
    "  PYTHONPATH (it answers the hang report's requests for PyTorch's\n"
    "  flight recorder in every Python rank).\n"
    "\n"
    "Config file (--config FILE, or PET_CONFIG):\n"
    "  INI lines 'name = value', the names of the options above without "
    "'--'\n"
    "  (dashes or underscores), at the top of the file or in a [ddprun] "
    "section;\n"
    "  lines starting with '#' or ';' are comments; flags take 1/0, "
    "true/false\n"
    "  or yes/no. Any other key or section is an error. For example:\n"
    "      [ddprun]\n"
    "      nnodes = 2\n"
    "      nproc_per_node = 8\n"
    "      rdzv-endpoint = host0:29400\n"
    "      max-restarts = 3\n"
    "\n"
    "Schedulers:\n"
    "  In a Slurm job (SLURM_JOB_ID set, none of --nnodes, --rdzv-endpoint,\n"
    "  --node-rank, --rdzv-backend, --standalone given) ddprun uses\n"
    "  --rdzv-backend slurm and prints one line saying so. In a Kubernetes\n"
    "  Indexed Job, give --rdzv-backend k8s, --nnodes and DDPRUN_K8S_SERVICE\n"
    "  (the headless Service of the Job's pods).\n";

void dr__opt_usage_tail(FILE *f) {
  fputs(help_tail, f);
  /* One table for every part of the job (proto/exit_codes.h). */
  fputs("\nExit status: the root cause's code (128+N for a worker killed by\n"
        "signal N; 2 for bad options), from the workers' table; in brackets\n"
        "what the job does with it:\n", f);
  int n;
  const dr_exit_info_t *t = dr_exit_table(&n);
  for (int i = 0; i < n; i++) {
    char text[1024];
    snprintf(text, sizeof(text), "%s: %s [%s]", t[i].brief, t[i].meaning,
             t[i].policy == DR_EXIT_DONE   ? "the job ends"
             : t[i].policy == DR_EXIT_STOP ? "stops the job, not restarted"
             : t[i].echo ? "restarted; may echo another failure"
                         : "restarted");
    fprintf(f, "  %-4d", t[i].code);
    dr_flags_wrap(f, text, 6);
  }
  fputs("  *   ", f);
  dr_flags_wrap(f, "any other code, or a signal: a crash [restarted]", 6);
}

void dr_options_usage(void) {
  dr_flags_usage(&dr__opt_flags, stdout);
  fflush(stdout);
}
