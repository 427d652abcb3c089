/* Logging: every line is formatted whole (prefix, message, newline) and
 * leaves the process in one write(2) on fd 2, under a mutex, so that lines
 * never interleave: not between the threads of a rank (the mutex), and not
 * between ranks that share a terminal, a pipe or a log file (the kernel
 * writes one write(2) to a regular file or, up to PIPE_BUF bytes, to a
 * pipe in one piece; a file opened with O_APPEND gets every line at its
 * end). stdio would not promise it: a stream may split a line over several
 * writes. A lock file (flock) is not needed on top: it would only order
 * writes that are whole already. Not a metrics sink: metrics go through
 * obs/. */
#include "weft/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* Writes buf[0, len) to fd 2: one write(2), repeated only for what a
 * signal or a full non-blocking descriptor left unwritten. Errors are
 * dropped: a log line has nowhere else to go. */
static void write_stderr(const char *buf, size_t len) {
    while (len > 0) {
        ssize_t w = write(STDERR_FILENO, buf, len);
        if (w < 0) {
            if (errno == EINTR) continue;
            return;
        }
        buf += w;
        len -= (size_t)w;
    }
}

/* Formats prefix + fmt + "\n" into one buffer (the stack's, or the heap's
 * for a long text; truncated only if the heap has no room) and writes it
 * under the mutex. `prefix` holds no '%'. */
static void emit(const char *prefix, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void emit(const char *prefix, const char *fmt, va_list ap) {
    char stack[4096];
    size_t plen = strlen(prefix);
    if (plen > sizeof stack - 2) plen = sizeof stack - 2;
    memcpy(stack, prefix, plen);
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(stack + plen, sizeof stack - plen - 1, fmt, ap);
    if (n < 0) n = 0;
    char *line = stack;
    size_t len = plen + (size_t)n;
    if (len + 1 >= sizeof stack) {
        char *big = malloc(len + 2);
        if (big) {
            memcpy(big, prefix, plen);
            vsnprintf(big + plen, (size_t)n + 1, fmt, again);
            line = big;
        } else {
            len = sizeof stack - 2;
        }
    }
    va_end(again);
    line[len++] = '\n';
    pthread_mutex_lock(&log_mu_);
    write_stderr(line, len);
    pthread_mutex_unlock(&log_mu_);
    if (line != stack) free(line);
}

void wf_log(wf_log_level level, const char *fmt, ...) {
    static const char *tags[] = {"debug", "info", "warn", "error"};
    if (level < wf_log_get_level()) return;
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    pthread_mutex_lock(&log_mu_);
    int rank = rank_, world = world_;
    pthread_mutex_unlock(&log_mu_);
    char prefix[64];
    if (world > 1)
        snprintf(prefix, sizeof prefix, "[weft r%d %02d:%02d:%02d %s] ", rank, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 tags[level]);
    else
        snprintf(prefix, sizeof prefix, "[weft %02d:%02d:%02d %s] ", tm.tm_hour, tm.tm_min, tm.tm_sec, tags[level]);
    va_list ap;
    va_start(ap, fmt);
    emit(prefix, fmt, ap);
    va_end(ap);
}

void wf_log_line(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emit("", fmt, ap);
    va_end(ap);
}

void wf_log_line_buffer_stdout(void) {
    /* Line buffering: a printf'd line leaves at its newline, in one write
     * of whole lines (lines up to BUFSIZ bytes). */
    fflush(stdout);
    setvbuf(stdout, NULL, _IOLBF, BUFSIZ);
}
