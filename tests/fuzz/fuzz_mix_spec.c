/* Fuzz target: a dataset mixture's spec and schedule (src/data/mixture.c):
 * data.sources ("[NAME=]DIR:WEIGHT") and data.weight_schedule ("STEP: W1
 * W2 ..."), as `weft train` and `weft data batch` read them.
 *
 * Input: items split at NULs; the first byte says how many of them are
 * sources (1 + byte % 8), the rest are schedule items. When the spec
 * parses, what it promises must hold: names of [A-Za-z0-9_.-] and unique,
 * weights reduced with their period in range, steps increasing; and for
 * the sources' weights and every change's, the schedule must keep every
 * source within its bound after every prefix of two periods (at most 4096
 * slots), give each exactly its weight per period, and agree with
 * wf_mix_advance: so the fuzzer also hunts weight vectors that would break
 * the documented bound. */
#include "fuzz.h"
#include "weft/mixture.h"

enum { MAX_ITEMS = 80, MAX_SLOTS = 4096 };

static int name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > WF_MIX_NAME_MAX) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '.' || *s == '-'))
            return 0;
    return 1;
}

static void check_schedule(const wf_mix_weights *w) {
    const int n = wf_mix_weights_active(w);
    const uint64_t M = n > 1 ? 2 * (uint64_t)n - 2 : 1, A = n > 1 ? M - 1 : 0, S = w->period;
    uint64_t slots = 2 * S < MAX_SLOTS ? 2 * S : MAX_SLOTS;
    wf_mix_state s, t;
    wf_mix_state_init(&s, w);
    for (uint64_t i = 1; i <= slots; i++) {
        int k;
        if (wf_mix_next(&s, &k) != WF_OK || k < 0 || k >= w->n || w->w[k] == 0) abort();
        for (int j = 0; j < w->n; j++) { /* |taken S - i w| <= D S, D = A / M */
            uint64_t a = s.taken[j] * S, b = i * w->w[j];
            if ((a > b ? a - b : b - a) * M > A * S) abort();
        }
        if (i % S == 0)
            for (int j = 0; j < w->n; j++)
                if (s.taken[j] != (i / S) * w->w[j]) abort();
    }
    wf_mix_state_init(&t, w);
    if (wf_mix_advance(&t, slots) != WF_OK || memcmp(&s, &t, sizeof s) != 0) abort();
    if (wf_mix_state_check(&s, "fuzz") != WF_OK) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char *copy = malloc(size);
    if (!copy) return 0;
    memcpy(copy, data + 1, size - 1);
    copy[size - 1] = '\0';
    const char *items[MAX_ITEMS];
    size_t n = 0;
    for (char *p = copy; p < copy + size && n < MAX_ITEMS; p += strlen(p) + 1) items[n++] = p;
    size_t n_src = 1 + data[0] % 8;
    if (n_src > n) n_src = n;
    wf_mix_spec m;
    wf_status st = wf_mix_spec_parse(&m, items, n_src, items + n_src, n - n_src, "data.sources",
                                     "data.weight_schedule");
    if (st != WF_OK) {
        if (!wf_error_msg()[0]) abort();
    } else {
        if (m.n != (int)n_src || m.n_changes != (int)(n - n_src)) abort();
        for (int k = 0; k < m.n; k++) {
            if (!name_ok(m.names[k]) || !m.dirs[k][0]) abort();
            for (int j = 0; j < k; j++)
                if (strcmp(m.names[j], m.names[k]) == 0) abort();
        }
        for (int i = 0; i < m.n_changes; i++)
            if (m.change_step[i] < 1 || (i && m.change_step[i] <= m.change_step[i - 1])) abort();
        check_schedule(&m.weights);
        for (int i = 0; i < m.n_changes; i++) check_schedule(&m.change_w[i]);
    }
    wf_mix_spec_free(&m);
    free(copy);
    return 0;
}
