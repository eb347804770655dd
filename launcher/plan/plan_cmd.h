/* `ddprun plan`: the bucket planner as a command (see proto/plan/plan.h). */
#ifndef DR_PLAN_CMD_H
#define DR_PLAN_CMD_H

/* argv[0] is "plan". Prints the table (or JSON) on stdout, errors as one
 * line on stderr. Returns the exit status: 0, or 2 for bad input. */
int dr_plan_main(int argc, char **argv);

#endif /* DR_PLAN_CMD_H */
