/* eval_cmd.h — the `upipe eval` command: a model's loss, loss by position and recall accuracy
 * on windows of a token shard, forward only (DESIGN.md §10). */
#ifndef UP_EVAL_CMD_H
#define UP_EVAL_CMD_H

/* Main of `upipe eval ...` (argv[0] == "eval"). Collective over MPI_COMM_WORLD (initialises and
 * finalises MPI). 0 on success or after --help; a bad flag or file stops every rank with a
 * message (exit status 1). */
int eval_main(int argc, char **argv);

#endif
