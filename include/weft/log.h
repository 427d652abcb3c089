/* weft: levelled, rank-aware logging to stderr.
 *
 * Lines look like `[weft r0 12:00:01 info] message`. With more than one rank
 * every line carries its rank; wf_log_set_rank is called once the
 * communicator knows it. The level comes from wf_log_set_level or the
 * WEFT_LOG environment variable (debug, info, warn, error).
 *
 * Every line is written whole: formatted into one buffer and written with
 * one write(2), so that the lines of threads and of ranks sharing a
 * terminal, a pipe or a log file never interleave inside a line (pipes: for
 * lines up to PIPE_BUF, 4096 bytes on Linux; docs/cluster.md, "Log lines").
 */
#ifndef WEFT_LOG_H
#define WEFT_LOG_H

typedef enum { WF_LOG_DEBUG = 0, WF_LOG_INFO, WF_LOG_WARN, WF_LOG_ERROR } wf_log_level;

void wf_log_set_level(wf_log_level level);
wf_log_level wf_log_get_level(void);
/* Parses "debug", "info", "warn" or "error"; returns -1 if unknown. */
int wf_log_parse_level(const char *name);
void wf_log_set_rank(int rank, int world_size);

void wf_log(wf_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One line to stderr without the log's prefix or level, written whole like
 * wf_log's (a newline is added): the CLI's "weft CMD: error: ..." lines. */
void wf_log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Makes stdout line-buffered, so that each printf'd line (up to BUFSIZ
 * bytes) leaves in one write(2) of whole lines. By default stdout sent to
 * a pipe or file is block-buffered and cut mid-line; under a launcher the
 * other ranks' lines would land inside the cut. Call before printing
 * (main() does, under a launcher). */
void wf_log_line_buffer_stdout(void);

#define WF_DEBUG(...) wf_log(WF_LOG_DEBUG, __VA_ARGS__)
#define WF_INFO(...) wf_log(WF_LOG_INFO, __VA_ARGS__)
#define WF_WARN(...) wf_log(WF_LOG_WARN, __VA_ARGS__)
#define WF_ERROR(...) wf_log(WF_LOG_ERROR, __VA_ARGS__)

#endif
