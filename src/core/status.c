/* Status strings and the per-thread error message behind wf_error(). */
#include "weft/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define WF_ERRMSG_CAP 1024
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
