/* Internals shared by the files of src/obs: JSON number formatting (into a
 * core wf_buf) and small facts about the machine. Not public. */
#ifndef WEFT_OBS_IMPL_H
#define WEFT_OBS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "weft/buf.h"
#include "weft/status.h"

/* Appends the shortest decimal that reads back as exactly `v` (finite). */
void wf__obs_buf_json_num(wf_buf *b, double v);

/* The CPU's model name from /proc/cpuinfo ("unknown CPU" if absent). */
void wf__obs_cpu_model(char *buf, size_t size);

/* Reads a whole small file (e.g. under /proc, whose size stat does not
 * know) into a NUL-terminated malloc'd string; NULL if it cannot. */
char *wf__obs_read_text(const char *path);

/* Current Unix time in seconds. */
double wf__obs_unix_now(void);

#endif
