/* watchdog.c — the progress watchdog (see watchdog.h). */
#include "core/watchdog.h"

#include "core/check.h"
#include "core/clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_t g_thread;
static atomic_int g_running;
static double g_floor;
static _Atomic(const char *) g_where, g_what;      /* NULL: computing */
static _Atomic double g_mark;                      /* time of the last mark */
static atomic_int g_phase;                         /* watchdog_phase */
static atomic_long g_step;                         /* the step the phase belongs to */
static double g_phase_t0;                          /* main thread only: when the phase began */
static _Atomic double g_longest[WATCHDOG_NPHASES]; /* [WATCHDOG_STEP]: after the first */
static _Atomic double g_first_step;                /* this process's first step, 0: not done */
static atomic_int g_polled;                        /* the main thread polls its wait */
static atomic_int g_device;                        /* the wait is for a GPU */
static _Atomic double g_again; /* watchdog_wait_again's floor for the polled wait, 0: none */
/* A polled wait past its limit: the mark of the wait (a wait entered later is not overdue), the
 * seconds it had waited and its limit when the thread saw it */
static _Atomic double g_over_mark, g_over_idle, g_over_limit;

static double max2(double a, double b) {
    return a > b ? a : b;
}

double watchdog_limit(watchdog_phase p, int in_mpi, double floor_s, double first_step,
                      const double longest[WATCHDOG_NPHASES]) {
    double later = longest[WATCHDOG_STEP];
    /* a step is judged by the steps after the first once there is one: the first pays the
     * one-time costs (lazy MPI connections, first page faults); the second by the first */
    if (p == WATCHDOG_STEP && later > 0) return max2(floor_s, 10.0 * later);
    if (p == WATCHDOG_STEP && first_step > 0) return max2(floor_s, 10.0 * first_step);
    if (!in_mpi) return -1; /* computation and I/O outside measured steps: not judged */
    /* elsewhere the longest step of all: a checkpoint's or validation's wait may hold a peer's
     * first-step costs */
    double step = max2(first_step, later);
    double own = longest[p] > 0 ? 10.0 * longest[p] : WATCHDOG_UNMEASURED_S;
    return max2(max2(floor_s, 10.0 * step), own);
}

void watchdog_enter(const char *where, const char *what) {
    atomic_store(&g_where, where);
    atomic_store(&g_what, what);
    atomic_store(&g_mark, now_s());
}

void watchdog_enter_device(const char *what) {
    atomic_store(&g_device, 1);
    watchdog_enter("the GPU", what);
}

void watchdog_leave(void) {
    atomic_store(&g_where, NULL);
    atomic_store(&g_polled, 0);
    atomic_store(&g_device, 0);
    atomic_store(&g_mark, now_s());
}

void watchdog_enter_polled(const char *where, const char *what) {
    atomic_store(&g_polled, 1);
    atomic_store(&g_again, 0.0);
    watchdog_enter(where, what);
}

void watchdog_wait_again(double at_least) {
    atomic_store(&g_again, at_least);
    atomic_store(&g_mark, now_s()); /* after the floor: the new mark is never judged without it */
}

int watchdog_overdue(double *idle, double *limit) {
    double over = atomic_load_explicit(&g_over_mark, memory_order_acquire);
    if (over == 0 || over != atomic_load_explicit(&g_mark, memory_order_relaxed)) return 0;
    *idle = atomic_load(&g_over_idle);
    *limit = atomic_load(&g_over_limit);
    return 1;
}

void watchdog_tick(void) {
    if (atomic_load_explicit(&g_running, memory_order_relaxed) && !atomic_load(&g_where))
        atomic_store(&g_mark, now_s());
}

void watchdog_phase_enter(watchdog_phase p, long step) {
    if (!atomic_load(&g_running)) return;
    double t = now_s();
    int prev = atomic_load(&g_phase);
    if (prev == WATCHDOG_STEP && atomic_load(&g_first_step) == 0)
        atomic_store(&g_first_step, t - g_phase_t0);
    else if (t - g_phase_t0 > atomic_load(&g_longest[prev]))
        atomic_store(&g_longest[prev], t - g_phase_t0);
    g_phase_t0 = t;
    atomic_store(&g_step, step);
    atomic_store(&g_phase, (int)p);
    atomic_store(&g_mark, t);
}

