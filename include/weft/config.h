/* weft: configuration. TOML files plus command-line overrides, bound to a
 * C struct through a table of options.
 *
 * A command declares its options once (key, type, default, range, help) in a
 * wf_cmd_spec. wf_opts_parse then:
 *   1. applies every default,
 *   2. loads `--config FILE` (TOML: tables, dotted keys, strings, integers,
 *      floats, booleans, arrays) if given,
 *   3. applies command-line options in order: `--section.key=value`,
 *      `--section.key value`, the short alias `--flag=value` / `--flag value`,
 *      and `--flag` / `--no-flag` for booleans.
 * Unknown keys, wrong types and out-of-range values are errors that name the
 * file and line (or the command-line argument) and the key.
 *
 * Keys with a named segment. One segment of an option's key may be a name
 * in angle brackets, "quality.<lang>.min_words": it stands for any bare key
 * ([A-Za-z0-9_-]+), so `[quality.de] min_words = 20` and
 * `--quality.fr.min_words=30` are values of that option for "de" and "fr".
 * Such an option has no default; its offset is that of a wf_opt_named_list
 * in the destination struct, which receives each value given, with its
 * name and option, for the command to apply as it sees fit (several such
 * options may share one list). Types and ranges are checked as for any
 * option.
 *
 * Supported TOML: comments, [table] and [a.b] headers, bare/quoted/dotted
 * keys, basic and literal strings (single and multi-line), integers (with _
 * and 0x/0o/0b), floats (with exponent, inf, nan), booleans, arrays (nested,
 * multi-line). Not supported, with a clear error: inline tables, arrays of
 * tables, dates.
 */
#ifndef WEFT_CONFIG_H
#define WEFT_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "weft/status.h"

typedef enum {
    WF_OPT_INT,   /* int64_t */
    WF_OPT_FLOAT, /* double */
    WF_OPT_BOOL,  /* int (0 or 1) */
    WF_OPT_STR,   /* char * (owned; freed by wf_opts_free); NULL default if def is NULL */
    WF_OPT_STRS   /* wf_strs (owned); on the command line, comma-separated or a TOML array */
} wf_opt_type;

typedef struct {
    char **items;
    size_t n;
} wf_strs;

typedef struct {
    const char *key;  /* "section.key" (the TOML key), or "key" for top level */
    const char *flag; /* short alias for the command line ("vocab-size"), or NULL */
    wf_opt_type type;
    size_t offset;    /* offsetof(struct, field) of the destination */
    const char *def;  /* default written as on the command line ("8192", "0.5", "true", "out") */
    double min, max;  /* inclusive range for INT and FLOAT, checked when min <= max */
    const char *help;
    /* A WF_OPT_STR option whose value is one of a declared set (an enum
     * option): the values, NULL-terminated; NULL for any string. Checked
     * where every value is checked (defaults included): another value is an
     * error that lists the set and, for a near miss, says "did you mean";
     * --help lists the set. Give it with WF_CHOICES in a table written in
     * order, or `.choices =`. */
    const char *const *choices;
} wf_opt;

/* The range fields of an enum option, for a table written in order:
 * {key, flag, WF_OPT_STR, offset, def, WF_CHOICES(values), .help = ...}. */
#define WF_CHOICES(values) 1.0, 0.0, .choices = (values)

/* A value of an option with a named segment. */
typedef union {
    int64_t i;  /* WF_OPT_INT */
    double f;   /* WF_OPT_FLOAT */
    int b;      /* WF_OPT_BOOL */
    char *s;    /* WF_OPT_STR (owned) */
    wf_strs l;  /* WF_OPT_STRS (owned) */
} wf_opt_value;

typedef struct {
    const wf_opt *opt; /* the option (of the spec's table) it is a value of */
    char *name;        /* what stood for the named segment ("de"), owned */
    wf_opt_value v;    /* of opt->type */
} wf_opt_named;

/* The values given for options with a named segment (those whose offset is
 * this list's), sorted by name and then by the options' order in the
 * table; a value given again replaces the earlier one. Freed by
 * wf_opts_free. */
typedef struct {
    wf_opt_named *items;
    size_t n, cap;
} wf_opt_named_list;

typedef struct {
    const char *name;            /* "tokenizer train" */
    const char *usage;           /* "weft tokenizer train [options] INPUT..." */
    const char *summary;         /* what the command does, a few sentences */
    const wf_opt *opts;
    size_t n_opts;
    int min_positional;          /* required positional arguments */
    int max_positional;          /* -1: unlimited */
    /* Where wf_opts_parse records which keys the user gave: the offset in
     * the destination struct of an unsigned char[n_opts] (index = the
     * option's index in `opts`) set to 1 for each key a config file or the
     * command line assigned, 0 for a key left at its default; 0 (the
     * default when the member is left out): not recorded. */
    size_t given_offset;
} wf_cmd_spec;

#define WF_NO_RANGE 1.0, 0.0

/* Parses defaults, --config and argv (argv[0] is the first option, not the
 * program name) into `dst`. Positional arguments are returned in
 * `positional` as pointers into argv: free the array with
 * wf_opts_free_positional, not the strings. Sets *help to 1 and returns
 * WF_OK without parsing further when -h/--help is present. */
wf_status wf_opts_parse(const wf_cmd_spec *spec, void *dst, int argc, char **argv,
                        wf_strs *positional, int *help);

/* Whether the user gave `key` (a config file or the command line), for a
 * spec that records it (given_offset); 0 for a key left at its default, an
 * unknown key, or a spec that does not record. */
int wf_opts_given(const wf_cmd_spec *spec, const void *dst, const char *key);

/* Fills `dst` with every default of `spec` (no file, no command line, no
 * positional arguments needed); free with wf_opts_free. */
wf_status wf_opts_defaults(const wf_cmd_spec *spec, void *dst);

/* The value given for option `key` (written with its named segment,
 * "quality.<lang>.min_words") and `name`, or NULL. */
const wf_opt_value *wf_opts_named_get(const wf_cmd_spec *spec, const void *dst, const char *key,
                                      const char *name);

/* Whether every enum option (wf_opt.choices) of `dst` holds one of its
 * values, with wf_opts_parse's message otherwise: for a struct filled in
 * by code rather than parsed. */
wf_status wf_opts_check_choices(const wf_cmd_spec *spec, const void *dst);

/* Frees the strings wf_opts_parse stored in `dst` (and the named values). */
void wf_opts_free(const wf_cmd_spec *spec, void *dst);
/* Frees the array (not the strings, which belong to argv). */
void wf_opts_free_positional(wf_strs *positional);

/* Prints usage, summary and every option with its type, default and help. */
void wf_opts_print_help(const wf_cmd_spec *spec, FILE *out);

/* Writes the effective configuration as TOML (for run records): every
 * option, then every named value (`quality.de.min_words = 20`). */
void wf_opts_write_toml(const wf_cmd_spec *spec, const void *dst, FILE *out);

void wf_strs_free(wf_strs *s);

#endif
