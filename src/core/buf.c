/* The byte buffer and the array growth helper (include/weft/buf.h). */
#include "weft/buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void wf_buf_free(wf_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = 0;
}

wf_status wf_buf_reserve(wf_buf *b, size_t extra) {
    if (b->failed) return wf_error(WF_ERR_NOMEM, "out of memory (a buffer failed to grow earlier)");
    if (extra > SIZE_MAX - b->len - 1) {
        b->failed = 1;
        return wf_error(WF_ERR_NOMEM, "a buffer of %zu bytes cannot grow by %zu more", b->len, extra);
    }
    if (b->len + extra + 1 <= b->cap) return WF_OK;
    wf_status s = WF_GROW(b->data, b->cap, b->len + extra + 1, 256);
    if (s != WF_OK) b->failed = 1;
    return s;
}

wf_status wf_buf_append(wf_buf *b, const void *data, size_t len) {
    WF_TRY(wf_buf_reserve(b, len));
    if (len) memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return WF_OK;
}

wf_status wf_buf_puts(wf_buf *b, const char *s) { return wf_buf_append(b, s, strlen(s)); }

wf_status wf_buf_printf(wf_buf *b, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    wf_status s = n < 0 ? wf_error(WF_ERR_INVALID, "bad format \"%s\"", fmt) : wf_buf_reserve(b, (size_t)n);
    if (s == WF_OK) {
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
    return s;
}

size_t wf_grow_cap(size_t cap, size_t need, size_t first) {
    size_t nc = cap ? cap : (first ? first : 1);
    while (nc < need) {
        if (nc > SIZE_MAX / 2) return need;
        nc *= 2;
    }
    return nc;
}

wf_status wf_grow_(void **pp, size_t *cap, size_t need, size_t size, size_t first) {
    if (need <= *cap) return WF_OK;
    size_t nc = wf_grow_cap(*cap, need, first);
    if (size && nc > SIZE_MAX / size)
        return wf_error(WF_ERR_NOMEM, "out of memory: an array of %zu elements of %zu bytes is too large", nc, size);
    void *p = realloc(*pp, nc * size);
    if (!p)
        return wf_error(WF_ERR_NOMEM, "out of memory growing an array to %zu elements of %zu bytes (%.1f MB)", nc,
                        size, (double)nc * (double)size / 1e6);
    *pp = p;
    *cap = nc;
    return WF_OK;
}