/* "step 5", "start-up", "the checkpoint after step 4", ... for the message. */
static void phase_name(char *buf, size_t len, int p, long step) {
    switch (p) {
    case WATCHDOG_STARTUP:
        snprintf(buf, len, "start-up");
        break;
    case WATCHDOG_STEP:
        snprintf(buf, len, "step %ld", step + 1);
        break;
    case WATCHDOG_VALIDATION:
        snprintf(buf, len, "the validation after step %ld", step + 1);
        break;
    case WATCHDOG_CHECKPOINT:
        snprintf(buf, len, "the checkpoint after step %ld", step + 1);
        break;
    default:
        snprintf(buf, len, "the end of the run");
        break;
    }
}

double watchdog_floor(void) {
    return atomic_load(&g_running) ? g_floor : 0;
}

void watchdog_phase_describe(char *buf, size_t len) {
    if (len) buf[0] = 0;
    if (atomic_load(&g_running)) phase_name(buf, len, atomic_load(&g_phase), atomic_load(&g_step));
}

static void *watch(void *arg) {
    (void)arg;
    while (atomic_load(&g_running)) {
        usleep(200000);
        /* the mark first: a phase entered after it was read cannot make an old mark look stale */
        double mark = atomic_load(&g_mark);
        int p = atomic_load(&g_phase);
        const char *where = atomic_load(&g_where), *what = atomic_load(&g_what);
        int polled = atomic_load(&g_polled), device = atomic_load(&g_device);
        double again = atomic_load(&g_again);
        double longest[WATCHDOG_NPHASES], first = atomic_load(&g_first_step);
        for (int i = 0; i < WATCHDOG_NPHASES; i++)
            longest[i] = atomic_load(&g_longest[i]);
        double limit =
            watchdog_limit((watchdog_phase)p, where != NULL && !device, g_floor, first, longest);
        if (where && polled && again > limit) limit = again; /* reset with each polled wait */
        double idle = now_s() - mark;
        if (limit < 0 || idle <= limit || mark != atomic_load(&g_mark)) continue;
        if (where && polled && idle <= limit + WATCHDOG_POLL_GRACE_S) {
            /* the main thread finds out whom it waits for and stops the job itself */
            atomic_store(&g_over_idle, idle);
            atomic_store(&g_over_limit, limit);
            atomic_store_explicit(&g_over_mark, mark, memory_order_release);
            continue;
        }
        char in[160], ph[96];
        if (where && device) {
            snprintf(in, sizeof in, "%s (waiting for %.100s)", where, what);
        } else if (where) { /* the MPI routine: the call's text up to its '(' */
            size_t n = strcspn(what, "(");
            snprintf(in, sizeof in, "%s (%.*s)", where, (int)(n < 60 ? n : 60), what);
        } else {
            snprintf(in, sizeof in, "computation");
        }
        phase_name(ph, sizeof ph, p, atomic_load(&g_step));
        char msg[640];
        int len = snprintf(msg, sizeof msg,
                           "upipe: error (rank %d): watchdog: %s has waited %.1f s in %s (limit "
                           "%.1f s; the longest step so far took %.2f s): %s; stopping the job "
                           "(--watchdog sets the floor, now %g s)\n",
                           up_rank(), ph, idle, in, limit, max2(first, longest[WATCHDOG_STEP]),
                           device ? "a GPU kernel or copy hangs"
                                  : "a rank is stalled or a collective hangs",
                           g_floor);
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
    g_phase_t0 = now_s();
    atomic_store(&g_phase, WATCHDOG_STARTUP);
    atomic_store(&g_mark, g_phase_t0);
    atomic_store(&g_running, 1);
    UP_CHECK(pthread_create(&g_thread, NULL, watch, NULL) == 0, "cannot start the watchdog");
}

void watchdog_stop(void) {
    if (!atomic_load(&g_running)) return;
    atomic_store(&g_running, 0);
    pthread_join(g_thread, NULL);
}
