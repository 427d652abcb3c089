/* Small helpers of the observability module: JSON numbers that round-trip
 * and reading /proc. */
#include "obs/obs_impl.h"
#include "weft/fileio.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void wf__obs_buf_json_num(wf_buf *b, double v) {
    /* The first of %.15g, %.16g, %.17g that reads back exactly: 0.1 stays
     * "0.1", and every double survives the trip. */
    char tmp[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v) break;
    }
    wf_buf_append(b, tmp, strlen(tmp));
}

char *wf__obs_read_text(const char *path) {
    FILE *fp = fopen(path, "r");
    if (!fp) return NULL;
    char *text = NULL;
    size_t len;
    if (wf_stream_read(fp, path, &text, &len) != WF_OK) wf_error_clear(); /* NULL: "cannot" */
    fclose(fp);
    return text;
}

void wf__obs_cpu_model(char *buf, size_t size) {
    snprintf(buf, size, "unknown CPU");
    char *text = wf__obs_read_text("/proc/cpuinfo");
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

double wf__obs_unix_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
