/* free_ports N: prints N distinct TCP ports that were free on 127.0.0.1,
 * one a line. Slurm's daemons cannot take port 0, so the cluster test
 * binds N sockets to port 0 at once (distinct ports), and releases them
 * just before the daemons bind them: a small race with other programs
 * that bind port 0 meanwhile, which the kernel makes unlikely by handing
 * out ephemeral ports in turn. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int n = argc == 2 ? atoi(argv[1]) : 0;
  if (n < 1 || n > 64) {
    fprintf(stderr, "usage: free_ports N (1-64)\n");
    return 2;
  }
  int fds[64];
  unsigned ports[64];
  for (int i = 0; i < n; i++) {
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fds[i] = socket(AF_INET, SOCK_STREAM, 0);
    if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        getsockname(fds[i], (struct sockaddr *)&sa, &len) != 0) {
      perror("free_ports: socket/bind/getsockname");
      return 1;
    }
    ports[i] = ntohs(sa.sin_port);
  }
  for (int i = 0; i < n; i++) {
    close(fds[i]);
    printf("%u\n", ports[i]);
  }
  return 0;
}
