/* data_cmd.h — the `upipe data` command: flags, help, and writing a corpus as a shard. */
#ifndef UP_DATA_CMD_H
#define UP_DATA_CMD_H

/* Main of `upipe data ...` (argv[0] == "data"). Returns 0 on success or after --help; a bad flag
 * or a failed write stops the process with a message (up_die, exit status 1). No MPI. */
int data_main(int argc, char **argv);

#endif
