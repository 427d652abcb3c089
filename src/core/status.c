/* Status strings, the per-thread error message behind wf_error(), and the
 * helpers that keep an error's context: the first error kept across cleanup,
 * WF_TRY's debug trail and WF_CHECK's failure message. */
#include "weft/status.h"

#include "weft/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define WF_ERRMSG_CAP WF_ERROR_MSG_CAP
static _Thread_local char errmsg_[WF_ERRMSG_CAP];
/* A message as formatted, before it is fitted into errmsg_. */
static _Thread_local char full_[WF_ERRMSG_CAP * 16];

/* Copies the message msg (which it may change) into dst (cap bytes). One
 * that does not fit has its longest words (paths, almost always) shortened
 * in the middle to "...", longest first, not its end cut off:
 * "DIR/rrrr...rrrr/checkpoints: No such file or directory" keeps the reason
 * however long the path. When no word longer than 32 bytes is left to
 * shorten (each is kept to its first and last 16), the end is cut to "...". */
static void fit_message(char *dst, size_t cap, char *msg) {
    size_t n = strlen(msg);
    while (n >= cap) {
        size_t best = 0, best_len = 0;
        for (size_t i = 0; i < n;) {
            while (i < n && msg[i] == ' ') i++;
            size_t j = i;
            while (j < n && msg[j] != ' ') j++;
            if (j - i > best_len) best = i, best_len = j - i;
            i = j;
        }
        if (best_len <= 36) break; /* shortened to 32 + "...", it gains nothing */
        size_t excess = n - (cap - 1), shrink = best_len - 32; /* most it may lose */
        size_t drop = (excess + 3 < shrink ? excess + 3 : shrink);    /* bytes replaced by "..." */
        size_t keep = best_len - drop, head = best + keep / 2, tail = best + best_len - (keep - keep / 2);
        memcpy(msg + head, "...", 3);
        memmove(msg + head + 3, msg + tail, n - tail + 1);
        n = strlen(msg);
    }
    if (n < cap) {
        memcpy(dst, msg, n + 1);
        return;
    }
    memcpy(dst, msg, cap - 4);
    memcpy(dst + cap - 4, "...", 4);
}

const char *wf_status_str(wf_status s) {
    switch (s) {
#define WF_STATUS_CASE_(name, value, desc) case name: return desc;
        WF_STATUS_MAP(WF_STATUS_CASE_)
#undef WF_STATUS_CASE_
    }
    return "unknown status";
}

wf_status wf_error(wf_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(full_, sizeof full_, fmt, ap);
    va_end(ap);
    fit_message(errmsg_, sizeof errmsg_, full_);
    return s;
}

wf_status wf_error_wrap(wf_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int np = vsnprintf(full_, sizeof full_ - WF_ERRMSG_CAP, fmt, ap);
    va_end(ap);
    if (np < 0) np = 0;
    if ((size_t)np > sizeof full_ - WF_ERRMSG_CAP - 1) np = (int)(sizeof full_ - WF_ERRMSG_CAP - 1);
    memcpy(full_ + np, errmsg_, strlen(errmsg_) + 1); /* errmsg_ fits in the room left */
    fit_message(errmsg_, sizeof errmsg_, full_);
    return s;
}

const char *wf_error_msg(void) { return errmsg_; }

void wf_error_clear(void) { errmsg_[0] = '\0'; }

wf_status wf_error_keep_note(wf_error_keep *k, wf_status s) {
    if (s != WF_OK && k->status == WF_OK) {
        k->status = s;
        memcpy(k->msg, errmsg_, sizeof k->msg);
    }
    return s;
}

wf_status wf_error_keep_restore(const wf_error_keep *k) {
    if (k->status != WF_OK) memcpy(errmsg_, k->msg, sizeof errmsg_);
    return k->status;
}

wf_status wf_error_forward(wf_status s, const char *file, int line, const char *expr) {
    if (wf_log_get_level() <= WF_LOG_DEBUG)
        wf_log(WF_LOG_DEBUG, "%s:%d: forwarded %s from %s: %s", file, line, wf_status_str(s), expr, errmsg_);
    return s;
}

wf_status wf_check_failed(const char *file, int line, const char *cond, const char *fmt, ...) {
    char detail[WF_ERRMSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return wf_error(WF_ERR_INTERNAL, "internal error at %s:%d: invariant `%s` does not hold: %s (please report this)",
                    file, line, cond, detail);
}
