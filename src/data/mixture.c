/* The schedule of a dataset mixture (contract and bound: include/weft/mixture.h;
 * docs/loader.md, "Dataset mixing").
 *
 * Exact integer arithmetic throughout: weights are ratios of integers, so
 * every machine and every rank makes the same choices. Within a segment
 * the schedule is periodic with period S (the sum of the integer weights):
 * a slot's source depends on t = (slot - seg_slot) mod S and on each
 * source's copies in the current period, c_k = taken_k - seg_taken_k -
 * q * w_k with q = (slot - seg_slot) / S. Every product below stays under
 * 2^56 (copies <= S + 1 <= 2^24 + 1, 2n - 2 <= 126, S <= 2^24).
 *
 * Nothing here knows about datasets or ranks. */
#include "weft/mixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t gcd_u64(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

wf_status wf_mix_weights_from_ints(wf_mix_weights *out, const uint64_t *w, int n, const char *what) {
    memset(out, 0, sizeof *out);
    if (n < 1 || n > WF_MIX_MAX_SOURCES)
        return wf_error(WF_ERR_CONFIG, "%s: %d sources; a mixture has 1 to %d", what, n, WF_MIX_MAX_SOURCES);
    uint64_t g = 0;
    for (int k = 0; k < n; k++) g = gcd_u64(g, w[k]);
    if (g == 0)
        return wf_error(WF_ERR_CONFIG, "%s: every weight is 0; at least one source needs a positive weight", what);
    uint64_t sum = 0;
    for (int k = 0; k < n; k++) {
        uint64_t v = w[k] / g;
        if (v > WF_MIX_MAX_PERIOD || sum + v > WF_MIX_MAX_PERIOD)
            return wf_error(WF_ERR_CONFIG,
                            "%s: the weights as integer ratios without a common factor add up to more than %u "
                            "(the schedule's period, in sequences): round them to fewer digits (e.g. 0.333 "
                            "rather than 0.333333) or give them as small integers",
                            what, WF_MIX_MAX_PERIOD);
        out->w[k] = (uint32_t)v;
        sum += v;
    }
    out->n = n;
    out->period = (uint32_t)sum;
    return WF_OK;
}

/* One decimal: digits, an optional point and at most WF_MIX_WEIGHT_DIGITS
 * digits after it, below 10^6; *v = its value times 10^6. */
static int parse_decimal(const char *s, uint64_t *v) {
    uint64_t ip = 0, fp = 0;
    int nint = 0, nfrac = 0;
    const char *p = s;
    while (*p >= '0' && *p <= '9') {
        if (++nint > 6) return 0;
        ip = ip * 10 + (uint64_t)(*p++ - '0');
    }
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') {
            if (++nfrac > WF_MIX_WEIGHT_DIGITS) return 0;
            fp = fp * 10 + (uint64_t)(*p++ - '0');
        }
    }
    if (*p != '\0' || nint + nfrac == 0) return 0;
    for (int i = nfrac; i < WF_MIX_WEIGHT_DIGITS; i++) fp *= 10;
    *v = ip * 1000000u + fp;
    return 1;
}

wf_status wf_mix_weights_parse(wf_mix_weights *out, const char *const *text, int n, const char *what) {
    memset(out, 0, sizeof *out);
    if (n < 1 || n > WF_MIX_MAX_SOURCES)
        return wf_error(WF_ERR_CONFIG, "%s: %d sources; a mixture has 1 to %d", what, n, WF_MIX_MAX_SOURCES);
    uint64_t w[WF_MIX_MAX_SOURCES];
    for (int k = 0; k < n; k++)
        if (!parse_decimal(text[k], &w[k]))
            return wf_error(WF_ERR_CONFIG,
                            "%s: weight %d is '%s': a weight is a non-negative decimal below 1000000 with at most "
                            "%d digits after the point (e.g. 0.7 or 3)",
                            what, k + 1, text[k], WF_MIX_WEIGHT_DIGITS);
    return wf_mix_weights_from_ints(out, w, n, what);
}

int wf_mix_weights_equal(const wf_mix_weights *a, const wf_mix_weights *b) {
    if (a->n != b->n || a->period != b->period) return 0;
    for (int k = 0; k < a->n; k++)
        if (a->w[k] != b->w[k]) return 0;
    return 1;
}

int wf_mix_weights_active(const wf_mix_weights *w) {
    int n = 0;
    for (int k = 0; k < w->n; k++) n += w->w[k] > 0;
    return n;
}

double wf_mix_weight_share(const wf_mix_weights *w, int k) {
    return w->period ? (double)w->w[k] / (double)w->period : 0.0;
}

