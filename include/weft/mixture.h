/* weft: the schedule of a dataset mixture (data.sources; docs/loader.md,
 * "Dataset mixing").
 *
 * A mixture reads several datasets ("sources"), each with a weight. The
 * sequences of the whole run are numbered 0, 1, 2, ... ("slots": slot n is
 * the n-th sequence of the global order, whatever the number of ranks), and
 * the schedule gives each slot to one source, deterministically. Slot n of
 * a segment of constant weights w (integers without a common factor, sum S)
 * goes to the source that the earliest-deadline rule of Tijdeman's chairman
 * assignment picks: copy j of source k (its j-th sequence of the segment)
 * may take slot t (1-based in the segment) only inside the window
 *
 *     E(k, j) = ceil((j - D) * S / w_k)  <=  t  <=  floor((j - 1 + D) * S / w_k) + 1 = L(k, j)
 *
 * with D = 1 - 1 / (2n - 2) for the n sources of positive weight (n >= 2;
 * with one, D = 0), and among the sources whose next copy may take slot t
 * the one with the earliest L (the lowest index on a tie) gets it.
 * Tijdeman (1980) proved a schedule inside these windows exists, and the
 * earliest deadline first finds one when one exists, so after any t slots
 * of the segment every source k has
 *
 *     | taken_k - t * w_k / S |  <=  D  < 1
 *
 * and over ANY window of m consecutive slots of one segment its count is
 * within 2D < 2 sequences of m * w_k / S (1 with two sources). The schedule
 * is periodic: after S slots each source has exactly w_k, so a slot's
 * source is a function of (slot - segment start) mod S and the counts.
 *
 * A change of weights starts a new segment at the current slot (the
 * counts of the new segment start at zero). The state is a handful of
 * integers that do not depend on the rank count: the slots served, each
 * source's samples taken, and where the current segment started.
 *
 * The schedule reads no data and allocates nothing; every function is O(n)
 * per slot. Only wf_mix_spec_check_tokenizer (below) reads the sources'
 * dataset.json files.
 */
#ifndef WEFT_MIXTURE_H
#define WEFT_MIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "weft/status.h"

/* At most this many sources in a mixture. */
#define WF_MIX_MAX_SOURCES 64
/* The weights as integers without a common factor sum to at most this (the
 * schedule's period, in sequences). */
#define WF_MIX_MAX_PERIOD (1u << 24)
/* Digits after the decimal point a weight may have. */
#define WF_MIX_WEIGHT_DIGITS 6

typedef struct {
    int n;                          /* sources */
    uint32_t w[WF_MIX_MAX_SOURCES]; /* integer weights without a common factor (0: the source is off) */
    uint32_t period;                /* S = the sum of w, 1..WF_MIX_MAX_PERIOD */
} wf_mix_weights;

/* Reads n decimal weights ("0.7", "3", "0.25"; non-negative, below 10^6,
 * at most WF_MIX_WEIGHT_DIGITS digits after the point) into exact integer
 * ratios. `what` names them in errors (e.g. "data.sources"). Refused
 * (WF_ERR_CONFIG): a weight that is not such a decimal, all weights zero,
 * more than WF_MIX_MAX_SOURCES, a period above WF_MIX_MAX_PERIOD. */
wf_status wf_mix_weights_parse(wf_mix_weights *out, const char *const *text, int n, const char *what);

/* Weights from integers (reduced by their greatest common divisor); the
 * same refusals. */
wf_status wf_mix_weights_from_ints(wf_mix_weights *out, const uint64_t *w, int n, const char *what);

/* 1 if a and b are the same ratios over the same number of sources. */
int wf_mix_weights_equal(const wf_mix_weights *a, const wf_mix_weights *b);

/* Sources with a positive weight. */
int wf_mix_weights_active(const wf_mix_weights *w);

/* Source k's share w_k / S. */
double wf_mix_weight_share(const wf_mix_weights *w, int k);

/* D for n sources of positive weight: 1 - 1 / (2n - 2), 0 for n <= 1. */
double wf_mix_bound(int n);

