/* `ddprun status`: asks a job's rendezvous server what the job is doing
 * (STATUS over the protocol, proto/wire.h): its nodes, generation and
 * restarts, and every rank's pid, state, last step and step rate as the
 * agents report them, with the slowest rank named; with --stacks, every
 * rank's stack, collected by the agents. */
#ifndef DR_STATUS_CMD_H
#define DR_STATUS_CMD_H

/* argv[0] is "status". Prints the status (or JSON) on stdout, errors as
 * one line on stderr. Returns the exit status: 0; 2 for bad options or a
 * server that refuses this client (a secret required or wrong, another
 * job's server); 3 when the server cannot be reached or does not answer
 * in time. */
int dr_status_main(int argc, char **argv);

#endif /* DR_STATUS_CMD_H */
