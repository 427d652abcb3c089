/* Fuzz target: the trace JSON that `weft trace analyze` streams
 * (src/obs/trace_json.c, the streaming reader, and trace_analyze.c): a
 * Chrome/Kineto trace of one rank, in a folder of its own as the command
 * reads it. An analysis that succeeds is printed as text and as JSON. The
 * low bit of the first byte picks HTA's rounding to whole microseconds or
 * exact nanoseconds. */
#include "fuzz.h"
#include "weft/trace_analyze.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char dir[4200], path[4300];
    fz_path(dir, sizeof dir, "traces");
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/rank0.json", dir);
    fz_write(path, data, size);
    wf_trace_analyze_opts o;
    memset(&o, 0, sizeof o);
    o.hta_rounding = size && (data[0] & 1);
    wf_trace_analysis a;
    memset(&a, 0, sizeof a);
    if (wf_trace_analyze(dir, &o, &a) == WF_OK) {
        FILE *null = fopen("/dev/null", "w");
        if (null) {
            wf_trace_analysis_print(&a, 5, null);
            (void)wf_trace_analysis_write_json(&a, 5, null);
            fclose(null);
        }
    }
    wf_trace_analysis_free(&a);
    wf_error_clear();
    return 0;
}
