/* watchdog.c — the progress watchdog (see watchdog.h). */
#include "core/watchdog.h"

#include "core/check.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_t g_thread;
static atomic_int g_running;
static double g_floor;
static _Atomic(const char *) g_where, g_what; /* NULL: computing */
static _Atomic double g_mark, g_longest;       /* time of the last mark; longest step */
static atomic_long g_step;                     /* steps finished */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void watchdog_enter(const char *where, const char *what) {
    atomic_store(&g_where, where);
    atomic_store(&g_what, what);
    atomic_store(&g_mark, now_s());
}

void watchdog_leave(void) {
    atomic_store(&g_where, NULL);
    atomic_store(&g_mark, now_s());
}

void watchdog_tick(void) {
    if (atomic_load_explicit(&g_running, memory_order_relaxed) && !atomic_load(&g_where))
        atomic_store(&g_mark, now_s());
}

void watchdog_step(long step, double step_s) {
    if (step_s > atomic_load(&g_longest)) atomic_store(&g_longest, step_s);
    atomic_store(&g_step, step);
    atomic_store(&g_mark, now_s());
}

static void *watch(void *arg) {
    (void)arg;
    while (atomic_load(&g_running)) {
        usleep(200000);
        double longest = atomic_load(&g_longest), limit = 10.0 * longest;
        if (limit < g_floor) limit = g_floor;
        double idle = now_s() - atomic_load(&g_mark);
        if (idle <= limit) continue;
        const char *where = atomic_load(&g_where), *what = atomic_load(&g_what);
        char in[160];
        if (where) { /* the MPI routine: the call's text up to its '(' */
            size_t n = strcspn(what, "(");
            snprintf(in, sizeof in, "%s (%.*s)", where, (int)(n < 60 ? n : 60), what);
        } else {
            snprintf(in, sizeof in, "computation");
        }
        char msg[512];
        int len = snprintf(msg, sizeof msg,
                           "upipe: error (rank %d): watchdog: step %ld has waited %.1f s in %s, "
                           "the longest step so far took %.2f s: a rank is stalled or a collective "
                           "hangs; stopping the job (--watchdog sets the floor, now %.0f s)\n",
                           up_rank(), atomic_load(&g_step) + 1, idle, in, longest, g_floor);
        if (write(2, msg, (size_t)len) < 0) { /* nothing more to do */
        }
        up_run_on_stop(); /* the trace so far, closed (its writer takes no lock) */
        _exit(1);
    }
    return NULL;
}

void watchdog_start(double floor_s) {
    if (floor_s <= 0 || atomic_load(&g_running)) return;
    g_floor = floor_s;
    atomic_store(&g_mark, now_s());
    atomic_store(&g_running, 1);
    UP_CHECK(pthread_create(&g_thread, NULL, watch, NULL) == 0, "cannot start the watchdog");
}

void watchdog_stop(void) {
    if (!atomic_load(&g_running)) return;
    atomic_store(&g_running, 0);
    pthread_join(g_thread, NULL);
}
