/* Internals of src/comm shared between its files: the collective watchdog
 * and its flight recorder (watchdog.c), used by the communicator (comm.c).
 *
 * The recorder keeps the last `recorder_size` collectives of this rank in a
 * ring. The communicator calls begin() when it issues a collective, block()
 * when the rank starts blocking on a non-blocking one (wait), and end()
 * when it completed. The watchdog thread wakes a few times per timeout and
 * checks how long the rank has been blocked; past the timeout it reports
 * and ends the process (the only place in weft's library that does: a
 * blocked MPI call cannot be returned from).
 */
#ifndef WEFT_COMM_IMPL_H
#define WEFT_COMM_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "weft/comm.h"

typedef struct wf_watchdog wf_watchdog;

/* Starts the watchdog thread unless both timeouts are <= 0. */
wf_status wf__comm_watchdog_create(wf_watchdog **out, const wf_comm_options *o, int rank, int world);
void wf__comm_watchdog_destroy(wf_watchdog *w); /* accepts NULL; stops the thread */

/* On a timeout, just before the process exits, the watchdog's thread calls
 * fn(ctx, msg, cap) (the backend's abort_async: NCCL's ncclCommAbort) and
 * logs what it wrote into msg. */
typedef void (*wf__comm_abort_fn)(void *ctx, char *msg, size_t cap);
void wf__comm_watchdog_set_abort(wf_watchdog *w, wf__comm_abort_fn fn, void *ctx);

void wf__comm_watchdog_set_step(wf_watchdog *w, int64_t step);
int64_t wf__comm_watchdog_step(wf_watchdog *w);

/* Records a collective of `kind` ("all_reduce") named `tag` (may be NULL)
 * moving `bytes` bytes; with `blocking` the rank blocks in it from now on.
 * Returns its sequence number (from 1). */
uint64_t wf__comm_watchdog_begin(wf_watchdog *w, const char *kind, const char *tag, size_t bytes,
                           int blocking);
/* The rank starts blocking on collective `seq` (a wait). */
void wf__comm_watchdog_block(wf_watchdog *w, uint64_t seq);
/* Collective `seq` completed (ok) or failed; the rank no longer blocks. */
void wf__comm_watchdog_end(wf_watchdog *w, uint64_t seq, int ok);

size_t wf__comm_watchdog_dump(wf_watchdog *w, char *out, size_t cap);
uint64_t wf__comm_watchdog_completed(wf_watchdog *w);

#endif
