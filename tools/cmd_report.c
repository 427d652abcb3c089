/* `weft report RUN_DIR`: one self-contained HTML page with the plots of a
 * run (loss, validation loss, learning rate, gradient norm, tokens/s, MFU,
 * memory, step-time split, spikes), made from RUN_DIR/metrics.jsonl and
 * RUN_DIR/run.json, and per-rank tables and plots from
 * RUN_DIR/ranks/rank-NNNNN/metrics.jsonl when they exist, and the
 * evaluations of RUN_DIR/eval.jsonl (weft eval --watch). The drawing is
 * wf_report_write's (src/obs). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "weft/metrics.h"
#include "weft/report.h"
#include "weft/weft.h"

typedef struct {
    char *output;
} report_opts;

static const wf_opt report_opt_table[] = {
    {"output", NULL, WF_OPT_STR, offsetof(report_opts, output), NULL, WF_NO_RANGE,
     "HTML file to write (default: RUN_DIR/report.html)"},
};

static const wf_cmd_spec report_spec = {
    "report",
    "weft report RUN_DIR [--output FILE]",
    "Writes one self-contained HTML page (inline SVG, no scripts, no external files) with the plots of a "
    "training run: loss and validation loss with the loss spikes marked, learning rate, gradient norm, "
    "tokens/s, MFU, memory, and the step time split into data, forward+backward, optimizer and "
    "checkpoint; plus the run's reproducibility record. Reads RUN_DIR/metrics.jsonl and RUN_DIR/run.json. "
    "When metrics.all_ranks made every rank write RUN_DIR/ranks/rank-NNNNN/metrics.jsonl, adds a Ranks section: "
    "each rank's median step, data, forward+backward and communication times, peak RSS and distance from the "
    "fastest rank (the straggler flagged), and plots with a line per rank. With RUN_DIR/eval.jsonl (weft eval "
    "--watch), each dataset's evaluation loss on the loss plot and an Evaluation section (loss and bits per byte "
    "per dataset).",
    report_opt_table,
    sizeof report_opt_table / sizeof *report_opt_table,
    1,
    1,
    0,
};

int wf_cmd_report(int argc, char **argv) {
    report_opts o;
    memset(&o, 0, sizeof o);
    wf_strs pos = {0};
    int done;
    int rc = wf_tool_parse(&report_spec, &o, argc, argv, &pos, &done);
    if (done) {
        wf_opts_free(&report_spec, &o);
        wf_opts_free_positional(&pos);
        return rc;
    }
    const char *dir = pos.items[0];
    char *def = NULL;
    const char *out = o.output;
    if (!out) {
        size_t len = strlen(dir) + 16;
        def = malloc(len);
        if (def) snprintf(def, len, "%s/report.html", dir);
        out = def;
    }
    rc = 0;
    if (!out) {
        wf_error(WF_ERR_NOMEM, "out of memory");
        rc = wf_tool_fail("report");
    } else if (wf_report_write(dir, out) != WF_OK) {
        rc = wf_tool_fail("report");
    } else {
        printf("wrote %s\n", out);
    }
    free(def);
    wf_opts_free(&report_spec, &o);
    wf_opts_free_positional(&pos);
    return rc;
}
