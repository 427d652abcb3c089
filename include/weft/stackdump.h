/* weft: stack dumps of a process that hangs (core). A dump is one text
 * file, DIR/rank-NNNNN.txt (docs/formats/hang-dump.md), written
 * atomically: why it was taken, the rank, the steps completed and how long
 * ago the last one, the sections other modules add (the communicator's
 * collective and flight recorder), and the stack of every thread of the
 * process, symbolized: function, file:line where DWARF has it, module.
 *
 * What triggers one, once wf_stackdump_start runs the dumper:
 *   - wf_stackdump_request from any thread (the trainer's DUMP file, the
 *     collective watchdog before it ends the process);
 *   - SIGQUIT, when asked (opts.sigquit): the process goes on after it;
 *   - silence: no wf_stackdump_progress for opts.silence_s seconds (a rank
 *     stuck outside a collective, in a read that never returns); once per
 *     stall, the next progress re-arms it.
 * The dumper is a thread of its own that takes every dump, so a dump that
 * blocks (its file system hangs too) blocks no one else: requests wait for
 * it only as long as they say.
 *
 * How the stacks are taken: the dumper lists /proc/self/task and sends
 * each other thread a real-time signal (tgkill); its handler records the
 * thread's return addresses with glibc's backtrace() into a slot of a
 * preallocated table and marks it done; the dumper waits for the answers
 * (2 s at most), then symbolizes them with libdw on its own thread.
 * Limits, all reported in the dump rather than hidden:
 *   - a thread that blocks the signal, or sleeps uninterruptibly in the
 *     kernel (state D: a dead NFS server, a failing disk), cannot run the
 *     handler: it is listed with its state, kernel wait channel and system
 *     call from /proc, and its stack is unwound (libdwfl) from the two
 *     registers /proc gives, the stack pointer and the address, which
 *     ends the walk early at a frame found through another register;
 *   - backtrace() is not async-signal-safe by the letter: it unwinds with
 *     libgcc's unwinder, which is loaded at start (not in the handler) but
 *     takes the dynamic linker's lock; a thread interrupted inside
 *     dlopen() would wait for itself, never answer, and be listed as such;
 *   - frames of code without unwind tables (hand-written assembly in some
 *     BLAS kernels) may end a stack early.
 * The handler restarts interrupted system calls (SA_RESTART): a read or a
 * collective the signal interrupts goes on.
 *
 * Process-wide, as signals are: one dumper per process; start and stop
 * belong to one thread. The signal's handler is installed at the first
 * use of any function here and stays.
 */
#ifndef WEFT_STACKDUMP_H
#define WEFT_STACKDUMP_H

#include <stddef.h>
#include <stdint.h>

#include "weft/buf.h"
#include "weft/status.h"

typedef struct {
    const char *dir;       /* required: where rank-NNNNN.txt goes (created at the first dump) */
    int rank, world;       /* name the file and its header (world 1 for one process) */
    int sigquit;           /* 1: SIGQUIT dumps and the process goes on (the old disposition returns at stop) */
    double silence_s;      /* > 0: a dump when no progress came for this long, once per stall; 0: off */
    const char *silence_key; /* the setting of silence_s, named in the reason ("train.hang_dump_s"); may be NULL */
} wf_stackdump_options;

/* Starts the dumper thread (and SIGQUIT's handler). WF_ERR_INVALID if one
 * runs already; the options are copied. */
wf_status wf_stackdump_start(const wf_stackdump_options *opts);
/* Stops it, waiting for a dump in progress, and gives SIGQUIT its old
 * disposition. Safe when none runs. */
void wf_stackdump_stop(void);
/* 1 while a dumper runs. */
int wf_stackdump_running(void);

/* `steps` steps are complete now (the trainer calls it after each step):
 * restarts the silence clock and re-arms its dump. Cheap: one mutex. */
void wf_stackdump_progress(int64_t steps);

/* Has the dumper write a dump now, `reason` (one line or more) at its top,
 * and waits for it at most wait_s seconds. `path` (may be NULL) gets the
 * file written. WF_ERR_INVALID when no dumper runs; WF_ERR_IO when the
 * file could not be written, or the dump was not done in time (it goes on
 * and is logged when done). Any thread but the dumper's own. */
wf_status wf_stackdump_request(const char *reason, double wait_s, char *path, size_t path_size);

/* A section: a module's state in every dump ("== name ==" and the text
 * `fn` appends to `out`, lines ending in '\n'). `fn` runs on the dumper
 * thread while the other threads go on (they are not stopped): it may take
 * its module's locks, which no thread holds for long, and must not wait
 * for another thread. Returns a handle for wf_stackdump_remove_section,
 * 0 when the table (16 sections) is full. `name` is copied. */
typedef void (*wf_stackdump_section_fn)(void *ctx, wf_buf *out);
int wf_stackdump_add_section(const char *name, wf_stackdump_section_fn fn, void *ctx);
/* Removes a section; waits for a dump that is calling it. 0 is ignored. */
void wf_stackdump_remove_section(int handle);

/* The real-time signal the capture sends, or 0 while nothing of this
 * module has run in the process. A thread that blocks every signal (so
 * that the process's handlers run elsewhere) should leave this one open
 * (sigdelset) when it is not 0: else its stack is missing from dumps. Its
 * handler never runs anything but the capture. */
int wf_stackdump_signal(void);

/* The stacks of every thread of the process as text (the "threads" part
 * of a dump), taken from the calling thread, with or without a dumper
 * running. For tests and tools. */
wf_status wf_stackdump_threads(wf_buf *out);

#endif
