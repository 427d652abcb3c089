/* The quality rules per language: the built-in rule sets and how the
 * configuration changes them.
 *
 * A document is judged by the rule set of its language (from language id;
 * "und" when that is off). A rule set's settings are, each one from the
 * first place that has it:
 *   1. the language's table in the config, [quality.<lang>];
 *   2. the built-in settings of the language, below;
 *   3. [quality], whose keys are every rule set's base.
 * A language with neither built-in settings nor a table is judged by the
 * rule set "default", whose built-in settings turn the rules that count
 * words off: those assume space-separated words and, for the stop-word
 * rule, a list of the language's own words, which weft has only for the
 * languages below. [quality.default] changes it like any other.
 *
 * Built in:
 *   - en de fr es it pt nl pl ru: word rules on, with the language's stop
 *     words; every threshold is [quality]'s (Gopher's, for English).
 *   - zh zh-Hant ja km my bo dz (written without spaces between words):
 *     rule set "no_spaces", word rules off. Their full stops count for C4's
 *     terminal punctuation and sentences (quality.c).
 *   - th lo (without spaces, and without sentence punctuation: a space
 *     ends a sentence): word rules off, and C4's terminal punctuation and
 *     sentence count off too, which would otherwise empty every page.
 *
 * The stop-word lists. The English list is Gopher's (Rae et al. 2021,
 * appendix A: "the, be, to, of, and, that, have, with"). The others are
 * this file's own choice, written for weft, not copied from any published
 * list: each language's commonest function words (articles, prepositions,
 * conjunctions, pronouns, forms of "to be"), the closed class of words
 * that heads every word-frequency count of a language and turns up in any
 * paragraph of running text but not in lists of keywords, menus or
 * scrambled text. They are longer than Gopher's eight where the language
 * spreads its commonest words over more forms (gender and number of
 * articles, contractions such as du, del, della). Words of one letter
 * (Spanish y, Italian e, Polish i w z, Russian и в с) are left out on
 * purpose, as Gopher's list leaves out "a": they also turn up in
 * initials, list markers and scrambled text. tests/py/test_prep_langs.py
 * checks them against the word counts of Debian's translated manual pages
 * (data/multilingual; de fr es pl ru): every word is among the 300
 * commonest of its language's pages, and each list covers more of them (5
 * to 26% of the words) than any other list does. Lists are lower case and
 * NFC; words are matched in lower case.
 */
#include <stdlib.h>
#include <string.h>

#include "prep/prep_impl.h"

/* Languages written without spaces and without sentence punctuation. */
static void no_sentence_marks(wf_prep_rules *r) {
    r->c4_terminal_punct = 0;
    r->c4_min_sentences = 0;
}

typedef struct {
    const char *lang;         /* a CLD2 code, or "default" */
    const char *rule_set;     /* the name of its rule set in the stats */
    int word_rules;
    const char *stop_words;   /* space-separated; NULL: none */
    void (*adjust)(wf_prep_rules *r); /* other settings, or NULL */
} builtin_lang;

static const builtin_lang builtins[] = {
    {"default", "default", 0, NULL, NULL},
    {"en", "en", 1, "the be to of and that have with", NULL},
    {"de", "de", 1, "der die das und in den von zu mit sich ist nicht", NULL},
    {"fr", "fr", 1, "de la le et les des en un une du est que dans pour qui", NULL},
    {"es", "es", 1, "de la que el en los del se las un una por con para es", NULL},
    {"it", "it", 1, "di il la che non per un una del della con sono le gli in", NULL},
    {"pt", "pt", 1, "de que do da em um uma para com não os no na por as", NULL},
    {"nl", "nl", 1, "de het een van en in is dat op te met voor niet die zijn", NULL},
    {"pl", "pl", 1, "na się nie do to że jest od jak po za co ale", NULL},
    {"ru", "ru", 1, "не на что по как это но из для от или так его", NULL},
    {"zh", "no_spaces", 0, NULL, NULL},
    {"zh-Hant", "no_spaces", 0, NULL, NULL},
    {"ja", "no_spaces", 0, NULL, NULL},
    {"km", "no_spaces", 0, NULL, NULL},
    {"my", "no_spaces", 0, NULL, NULL},
    {"bo", "no_spaces", 0, NULL, NULL},
    {"dz", "no_spaces", 0, NULL, NULL},
    {"th", "th", 0, NULL, no_sentence_marks},
    {"lo", "lo", 0, NULL, no_sentence_marks},
};
#define N_BUILTINS (sizeof builtins / sizeof *builtins)

/* Where each per-language key goes in wf_prep_rules. */
static const prep_rule_field rule_fields[] = {
#define PREP_RULE_FIELD_(key, type, field, def, range, help) {key, type, offsetof(wf_prep_rules, field)},
    PREP_RULE_KEYS(PREP_RULE_FIELD_)
#undef PREP_RULE_FIELD_
    {"stop_words", WF_OPT_STRS, offsetof(wf_prep_rules, stop_words)},
    {"word_rules", WF_OPT_BOOL, offsetof(wf_prep_rules, word_rules)},
};

const prep_rule_field *wf__prep_rule_fields(size_t *n) {
    *n = sizeof rule_fields / sizeof *rule_fields;
    return rule_fields;
}

static const builtin_lang *builtin_of(const char *lang) {
    for (size_t i = 0; i < N_BUILTINS; i++)
        if (strcmp(builtins[i].lang, lang) == 0) return &builtins[i];
    return NULL;
}

static void rules_free(wf_prep_rules *r) { wf_strs_free(&r->stop_words); }

