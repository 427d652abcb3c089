/* Logging: one mutex-protected write per line so that threads never
 * interleave inside a line. Not a metrics sink: metrics go through obs/. */
#include "weft/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t log_mu_ = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t log_once_ = PTHREAD_ONCE_INIT;
static wf_log_level level_ = WF_LOG_INFO;
static int rank_ = 0, world_ = 1;

static void log_init_env(void) {
    const char *env = getenv("WEFT_LOG");
    int lv = env ? wf_log_parse_level(env) : -1;
    if (lv >= 0) level_ = (wf_log_level)lv;
}

int wf_log_parse_level(const char *name) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
}

void wf_log_set_level(wf_log_level level) {
    pthread_once(&log_once_, log_init_env);
    pthread_mutex_lock(&log_mu_);
    level_ = level;
    pthread_mutex_unlock(&log_mu_);
}

wf_log_level wf_log_get_level(void) {
    pthread_once(&log_once_, log_init_env);
    pthread_mutex_lock(&log_mu_);
    wf_log_level lv = level_;
    pthread_mutex_unlock(&log_mu_);
    return lv;
}

void wf_log_set_rank(int rank, int world_size) {
    pthread_mutex_lock(&log_mu_);
    rank_ = rank;
    world_ = world_size;
    pthread_mutex_unlock(&log_mu_);
}

void wf_log(wf_log_level level, const char *fmt, ...) {
    static const char *tags[] = {"debug", "info", "warn", "error"};
    if (level < wf_log_get_level()) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    pthread_mutex_lock(&log_mu_);
    if (world_ > 1)
        fprintf(stderr, "[weft r%d %02d:%02d:%02d %s] %s\n", rank_, tm.tm_hour, tm.tm_min,
                tm.tm_sec, tags[level], msg);
    else
        fprintf(stderr, "[weft %02d:%02d:%02d %s] %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
                tags[level], msg);
    pthread_mutex_unlock(&log_mu_);
}
