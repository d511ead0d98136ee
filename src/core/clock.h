/* clock.h — wall-clock seconds for timings (CLOCK_MONOTONIC: never steps back). */
#ifndef UP_CLOCK_H
#define UP_CLOCK_H

#include <time.h>

/* Seconds since an arbitrary origin, for differences within one process. */
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