/* Adds word[0, n), in lower case, to the stop words. */
static wf_status add_stop_word(wf_prep_rules *r, const char *lang, const char *w, size_t n) {
    char low[128];
    size_t len = wf__prep_word_lower(w, n, low, sizeof low);
    if (!len)
        return wf_error(WF_ERR_CONFIG, "quality.%s.stop_words: '%.*s' is not a word of at most 127 bytes of UTF-8",
                        lang, (int)n, w);
    char **items = realloc(r->stop_words.items, (r->stop_words.n + 1) * sizeof *items);
    if (!items) return wf_error(WF_ERR_NOMEM, "out of memory");
    r->stop_words.items = items;
    if (!(items[r->stop_words.n] = strdup(low))) return wf_error(WF_ERR_NOMEM, "out of memory");
    r->stop_words.n++;
    return WF_OK;
}

static wf_status set_stop_words(wf_prep_rules *r, const char *lang, const char *const *words, size_t n_words,
                                const char *spaced) {
    wf_strs_free(&r->stop_words);
    for (size_t i = 0; i < n_words; i++) WF_TRY(add_stop_word(r, lang, words[i], strlen(words[i])));
    for (const char *p = spaced; p && *p;) {
        while (*p == ' ') p++;
        size_t n = strcspn(p, " ");
        if (n) WF_TRY(add_stop_word(r, lang, p, n));
        p += n;
    }
    return WF_OK;
}

/* One value of the language's table onto its rules. */
static wf_status apply_named(wf_prep_rules *r, const wf_opt_named *it) {
    const char *key = strrchr(it->opt->key, '.') + 1;
    for (size_t k = 0; k < sizeof rule_fields / sizeof *rule_fields; k++) {
        const prep_rule_field *f = &rule_fields[k];
        if (strcmp(f->key, key) != 0) continue;
        void *dst = (char *)r + f->offset;
        switch (f->type) {
        case WF_OPT_INT: *(int64_t *)dst = it->v.i; break;
        case WF_OPT_FLOAT: *(double *)dst = it->v.f; break;
        case WF_OPT_BOOL: *(int *)dst = it->v.b; break;
        case WF_OPT_STRS:
            return set_stop_words(r, it->name, (const char *const *)it->v.l.items, it->v.l.n, NULL);
        case WF_OPT_STR: break;
        }
        return WF_OK;
    }
    return wf_error(WF_ERR_INTERNAL, "quality.%s.%s: no such rule setting", it->name, key);
}

static int cmp_rule_set(const void *a, const void *b) {
    return strcmp(((const prep_rule_set *)a)->lang, ((const prep_rule_set *)b)->lang);
}

/* The rule set of `lang`: base, built-in, then the table's values. */
static wf_status build_one(const wf_prep_config *c, const char *lang, prep_rule_set *rs) {
    memset(rs, 0, sizeof *rs);
    snprintf(rs->lang, sizeof rs->lang, "%s", lang);
    rs->r = c->rules;
    rs->r.stop_words = (wf_strs){0};
    rs->r.word_rules = 1; /* a language with a table but no built-in settings */
    const builtin_lang *b = builtin_of(lang);
    snprintf(rs->name, sizeof rs->name, "%s", b ? b->rule_set : lang);
    if (b) {
        rs->r.word_rules = b->word_rules;
        WF_TRY(set_stop_words(&rs->r, lang, NULL, 0, b->stop_words));
        if (b->adjust) b->adjust(&rs->r);
    }
    const wf_opt_named_list *l = &c->quality_langs;
    for (size_t i = 0; i < l->n; i++) {
        if (strcmp(l->items[i].name, lang) != 0) continue;
        WF_TRY(apply_named(&rs->r, &l->items[i]));
        /* Settings of its own: the rule set is the language's. */
        snprintf(rs->name, sizeof rs->name, "%s", lang);
    }
    return WF_OK;
}

wf_status wf__prep_rules_build(const wf_prep_config *c, prep_rule_sets *out) {
    memset(out, 0, sizeof *out);
    const wf_opt_named_list *l = &c->quality_langs;
    size_t cap = N_BUILTINS + l->n;
    out->v = calloc(cap, sizeof *out->v);
    if (!out->v) return wf_error(WF_ERR_NOMEM, "out of memory");
    wf_status s = WF_OK;
    for (size_t i = 0; i < N_BUILTINS && s == WF_OK; i++) {
        s = build_one(c, builtins[i].lang, &out->v[out->n]);
        out->n++;
    }
    for (size_t i = 0; i < l->n && s == WF_OK; i++) {
        const char *lang = l->items[i].name;
        if (strlen(lang) >= sizeof out->v->lang) {
            s = wf_error(WF_ERR_CONFIG, "quality.%s: '%s' is not a language code", lang, lang);
            break;
        }
        int seen = 0;
        for (size_t k = 0; k < out->n && !seen; k++) seen = strcmp(out->v[k].lang, lang) == 0;
        if (seen) continue;
        s = build_one(c, lang, &out->v[out->n]);
        out->n++;
    }
    if (s != WF_OK) {
        wf__prep_rules_free(out);
        return s;
    }
    qsort(out->v, out->n, sizeof *out->v, cmp_rule_set);
    return WF_OK;
}

const prep_rule_set *wf__prep_rules_find(const prep_rule_sets *s, const char *lang) {
    const prep_rule_set *def = NULL;
    for (size_t i = 0; i < s->n; i++) {
        if (strcmp(s->v[i].lang, lang) == 0) return &s->v[i];
        if (strcmp(s->v[i].lang, "default") == 0) def = &s->v[i];
    }
    return def;
}

void wf__prep_rules_free(prep_rule_sets *s) {
    for (size_t i = 0; i < s->n; i++) rules_free(&s->v[i].r);
    free(s->v);
    memset(s, 0, sizeof *s);
}
