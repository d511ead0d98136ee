/* export_cmd.h — the `upipe export` command: a checkpoint as an HF model folder. */
#ifndef UP_EXPORT_CMD_H
#define UP_EXPORT_CMD_H

/* Main of `upipe export ...` (argv[0] == "export"). 0 on success or after --help; a bad flag or
 * file stops the process with a message (exit status 1). No MPI. */
int export_main(int argc, char **argv);

#endif