double wf_mix_bound(int n) { return n <= 1 ? 0.0 : 1.0 - 1.0 / (double)(2 * n - 2); }

void wf_mix_weights_format(const wf_mix_weights *w, char *buf, size_t size) {
    size_t len = 0;
    if (size) buf[0] = '\0';
    for (int k = 0; k < w->n && len < size; k++)
        len += (size_t)snprintf(buf + len, size - len, "%s%.6g", k ? " " : "", wf_mix_weight_share(w, k));
}

void wf_mix_state_init(wf_mix_state *s, const wf_mix_weights *w) {
    memset(s, 0, sizeof *s);
    s->weights = *w;
}

void wf_mix_set_weights(wf_mix_state *s, const wf_mix_weights *w) {
    s->seg_slot = s->slot;
    memcpy(s->seg_taken, s->taken, sizeof s->taken);
    s->weights = *w;
}

/* Where the segment is: q whole periods done, slot t (0-based) of the
 * current one, and each source's copies c[k] in it. 0 when the counts do
 * not fit (a state no schedule reaches). */
static int position(const wf_mix_state *s, uint64_t *q, uint64_t *t, uint64_t *c) {
    const wf_mix_weights *w = &s->weights;
    if (s->slot < s->seg_slot || w->period == 0) return 0;
    uint64_t i = s->slot - s->seg_slot;
    *q = i / w->period;
    *t = i % w->period;
    uint64_t sum = 0;
    for (int k = 0; k < w->n; k++) {
        if (s->taken[k] < s->seg_taken[k]) return 0;
        uint64_t d = s->taken[k] - s->seg_taken[k], base = *q * w->w[k];
        if (d < base || d - base > w->w[k]) return 0;
        c[k] = d - base;
        sum += c[k];
    }
    return sum == *t;
}

static uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

wf_status wf_mix_next(wf_mix_state *s, int *source) {
    const wf_mix_weights *w = &s->weights;
    uint64_t q, t, c[WF_MIX_MAX_SOURCES];
    WF_CHECK(position(s, &q, &t, c), "mixture state at slot %llu (segment from %llu) does not add up",
             (unsigned long long)s->slot, (unsigned long long)s->seg_slot);
    const int n = wf_mix_weights_active(w);
    const uint64_t S = w->period, M = n > 1 ? 2 * (uint64_t)n - 2 : 1, A = n > 1 ? M - 1 : 0;
    const uint64_t slot = t + 1; /* 1-based in the period */
    int best = -1;
    uint64_t best_l = 0;
    for (int k = 0; k < w->n; k++) {
        if (w->w[k] == 0) continue;
        const uint64_t j = c[k] + 1, den = M * w->w[k];
        /* E = ceil((j - D) S / w) with D = A / M; j >= 1 > D keeps it positive. */
        const uint64_t e = ceil_div((j * M - A) * S, den);
        if (e > slot) continue;
        const uint64_t l = ((j - 1) * M + A) * S / den + 1;
        if (best < 0 || l < best_l) {
            best = k;
            best_l = l;
        }
    }
    WF_CHECK(best >= 0 && best_l >= slot, "no source's next sequence may take slot %llu of the period (%d sources, "
             "period %llu)", (unsigned long long)slot, w->n, (unsigned long long)S);
    s->taken[best]++;
    s->slot++;
    *source = best;
    return WF_OK;
}

wf_status wf_mix_advance(wf_mix_state *s, uint64_t slots) {
    const wf_mix_weights *w = &s->weights;
    /* To the end of the current period, then whole periods, then the rest. */
    while (slots > 0 && (s->slot - s->seg_slot) % w->period != 0) {
        int k;
        WF_TRY(wf_mix_next(s, &k));
        slots--;
    }
    uint64_t periods = slots / w->period;
    if (periods) {
        for (int k = 0; k < w->n; k++) s->taken[k] += periods * w->w[k];
        s->slot += periods * w->period;
        slots -= periods * w->period;
    }
    while (slots > 0) {
        int k;
        WF_TRY(wf_mix_next(s, &k));
        slots--;
    }
    return WF_OK;
}

