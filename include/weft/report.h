/* weft: the HTML report of a run (`weft report`): loss, learning rate,
 * throughput, MFU, memory and per-rank plots from metrics.jsonl, run.json
 * and the evaluation and spike records, as one self-contained file
 * (docs/metrics.md, "The report"). */
#ifndef WEFT_REPORT_H
#define WEFT_REPORT_H

#include "weft/status.h"


/* Reads DIR/metrics.jsonl (and DIR/run.json if present) and writes one
 * self-contained HTML page with SVG plots to `out_path`: loss and
 * validation loss, learning rate, gradient norm, tokens/s, MFU, memory,
 * the step-time split, spikes. Steps repeated after a rollback replace the
 * earlier ones; spikes are all kept. With DIR/ranks/rank-NNNNN/metrics.jsonl
 * (metrics.all_ranks) the page also has a Ranks section: per-rank medians,
 * peak RSS, the straggler, and plots with a line per rank. With
 * DIR/eval.jsonl (`weft eval --watch`) each dataset's evaluation loss is
 * drawn on the loss plot and an Evaluation section plots the loss and bits
 * per byte per dataset. */
wf_status wf_report_write(const char *dir, const char *out_path);

/* wf_report_write with other runs beside DIR (`weft report DIR OTHER ...`,
 * at most 7): a Comparison section plots every run's training and
 * validation loss by step and tabulates each run's final losses and the
 * first step at which its validation loss reached DIR's final one. Only
 * the others' metrics.jsonl is read. */
wf_status wf_report_write_compare(const char *dir, const char *const *others, int n_others, const char *out_path);

#endif
