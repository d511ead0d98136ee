/* comm_int.h — private to src/comm: the checked MPI call, the polled wait and the statistics
 * that the module's files share (comm.h is the public contract). */
#ifndef UP_COMM_INT_H
#define UP_COMM_INT_H

#include "comm/comm.h"
#include "core/check.h"
#include "core/watchdog.h"

#include <limits.h>

/* ---- errors.c ---- */

/* One line for a failed MPI call: the phase and step (the watchdog's), the routine, the function
 * that called it, MPI's error class and the last line of its error stack (at run time a peer
 * that died or cannot be reached: a lost node, a killed rank). Stops every rank. */
UP_NORETURN void comm_mpi_failed(const char *file, int line, const char *func, const char *call,
                                 int rc);
/* Gives core/check.h the stops that reach every rank (MPI_Abort, MPI_Finalize). */
void comm_install_stop_hooks(void);

/* Stops every rank with one line when an MPI call fails; the watchdog knows which call the rank
 * is in (func: the function that called it). */
#define MPI_CALL_IN(func, call)                                                                    \
    do {                                                                                           \
        watchdog_enter(func, #call);                                                               \
        int rc_ = (call);                                                                          \
        watchdog_leave();                                                                          \
        if (rc_ != MPI_SUCCESS) comm_mpi_failed(__FILE__, __LINE__, func, #call, rc_);             \
    } while (0)
#define MPI_CALL(call) MPI_CALL_IN(__func__, call)

/* ---- liveness.c ---- */

/* The groups a wait runs over, as world ranks (no MPI call needed to list them). */
typedef enum { GROUP_WORLD, GROUP_CP } comm_group;

/* Posts one receive per peer on a duplicate of world, for the probes of a rank whose wait passed
 * the watchdog's limit; comm_probes_free cancels them and frees the duplicate. */
void comm_probes_post(comm_ctx *c);
void comm_probes_free(comm_ctx *c);
/* Completes the n requests of a wait on group g by testing them in a loop: MPI_Wait would hold
 * the main thread inside MPI, where nothing could find out which peer is missing. Past the
 * watchdog's limit the wait stops the job naming the peers that do not answer. func: the calling
 * function, routine: the MPI routine that started the requests (both named in the messages). */
void comm_wait_polled(comm_ctx *c, comm_group g, int n, MPI_Request *req, const char *func,
                      const char *routine);

/* ---- shared by the collectives ---- */

/* Counts one call of kind k begun at t0 (MPI_Wtime) that sent bytes. */
static inline void comm_count(comm_ctx *c, comm_kind k, double t0, double bytes) {
    c->stats[k].seconds += MPI_Wtime() - t0;
    c->stats[k].bytes += bytes;
    c->stats[k].calls++;
}

/* The MPI type that moves an element of dt: its bytes as one unit of their size (a bf16 as its
 * 16 bits). */
static inline MPI_Datatype comm_mpi_type(mem_dtype dt) {
    size_t size = mem_dtype_size(dt);
    UP_CHECK(size == 2 || size == 4, "comm: no MPI type moves elements of %zu bytes", size);
    return size == 2 ? MPI_UINT16_T : MPI_FLOAT;
}

#endif
