/* TensorBoard event files, written from the format (no TensorFlow, no
 * protobuf library): TFRecord framing with masked CRC-32C around Event
 * protobuf messages encoded by hand. docs/formats/tensorboard.md has the
 * byte layout; tests/py/test_tensorboard.py reads the files back with the
 * tensorboard package's own loader.
 *
 * The messages used (field number, wire type), from TensorFlow's
 * event.proto and summary.proto:
 *   Event   { double wall_time = 1 (fixed64); int64 step = 2 (varint);
 *             string file_version = 3 (bytes); Summary summary = 5 (bytes) }
 *   Summary { repeated Value value = 1 (bytes) }
 *   Value   { string tag = 1 (bytes); float simple_value = 2 (fixed32) }
 *   Event   { SessionLog session_log = 7 (bytes) }, SessionLog { enum
 *             status = 1 (varint), START = 1 }: a restart at that step
 * Only this subset is written; it is what TensorBoard's scalar dashboard
 * reads (simple_value is converted to its scalar plugin on load).
 */
#include "weft/metrics.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "obs/obs_impl.h"
#include "weft/fileio.h"

/* ------------------------------------------------------------- CRC-32C
 * Reflected Castagnoli polynomial 0x82F63B78, one byte at a time. Each
 * byte's table entry is computed on the spot (8 shifts) instead of from a
 * table: no shared state between threads, and the framing covers a few
 * hundred bytes a step. */

static uint32_t crc_entry(uint32_t b) {
    uint32_t c = b;
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    return c;
}

uint32_t wf_crc32c(uint32_t crc, const void *data, size_t len) {
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < len; i++) crc = (crc >> 8) ^ crc_entry((crc ^ p[i]) & 0xFF);
    return ~crc;
}

uint32_t wf_crc32c_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ------------------------------------------------------------ protobuf */

static void pb_varint(wf_buf *b, uint64_t v) {
    unsigned char tmp[10];
    int n = 0;
    do {
        tmp[n] = (unsigned char)(v & 0x7F);
        v >>= 7;
        if (v) tmp[n] |= 0x80;
        n++;
    } while (v);
    wf_buf_append(b, tmp, (size_t)n);
}

static void pb_key(wf_buf *b, int field, int wire) {
    pb_varint(b, ((uint64_t)field << 3) | (uint64_t)wire);
}

static void put_le(unsigned char *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void pb_double(wf_buf *b, int field, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    unsigned char tmp[8];
    put_le(tmp, u, 8);
    pb_key(b, field, 1);
    wf_buf_append(b, tmp, 8);
}

static void pb_float(wf_buf *b, int field, float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    unsigned char tmp[4];
    put_le(tmp, u, 4);
    pb_key(b, field, 5);
    wf_buf_append(b, tmp, 4);
}

static void pb_bytes(wf_buf *b, int field, const void *data, size_t len) {
    pb_key(b, field, 2);
    pb_varint(b, len);
    wf_buf_append(b, data, len);
}

/* ------------------------------------------------------------- writer */

struct wf_tb_writer {
    FILE *fp;
    char *path;
    wf_buf out;      /* framed records not yet written */
    wf_buf summary;  /* Summary message of the open event */
    int open_event;
    int64_t step;
    double wall_time;
    double flush_every_s, last_flush;
};

/* Appends one TFRecord: length, masked CRC of the length, data, masked CRC
 * of the data; integers little-endian. */
static void frame_record(wf_buf *out, const wf_buf *data) {
    unsigned char head[12], tail[4];
    put_le(head, (uint64_t)data->len, 8);
    put_le(head + 8, wf_crc32c_mask(wf_crc32c(0, head, 8)), 4);
    put_le(tail, wf_crc32c_mask(wf_crc32c(0, data->data, data->len)), 4);
    wf_buf_append(out, head, sizeof head);
    wf_buf_append(out, data->data, data->len);
    wf_buf_append(out, tail, sizeof tail);
}

/* Encodes the open event (if any) into the output buffer. */
static void close_event(wf_tb_writer *w) {
    if (!w->open_event) return;
    wf_buf ev = {0};
    pb_double(&ev, 1, w->wall_time);
    pb_key(&ev, 2, 0);
    pb_varint(&ev, (uint64_t)w->step); /* int64: negative steps take 10 bytes, as protobuf does */
    pb_bytes(&ev, 5, w->summary.data ? w->summary.data : "", w->summary.len);
    if (ev.failed || w->summary.failed) w->out.failed = 1;
    else frame_record(&w->out, &ev);
    wf_buf_free(&ev);
    w->summary.len = 0;
    w->summary.failed = 0;
    w->open_event = 0;
}

static wf_status write_out(wf_tb_writer *w) {
    if (w->out.failed) {
        w->out.len = 0;
        w->out.failed = 0;
        return wf_error(WF_ERR_NOMEM, "%s: out of memory buffering TensorBoard events; events were lost",
                        w->path);
    }
    if (w->out.len && fwrite(w->out.data, 1, w->out.len, w->fp) != w->out.len)
        return wf_error(WF_ERR_IO, "%s: write failed: %s (is the disk full?)", w->path, strerror(errno));
    w->out.len = 0;
    if (fflush(w->fp) != 0)
        return wf_error(WF_ERR_IO, "%s: write failed: %s (is the disk full?)", w->path, strerror(errno));
    w->last_flush = wf__obs_unix_now();
    return WF_OK;
}

wf_status wf_tb_open(wf_tb_writer **out, const char *dir, double flush_every_s) {
    *out = NULL;
    WF_TRY(wf_mkdirs(dir));
    char host[256] = "host";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "host");
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    wf_tb_writer *w = calloc(1, sizeof *w);
    if (!w) return wf_error(WF_ERR_NOMEM, "out of memory");
    double now = wf__obs_unix_now();
    /* TensorBoard reads the files of a directory in name order; the time
     * first keeps a resumed run's new file after the old one. The counter
     * avoids a clash when one process opens two writers in one second. */
    for (int n = 0; n < 1000 && !w->fp; n++) {
        size_t len = strlen(dir) + strlen(host) + 96;
        free(w->path);
        w->path = malloc(len);
        if (!w->path) break;
        snprintf(w->path, len, "%s/events.out.tfevents.%lld.%s.%ld.%d", dir, (long long)now, host,
                 (long)getpid(), n);
        if (wf_path_exists(w->path)) continue;
        w->fp = fopen(w->path, "wbx");
        if (!w->fp && errno != EEXIST) {
            wf_status s = wf_error(WF_ERR_IO, "%s: cannot create: %s", w->path, strerror(errno));
            free(w->path);
            free(w);
            return s;
        }
    }
    if (!w->fp) {
        free(w->path);
        free(w);
        return wf_error(WF_ERR_IO, "%s: cannot create an event file", dir);
    }
    w->flush_every_s = flush_every_s;
    w->last_flush = now;
    /* The first record of every event file says its version. */
    wf_buf ev = {0};
    pb_double(&ev, 1, now);
    pb_bytes(&ev, 3, "brain.Event:2", 13);
    frame_record(&w->out, &ev);
    wf_buf_free(&ev);
    wf_status s = write_out(w);
    if (s != WF_OK) {
        fclose(w->fp);
        wf_buf_free(&w->out);
        free(w->path);
        free(w);
        return s;
    }
    *out = w;
    return WF_OK;
}

