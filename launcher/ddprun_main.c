/* ddprun: the launcher. This version carries the rendezvous server only;
 * the per-node agent that spawns workers is not built yet, and ddprun says
 * so instead of pretending to run a job. */
#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: ddprun [options] PROGRAM [ARGS...]\n"
    "\n"
    "Launches and supervises a data-parallel job (torchrun-compatible).\n"
    "The per-node agent is not built in this version: use ddprun-rdzv for\n"
    "the rendezvous server and key-value store.\n"
    "\n"
    "  -h, --help     show this help\n"
    "  --version      print the version\n";

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      fputs(usage, stdout);
      return 0;
    }
    if (strcmp(argv[i], "--version") == 0) {
      printf("ddprun %s\n", DDPRUN_VERSION);
      return 0;
    }
  }
  fprintf(stderr, "ddprun: launching workers is not built yet in this "
                  "version; the rendezvous server is ddprun-rdzv (see "
                  "ddprun-rdzv --help)\n");
  return 2;
}