typedef struct {
    uint64_t slot;                          /* sequences the mixture has served (all sources) */
    uint64_t seg_slot;                      /* the slot at which `weights` took effect */
    uint64_t taken[WF_MIX_MAX_SOURCES];     /* samples read from each source so far */
    uint64_t seg_taken[WF_MIX_MAX_SOURCES]; /* taken[] at seg_slot */
    wf_mix_weights weights;                 /* the weights of the current segment */
} wf_mix_state;

/* The state of a new mixture: nothing served, one segment from slot 0. */
void wf_mix_state_init(wf_mix_state *s, const wf_mix_weights *w);

/* Checks a state read from a file: counts that add up, the segment's
 * counts within the schedule's bound of its weights. WF_ERR_FORMAT naming
 * what is wrong, with `where` (e.g. the checkpoint) in front. */
wf_status wf_mix_state_check(const wf_mix_state *s, const char *where);

/* The source of the next slot; advances the state by it (taken[*source]++
 * and slot++). WF_ERR_INTERNAL (a WF_CHECK) only for a state that no
 * schedule reaches. */
wf_status wf_mix_next(wf_mix_state *s, int *source);

/* Advances the state by `slots` slots (whole periods at once). */
wf_status wf_mix_advance(wf_mix_state *s, uint64_t slots);

/* New weights from the current slot on: a new segment starts here. */
void wf_mix_set_weights(wf_mix_state *s, const wf_mix_weights *w);

/* "0.7 0.3": the shares, for messages (buf of at least 16 per source). */
void wf_mix_weights_format(const wf_mix_weights *w, char *buf, size_t size);

/* ------------------------------------------------------- a mixture's spec
 * What `weft train`'s data.sources and data.weight_schedule (and `weft
 * data batch --sources/--weight-schedule`) say:
 *
 *   source:  "[NAME=]DIR:WEIGHT"   NAME: 1 to 63 of [A-Za-z0-9_.-], unique;
 *                                  default the directory's last component
 *   change:  "STEP: W1 W2 ..."     from the 1-based step STEP on, one
 *                                  weight per source in order; steps increase
 */
#define WF_MIX_NAME_MAX 63

typedef struct {
    int n;                                /* sources */
    char *names[WF_MIX_MAX_SOURCES];      /* owned */
    char *dirs[WF_MIX_MAX_SOURCES];       /* owned */
    wf_mix_weights weights;               /* the sources' weights */
    int n_changes;
    int64_t *change_step;                 /* (n_changes) owned, 1-based, increasing */
    wf_mix_weights *change_w;             /* (n_changes) owned */
} wf_mix_spec;

/* Reads the sources and the changes; errors (WF_ERR_CONFIG) name the key
 * (`sources_key`, `changes_key`), the item and what would be right. Free
 * with wf_mix_spec_free (also after an error). */
wf_status wf_mix_spec_parse(wf_mix_spec *out, const char *const *sources, size_t n_sources,
                            const char *const *changes, size_t n_changes, const char *sources_key,
                            const char *changes_key);
void wf_mix_spec_free(wf_mix_spec *s);

/* The weights of the 1-based step `step`: the sources', or the last change
 * at or before it. */
const wf_mix_weights *wf_mix_spec_weights_at(const wf_mix_spec *s, int64_t step);

/* Checks that the spec's sources were tokenized with one tokenizer
 * (docs/loader.md, "One tokenizer"): the same vocabulary size, and the same
 * tokenizer fingerprint where it is known (dataset.json's, or for a dataset
 * of a weft before fingerprints that of the tokenizer file it names); a
 * source whose tokenizer cannot be known is checked by its vocabulary
 * alone, with a warning. `tokenizer` (NULL: none), a tokenizer.json the
 * sources must have been tokenized with, when it exists. `key` names the
 * sources in messages ("data.sources"), `tokenizer_key` the tokenizer
 * ("data.tokenizer"). WF_ERR_CONFIG naming both sources and where each
 * fingerprint came from; the errors of reading a dataset.json, with the
 * source's name. Out (each may be NULL): the vocabulary size, and the
 * tokenizer file the first source's dataset.json names (malloc'd; NULL
 * when none does). */
wf_status wf_mix_spec_check_tokenizer(const wf_mix_spec *spec, const char *tokenizer, const char *key,
                                      const char *tokenizer_key, uint32_t *vocab, char **tokenizer_path);

#endif