static wf_status maybe_flush(wf_tb_writer *w) {
    if (w->out.len >= (1u << 20) || wf__obs_unix_now() - w->last_flush >= w->flush_every_s) return write_out(w);
    return WF_OK;
}

wf_status wf_tb_begin(wf_tb_writer *w, int64_t step, double wall_time) {
    close_event(w);
    WF_TRY(maybe_flush(w));
    w->open_event = 1;
    w->step = step;
    w->wall_time = wall_time > 0 ? wall_time : wf__obs_unix_now();
    return WF_OK;
}

wf_status wf_tb_add(wf_tb_writer *w, const char *tag, float value) {
    if (!w->open_event) return wf_error(WF_ERR_INVALID, "%s: wf_tb_add(%s) before wf_tb_begin", w->path, tag);
    wf_buf val = {0};
    pb_bytes(&val, 1, tag, strlen(tag));
    pb_float(&val, 2, value);
    if (val.failed) w->summary.failed = 1;
    else pb_bytes(&w->summary, 1, val.data, val.len);
    wf_buf_free(&val);
    return WF_OK;
}

wf_status wf_tb_add_scalar(wf_tb_writer *w, const char *tag, double value, int64_t step) {
    WF_TRY(wf_tb_begin(w, step, 0));
    WF_TRY(wf_tb_add(w, tag, (float)value));
    close_event(w);
    return maybe_flush(w);
}

wf_status wf_tb_restart(wf_tb_writer *w, int64_t step) {
    close_event(w);
    wf_buf ev = {0};
    pb_double(&ev, 1, wf__obs_unix_now());
    pb_key(&ev, 2, 0);
    pb_varint(&ev, (uint64_t)step);
    static const unsigned char start[] = {0x08, 0x01}; /* SessionLog { status: START } */
    pb_bytes(&ev, 7, start, sizeof start);
    if (ev.failed) w->out.failed = 1;
    else frame_record(&w->out, &ev);
    wf_buf_free(&ev);
    return maybe_flush(w);
}

wf_status wf_tb_flush(wf_tb_writer *w) {
    close_event(w);
    return write_out(w);
}

wf_status wf_tb_close(wf_tb_writer *w) {
    if (!w) return WF_OK;
    wf_status s = wf_tb_flush(w);
    if (s == WF_OK && fsync(fileno(w->fp)) != 0 && errno != EINVAL)
        s = wf_error(WF_ERR_IO, "%s: fsync failed: %s", w->path, strerror(errno));
    if (fclose(w->fp) != 0 && s == WF_OK)
        s = wf_error(WF_ERR_IO, "%s: close failed: %s", w->path, strerror(errno));
    wf_buf_free(&w->out);
    wf_buf_free(&w->summary);
    free(w->path);
    free(w);
    return s;
}

const char *wf_tb_path(const wf_tb_writer *w) {
    return w ? w->path : NULL;
}
