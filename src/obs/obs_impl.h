/* Internals shared by the files of src/obs: a growable byte buffer, JSON
 * number formatting, and small facts about the machine. Not public. */
#ifndef WEFT_OBS_IMPL_H
#define WEFT_OBS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "weft/status.h"

/* A growable byte buffer. A failed append sets `failed` and drops the
 * bytes; the writer reports it once, when it writes the buffer out. */
typedef struct {
    char *data;
    size_t len, cap;
    int failed;
} obs_buf;

void obs_buf_free(obs_buf *b);
void obs_buf_append(obs_buf *b, const void *data, size_t len);
void obs_buf_printf(obs_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends a JSON string literal (quotes, escapes). */
void obs_buf_json_str(obs_buf *b, const char *s);
/* Appends the shortest decimal that reads back as exactly `v` (finite). */
void obs_buf_json_num(obs_buf *b, double v);

/* The CPU's model name from /proc/cpuinfo ("unknown CPU" if absent). */
void obs_cpu_model(char *buf, size_t size);

/* Reads a whole small file (e.g. under /proc, whose size stat does not
 * know) into a NUL-terminated malloc'd string; NULL if it cannot. */
char *obs_read_text(const char *path);

/* Current Unix time in seconds. */
double obs_unix_now(void);

#endif
