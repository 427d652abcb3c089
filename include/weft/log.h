/* weft: levelled, rank-aware logging to stderr.
 *
 * Lines look like `[weft r0 12:00:01 info] message`. With more than one rank
 * every line carries its rank; wf_log_set_rank is called once the
 * communicator knows it. The level comes from wf_log_set_level or the
 * WEFT_LOG environment variable (debug, info, warn, error).
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

#define WF_DEBUG(...) wf_log(WF_LOG_DEBUG, __VA_ARGS__)
#define WF_INFO(...) wf_log(WF_LOG_INFO, __VA_ARGS__)
#define WF_WARN(...) wf_log(WF_LOG_WARN, __VA_ARGS__)
#define WF_ERROR(...) wf_log(WF_LOG_ERROR, __VA_ARGS__)

#endif
