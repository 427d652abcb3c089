/* weft: growable memory. One byte buffer (wf_buf) and one growth helper for
 * arrays (WF_GROW), so that no module writes its own doubling loop.
 *
 * A buffer that failed to grow remembers it (`failed`): later appends are
 * dropped and return WF_ERR_NOMEM, so that writers which build a whole
 * document before writing it can check once, at the end. Contents are
 * always NUL-terminated (not counted in len) once anything was appended.
 */
#ifndef WEFT_BUF_H
#define WEFT_BUF_H

#include <stddef.h>

#include "weft/buf.h"
#include "weft/status.h"

typedef struct {
    char *data;   /* len bytes, then a NUL; NULL until the first append */
    size_t len, cap;
    int failed;   /* an allocation failed: every later append is dropped */
} wf_buf;

/* Zero-initialise, or wf_buf_free a used one (which leaves it empty). */
void wf_buf_free(wf_buf *b);
/* Room for `extra` more bytes (and the NUL). */
wf_status wf_buf_reserve(wf_buf *b, size_t extra);
wf_status wf_buf_append(wf_buf *b, const void *data, size_t len);
wf_status wf_buf_puts(wf_buf *b, const char *s);
wf_status wf_buf_printf(wf_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Makes room in the array *pp (capacity *cap elements of `size` bytes) for
 * at least `need` elements: the capacity doubles (starting at `first`
 * when it is 0) until it is enough, and the array is reallocated. On
 * failure the array and *cap are left as they were and the message names
 * the sizes. Use WF_GROW, which takes the array itself. */
wf_status wf_grow_(void **pp, size_t *cap, size_t need, size_t size, size_t first);
/* The capacity WF_GROW would choose (for parallel arrays that share one
 * capacity and are reallocated together). */
size_t wf_grow_cap(size_t cap, size_t need, size_t first);
#define WF_GROW(ptr, cap, need, first) wf_grow_((void **)&(ptr), &(cap), (need), sizeof *(ptr), (first))

#endif
