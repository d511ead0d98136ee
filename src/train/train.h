/* train.h — the `upipe train` command: the training loop (flags in options.h, the memory plan
 * and report in report.h). */
#ifndef UP_TRAIN_H
#define UP_TRAIN_H

#include "train/options.h"

/* Runs the training job. Collective over MPI_COMM_WORLD (initialises and finalises MPI).
 * Returns the exit code; a failure stops every rank with a message. */
int train_main(int argc, char **argv);

#endif
