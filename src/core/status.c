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
    vsnprintf(errmsg_, sizeof errmsg_, fmt, ap);
    va_end(ap);
    return s;
}

wf_status wf_error_wrap(wf_status s, const char *fmt, ...) {
    char prefix[WF_ERRMSG_CAP], old[WF_ERRMSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, errmsg_, sizeof old);
    size_t np = strlen(prefix), no = strlen(old);
    if (np > WF_ERRMSG_CAP - 1) np = WF_ERRMSG_CAP - 1;
    if (no > WF_ERRMSG_CAP - 1 - np) no = WF_ERRMSG_CAP - 1 - np;
    memcpy(errmsg_, prefix, np);
    memcpy(errmsg_ + np, old, no);
    errmsg_[np + no] = '\0';
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
