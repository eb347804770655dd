/* train: the data-parallel worker. The training loop is not part of this
 * version yet; the binary exists so that the layout and install are real. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: train [options]\n"
           "The data-parallel training loop is not built in this version.\n");
    return 0;
  }
  fprintf(stderr, "train: the training loop is not built in this version; "
                  "run ddprun-rdzv for the rendezvous server\n");
  return 2;
}