wf_status wf_mix_state_check(const wf_mix_state *s, const char *where) {
    const wf_mix_weights *w = &s->weights;
    if (w->n < 1 || w->n > WF_MIX_MAX_SOURCES)
        return wf_error(WF_ERR_FORMAT, "%s: the mixture has %d sources (1 to %d)", where, w->n, WF_MIX_MAX_SOURCES);
    uint64_t ints[WF_MIX_MAX_SOURCES];
    for (int k = 0; k < w->n; k++) ints[k] = w->w[k];
    wf_mix_weights red;
    if (wf_mix_weights_from_ints(&red, ints, w->n, where) != WF_OK || !wf_mix_weights_equal(&red, w))
        return wf_error(WF_ERR_FORMAT, "%s: the mixture's weights are not positive integers without a common factor "
                        "of at most %u in all", where, WF_MIX_MAX_PERIOD);
    uint64_t q, t, c[WF_MIX_MAX_SOURCES];
    if (!position(s, &q, &t, c))
        return wf_error(WF_ERR_FORMAT, "%s: the mixture's counts do not add up: %llu sequences served, %llu since the "
                        "weights last changed, and the sources' counts since then do not sum to that in whole "
                        "periods of %u",
                        where, (unsigned long long)s->slot, (unsigned long long)(s->slot - s->seg_slot), w->period);
    /* Every source within the bound after t slots: |c S - t w| <= D S. */
    const int n = wf_mix_weights_active(w);
    const uint64_t M = n > 1 ? 2 * (uint64_t)n - 2 : 1, A = n > 1 ? M - 1 : 0;
    for (int k = 0; k < w->n; k++) {
        uint64_t a = c[k] * w->period, b = t * w->w[k];
        uint64_t dev = a > b ? a - b : b - a;
        if (dev * M > A * w->period)
            return wf_error(WF_ERR_FORMAT, "%s: the mixture's source %d has %llu sequences after %llu of a period of "
                            "%u at weight %u/%u: no schedule gets there",
                            where, k + 1, (unsigned long long)c[k], (unsigned long long)t, w->period, w->w[k],
                            w->period);
    }
    return WF_OK;
}

/* --------------------------------------------------------------- the spec */

static int name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-';
}

