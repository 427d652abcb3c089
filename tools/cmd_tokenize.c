/* `weft tokenize`: parses the options, runs the tokenize pipeline
 * (include/weft/tokenize.h) and prints what it wrote. */
#include <inttypes.h>
#include <stdio.h>

#include "commands.h"
#include "weft/tokenize.h"
#include "weft/weft.h"

static void fmt_count(char *buf, size_t n, double v) {
    if (v >= 1e9) snprintf(buf, n, "%.2fG", v / 1e9);
    else if (v >= 1e6) snprintf(buf, n, "%.2fM", v / 1e6);
    else if (v >= 1e3) snprintf(buf, n, "%.1fK", v / 1e3);
    else snprintf(buf, n, "%.0f", v);
}

static int tokenize_main(void *opts, const wf_strs *pos) {
    const wf_tokenize_config *c = opts;
    wf_tokenize_summary sum;
    if (wf_tokenize_run(c, (const char *const *)pos->items, pos->n, &sum) != WF_OK)
        return wf_tool_fail(wf_tokenize_spec()->name);
    static const char *const names[2] = {"train", "val"};
    double mb = (double)sum.bytes / 1e6;
    printf("tokenized %.1f MB in %.2f s (%.2f MB/s, %d thread%s) -> %s\n", mb, sum.seconds,
           sum.seconds > 0 ? mb / sum.seconds : 0.0, sum.threads, sum.threads == 1 ? "" : "s", c->output);
    for (int i = 0; i < 2; i++) {
        char t[32];
        fmt_count(t, sizeof t, (double)sum.tokens[i]);
        printf("  %-5s %10" PRIu64 " documents %12" PRIu64 " tokens (%s) %4" PRIu64 " shard%s\n", names[i],
               sum.docs[i], sum.tokens[i], t, sum.shards[i], sum.shards[i] == 1 ? "" : "s");
    }
    return 0;
}

int wf_cmd_tokenize(int argc, char **argv) {
    wf_tokenize_config c;
    return wf_tool_run(wf_tokenize_spec(), &c, sizeof c, argc, argv, tokenize_main);
}
