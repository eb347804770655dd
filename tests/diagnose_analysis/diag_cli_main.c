/* `ddprun diagnose` alone, as ddprun dispatches it (argv[0] "diagnose"),
 * for its command-line test. */
#include "diag_cmd.h"

int main(int argc, char **argv) {
  return dr_diagnose_main(argc - 1, argv + 1);
}
