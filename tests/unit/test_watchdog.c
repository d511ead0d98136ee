/* test_watchdog.c — the watchdog's verdict (src/core/watchdog.h, watchdog_limit), pure: which
 * waits it judges in which phase and against what. The script tests (faults.sh) run the thread
 * itself: a stalled rank stopped, a long first step and a slow start-up not. Final line:
 * "N passed, M failed". */
#include "core/watchdog.h"

#include "harness.h"

int main(void) {
    const double none[WATCHDOG_NPHASES] = {0};
    double after[WATCHDOG_NPHASES] = {0};
    after[WATCHDOG_STARTUP] = 3.7; /* a start-up of 3.7 s, the first step, then a step of 0.5 s */
    after[WATCHDOG_STEP] = 0.5;

    /* start-up and the first step: computation is never judged, MPI waits get the unmeasured
     * allowance (a peer allocating or loading), never the step floor */
    for (int mpi = 0; mpi < 2; mpi++) {
        double l = watchdog_limit(WATCHDOG_STARTUP, mpi, 2, 0, none);
        CHECK(mpi ? l == WATCHDOG_UNMEASURED_S : l < 0, "start-up, mpi %d: limit %g", mpi, l);
        l = watchdog_limit(WATCHDOG_STEP, mpi, 2, 0, none);
        CHECK(mpi ? l == WATCHDOG_UNMEASURED_S : l < 0, "first step, mpi %d: limit %g", mpi, l);
    }
    /* a floor above the allowance wins */
    CHECK(watchdog_limit(WATCHDOG_STARTUP, 1, 3600, 0, none) == 3600, "floor 3600 at start-up");
    /* the second step: every wait judged against max(floor, 10 x the first step) */
    CHECK(watchdog_limit(WATCHDOG_STEP, 0, 2, 0.8, none) == 8, "second step: 10 x the first");
    CHECK(watchdog_limit(WATCHDOG_STEP, 1, 30, 0.8, none) == 30, "second step: the floor 30 s");
    /* later steps: against max(floor, 10 x the longest step after the first), however long the
     * first (its lazy MPI connections and page faults: 2.5 s against later steps of 0.1 s made a
     * lost link wait 25 s under a floor of 3 s) */
    CHECK(watchdog_limit(WATCHDOG_STEP, 0, 2, 2.5, after) == 5, "step, computation: 10 x 0.5 s");
    CHECK(watchdog_limit(WATCHDOG_STEP, 1, 2, 2.5, after) == 5, "step, mpi: 10 x 0.5 s");
    CHECK(watchdog_limit(WATCHDOG_STEP, 1, 30, 2.5, after) == 30, "step, mpi: the floor 30 s");
    double quick[WATCHDOG_NPHASES] = {0};
    quick[WATCHDOG_STEP] = 0.1;
    CHECK(watchdog_limit(WATCHDOG_STEP, 1, 3, 2.5, quick) == 3, "a long first step: the floor");
    /* outside steps the first step still counts: a checkpoint's wait may hold a peer's first
     * step */
    CHECK(watchdog_limit(WATCHDOG_VALIDATION, 1, 3, 2.5, quick) == WATCHDOG_UNMEASURED_S,
          "first validation's wait: the allowance");
    quick[WATCHDOG_VALIDATION] = 0.01;
    CHECK(watchdog_limit(WATCHDOG_VALIDATION, 1, 3, 2.5, quick) == 25,
          "later validation's wait: 10 x the first step");
    /* checkpoints and validation: computation and I/O not judged; the first MPI wait gets the
     * allowance, later ones 10 x their own longest run (a checkpoint of 40 s: 400 s) */
    CHECK(watchdog_limit(WATCHDOG_CHECKPOINT, 0, 2, 0.5, after) < 0, "checkpoint I/O not judged");
    CHECK(watchdog_limit(WATCHDOG_CHECKPOINT, 1, 2, 0.5, after) == WATCHDOG_UNMEASURED_S,
          "first checkpoint's wait: the allowance");
    after[WATCHDOG_CHECKPOINT] = 40;
    CHECK(watchdog_limit(WATCHDOG_CHECKPOINT, 1, 2, 0.5, after) == 400,
          "later checkpoint: 10 x 40 s");
    CHECK(watchdog_limit(WATCHDOG_VALIDATION, 0, 2, 0.5, after) < 0, "validation computation");
    CHECK(watchdog_limit(WATCHDOG_END, 1, 2, 0.5, after) == WATCHDOG_UNMEASURED_S,
          "the end's wait");
    /* a step of 100 s makes every MPI wait at least 1000 s */
    after[WATCHDOG_STEP] = 100;
    CHECK(watchdog_limit(WATCHDOG_CHECKPOINT, 1, 2, 0.5, after) == 1000,
          "checkpoint after long steps");
    return harness_finish("test_watchdog");
}
