/* weft: one job per output directory.
 *
 * A job that writes into a directory (a training run, `weft prep`, `weft
 * tokenize`) holds DIR/.weft.lock for its whole life. The file says who
 * holds it: host, pid, start time and the command, as one JSON line
 * (docs/formats/dirlock.md). A second job that finds it fails at once with
 * an error naming the holder, before it has written anything.
 *
 * A lock left behind by a job that died is taken over, with a warning:
 * - on the same host, when its pid no longer exists or is a zombie (a
 *   process that ended and that its parent has not reaped);
 * - on another host (a shared filesystem, where the pid cannot be checked),
 *   when its heartbeat, the file's modification time, which a thread of the
 *   holder refreshes every `heartbeat_seconds`, is older than
 *   `stale_seconds`.
 *
 * The lock is made with link(2) from a complete temporary file, which is
 * atomic on local filesystems and NFS alike, so two jobs that start at the
 * same moment cannot both get it, and the file is never seen half-written.
 * It does not protect against a writer that ignores it.
 */
#ifndef WEFT_DIRLOCK_H
#define WEFT_DIRLOCK_H

#include <stddef.h>

#include "weft/status.h"

#define WF_DIRLOCK_FILE ".weft.lock"

typedef struct wf_dirlock wf_dirlock;

typedef struct {
    const char *command;      /* what holds it, for the holder's line ("weft train") */
    const char *what;         /* the directory's role in messages ("run directory") */
    double stale_seconds;     /* another host's lock with an older heartbeat is stale; <= 0: 600 */
    double heartbeat_seconds; /* how often the holder refreshes it; <= 0: stale_seconds / 10 */
} wf_dirlock_opts;

/* Takes DIR's lock (DIR must exist). WF_ERR_INVALID, naming the holder's
 * host, pid, start time and command, when another live job holds it; a
 * stale lock is taken over with a warning that names the job that left it.
 * On success *out holds the lock and a heartbeat thread; release it with
 * wf_dirlock_release. */
wf_status wf_dirlock_acquire(wf_dirlock **out, const char *dir, const wf_dirlock_opts *o);

/* Stops the heartbeat and removes the lock file if it is still this job's
 * (a job whose lock was taken over as stale leaves the new holder's).
 * Accepts NULL. */
void wf_dirlock_release(wf_dirlock *l);

/* The holder recorded in DIR's lock file as one line ("host h, pid 12,
 * started 2026-11-25 02:30:00 UTC, weft train"), written to buf; returns 0,
 * or -1 if there is no readable lock. */
int wf_dirlock_describe(const char *dir, char *buf, size_t size);

#endif
