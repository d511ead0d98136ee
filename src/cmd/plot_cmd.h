/* plot_cmd.h — the `upipe plot` command: a training log's loss curves as an SVG picture. */
#ifndef UP_PLOT_CMD_H
#define UP_PLOT_CMD_H

/* Main of `upipe plot ...` (argv[0] == "plot"). 0 on success or after --help; a bad flag or file
 * stops the process with a message (exit status 1). No MPI. */
int plot_main(int argc, char **argv);

#endif
