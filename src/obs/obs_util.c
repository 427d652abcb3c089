/* Small helpers of the observability module: the byte buffer the sinks
 * fill between flushes, JSON numbers that round-trip, and reading /proc. */
#include "obs/obs_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void obs_buf_free(obs_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = 0;
}

static int buf_reserve(obs_buf *b, size_t extra) {
    if (b->failed) return 0;
    if (b->len + extra + 1 <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra + 1) cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) {
        b->failed = 1;
        return 0;
    }
    b->data = d;
    b->cap = cap;
    return 1;
}

void obs_buf_append(obs_buf *b, const void *data, size_t len) {
    if (!buf_reserve(b, len)) return;
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
}

void obs_buf_printf(obs_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n >= 0 && buf_reserve(b, (size_t)n)) {
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    } else if (n < 0) {
        b->failed = 1;
    }
    va_end(ap2);
}

void obs_buf_json_str(obs_buf *b, const char *s) {
    obs_buf_append(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': obs_buf_append(b, "\\\"", 2); break;
        case '\\': obs_buf_append(b, "\\\\", 2); break;
        case '\n': obs_buf_append(b, "\\n", 2); break;
        case '\r': obs_buf_append(b, "\\r", 2); break;
        case '\t': obs_buf_append(b, "\\t", 2); break;
        default:
            if (*p < 0x20) obs_buf_printf(b, "\\u%04x", *p);
            else obs_buf_append(b, p, 1);
        }
    }
    obs_buf_append(b, "\"", 1);
}

void obs_buf_json_num(obs_buf *b, double v) {
    /* The first of %.15g, %.16g, %.17g that reads back exactly: 0.1 stays
     * "0.1", and every double survives the trip. */
    char tmp[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v) break;
    }
    obs_buf_append(b, tmp, strlen(tmp));
}

char *obs_read_text(const char *path) {
    FILE *fp = fopen(path, "r");
    if (!fp) return NULL;
    size_t cap = 8192, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - 1 - n, fp);
        n += got;
        if (got == 0) break;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(fp);
    if (buf) buf[n] = '\0';
    return buf;
}

void obs_cpu_model(char *buf, size_t size) {
    snprintf(buf, size, "unknown CPU");
    char *text = obs_read_text("/proc/cpuinfo");
    if (!text) return;
    /* x86: "model name"; arm64 has no name line, only "CPU implementer". */
    static const char *const keys[] = {"model name", "Model", "Hardware", "cpu model"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        size_t kl = strlen(keys[k]);
        for (char *line = text; line && *line;) {
            char *next = strchr(line, '\n');
            if (strncmp(line, keys[k], kl) == 0 && (line[kl] == ' ' || line[kl] == '\t' || line[kl] == ':')) {
                char *colon = strchr(line, ':');
                if (colon && (!next || colon < next)) {
                    colon++;
                    while (*colon == ' ' || *colon == '\t') colon++;
                    size_t len = next ? (size_t)(next - colon) : strlen(colon);
                    while (len && (colon[len - 1] == ' ' || colon[len - 1] == '\r')) len--;
                    if (len) {
                        snprintf(buf, size, "%.*s", (int)len, colon);
                        free(text);
                        return;
                    }
                }
            }
            line = next ? next + 1 : NULL;
        }
    }
    free(text);
}

double obs_unix_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