static int valid_name(const char *s, size_t n) {
    if (n == 0 || n > WF_MIX_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++)
        if (!name_char(s[i])) return 0;
    return 1;
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* "[NAME=]DIR:WEIGHT" -> source i's name and dir, and the weight's text. */
static wf_status parse_source(wf_mix_spec *m, int i, const char *item, const char *key, char *wtext, size_t wsize) {
    const char *colon = strrchr(item, ':');
    if (!colon || !colon[1])
        return wf_error(WF_ERR_CONFIG, "%s item %d '%s' has no weight: write it as [NAME=]DIR:WEIGHT (e.g. "
                                       "\"data/web:0.7\")",
                        key, i + 1, item);
    const char *w = colon + 1;
    while (*w == ' ') w++;
    size_t wl = strlen(w);
    while (wl > 0 && w[wl - 1] == ' ') wl--;
    if (wl >= wsize)
        return wf_error(WF_ERR_CONFIG, "%s item %d '%s': the weight '%s' is too long", key, i + 1, item, w);
    memcpy(wtext, w, wl);
    wtext[wl] = '\0';
    const char *body = item, *end = colon;
    while (body < end && *body == ' ') body++;
    while (end > body && end[-1] == ' ') end--;
    const char *eq = memchr(body, '=', (size_t)(end - body)), *slash = memchr(body, '/', (size_t)(end - body));
    const char *dir = body, *name = NULL;
    size_t name_len = 0;
    if (eq && (!slash || eq < slash) && valid_name(body, (size_t)(eq - body))) {
        name = body;
        name_len = (size_t)(eq - body);
        dir = eq + 1;
    }
    if (dir >= end)
        return wf_error(WF_ERR_CONFIG, "%s item %d '%s' has no directory: write it as [NAME=]DIR:WEIGHT", key, i + 1,
                        item);
    m->dirs[i] = dup_n(dir, (size_t)(end - dir));
    if (!m->dirs[i]) return wf_error(WF_ERR_NOMEM, "out of memory");
    if (!name) { /* the directory's last component */
        const char *e = end;
        while (e > dir + 1 && e[-1] == '/') e--;
        const char *b = e;
        while (b > dir && b[-1] != '/') b--;
        if (!valid_name(b, (size_t)(e - b)))
            return wf_error(WF_ERR_CONFIG, "%s item %d '%s': the directory's name '%.*s' cannot name the source in "
                                           "the metrics (1 to %d letters, digits, '_', '.' or '-'): give one as "
                                           "NAME=DIR:WEIGHT",
                            key, i + 1, item, (int)(e - b), b, WF_MIX_NAME_MAX);
        name = b;
        name_len = (size_t)(e - b);
    }
    m->names[i] = dup_n(name, name_len);
    if (!m->names[i]) return wf_error(WF_ERR_NOMEM, "out of memory");
    for (int j = 0; j < i; j++)
        if (strcmp(m->names[j], m->names[i]) == 0)
            return wf_error(WF_ERR_CONFIG, "%s items %d and %d are both named '%s': name them apart (NAME=DIR:WEIGHT)",
                            key, j + 1, i + 1, m->names[i]);
    return WF_OK;
}

/* "STEP: W1 W2 ..." -> change k. */
static wf_status parse_change(wf_mix_spec *m, int k, const char *item, const char *key) {
    char where[300];
    snprintf(where, sizeof where, "%s item %d '%.200s'", key, k + 1, item);
    const char *p = item;
    while (*p == ' ') p++;
    char *end;
    long long step = (*p >= '0' && *p <= '9') ? strtoll(p, &end, 10) : 0;
    const char *q = step ? end : p;
    while (*q == ' ') q++;
    if (step < 1 || *q != ':')
        return wf_error(WF_ERR_CONFIG, "%s: write it as \"STEP: W1 W2 ...\", a step from 1 on and then one weight "
                                       "per source (%d)",
                        where, m->n);
    char words[WF_MIX_MAX_SOURCES][40];
    const char *text[WF_MIX_MAX_SOURCES];
    int n = 0;
    for (q++;;) {
        while (*q == ' ' || *q == '\t') q++;
        if (!*q) break;
        size_t len = strcspn(q, " \t");
        if (n == WF_MIX_MAX_SOURCES || len >= sizeof words[0])
            return wf_error(WF_ERR_CONFIG, "%s: more than %d weights, or one too long", where, WF_MIX_MAX_SOURCES);
        memcpy(words[n], q, len);
        words[n][len] = '\0';
        text[n] = words[n];
        n++;
        q += len;
    }
    if (n != m->n)
        return wf_error(WF_ERR_CONFIG, "%s: %d weight%s for %d sources; give one per source, in their order", where,
                        n, n == 1 ? "" : "s", m->n);
    WF_TRY(wf_mix_weights_parse(&m->change_w[k], text, n, where));
    if (k > 0 && step <= m->change_step[k - 1])
        return wf_error(WF_ERR_CONFIG, "%s: step %lld is not after the previous item's step %lld: list the changes "
                                       "in increasing steps",
                        where, step, (long long)m->change_step[k - 1]);
    m->change_step[k] = step;
    return WF_OK;
}

wf_status wf_mix_spec_parse(wf_mix_spec *m, const char *const *sources, size_t n_sources,
                            const char *const *changes, size_t n_changes, const char *sources_key,
                            const char *changes_key) {
    memset(m, 0, sizeof *m);
    if (n_sources == 0)
        return wf_error(WF_ERR_CONFIG, "%s is empty: give the datasets of the mixture as [NAME=]DIR:WEIGHT",
                        sources_key);
    if (n_sources > WF_MIX_MAX_SOURCES)
        return wf_error(WF_ERR_CONFIG, "%s has %zu items; a mixture has at most %d sources", sources_key, n_sources,
                        WF_MIX_MAX_SOURCES);
    m->n = (int)n_sources;
    char words[WF_MIX_MAX_SOURCES][40];
    const char *text[WF_MIX_MAX_SOURCES];
    for (int k = 0; k < m->n; k++) {
        WF_TRY(parse_source(m, k, sources[k], sources_key, words[k], sizeof words[k]));
        text[k] = words[k];
    }
    WF_TRY(wf_mix_weights_parse(&m->weights, text, m->n, sources_key));
    m->change_step = calloc(n_changes + 1, sizeof *m->change_step);
    m->change_w = calloc(n_changes + 1, sizeof *m->change_w);
    if (!m->change_step || !m->change_w) return wf_error(WF_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n_changes; i++) WF_TRY(parse_change(m, (int)i, changes[i], changes_key));
    m->n_changes = (int)n_changes;
    return WF_OK;
}

void wf_mix_spec_free(wf_mix_spec *m) {
    for (int k = 0; k < WF_MIX_MAX_SOURCES; k++) {
        free(m->names[k]);
        free(m->dirs[k]);
    }
    free(m->change_step);
    free(m->change_w);
    memset(m, 0, sizeof *m);
}

const wf_mix_weights *wf_mix_spec_weights_at(const wf_mix_spec *m, int64_t step) {
    const wf_mix_weights *w = &m->weights;
    for (int i = 0; i < m->n_changes && m->change_step[i] <= step; i++) w = &m->change_w[i];
    return w;
}
