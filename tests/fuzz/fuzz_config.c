/* Fuzz target: the TOML config and command-line overrides (src/core/config.c)
 * through the option tables of `weft train` and `weft prep`.
 *
 * Input: the bytes up to the first NUL are a TOML file given as --config;
 * the rest, split at NULs, are command-line arguments after it. Both
 * tables (train and prep) parse every input. When a parse succeeds,
 * the round trip must hold: the effective configuration written as TOML
 * (wf_opts_write_toml) parses again, to a configuration that writes the
 * same TOML. */
#include "fuzz.h"
#include "weft/config.h"
#include "weft/prep.h"
#include "weft/train.h"

enum { MAX_ARGS = 64 };

/* Parses --config `toml` plus args into dst; returns the status. */
static wf_status parse(const wf_cmd_spec *spec, void *dst, const char *toml, char **args, int n_args, int *help) {
    char *argv[MAX_ARGS + 3];
    int argc = 0;
    argv[argc++] = (char *)"--config";
    argv[argc++] = (char *)toml;
    for (int i = 0; i < n_args; i++) argv[argc++] = args[i];
    wf_strs pos = {0};
    *help = 0;
    wf_status s = wf_opts_parse(spec, dst, argc, argv, &pos, help);
    wf_opts_free_positional(&pos);
    return s;
}

static char *write_toml(const wf_cmd_spec *spec, const void *dst, const char *path, size_t *len) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    wf_opts_write_toml(spec, dst, f);
    if (fclose(f) != 0) abort();
    return fz_read(path, len);
}

static void run(const wf_cmd_spec *spec, const uint8_t *data, size_t size) {
    char in[4200], a[4200], b[4200];
    fz_path(in, sizeof in, "config.toml");
    fz_path(a, sizeof a, "written-a.toml");
    fz_path(b, sizeof b, "written-b.toml");

    const uint8_t *nul = memchr(data, 0, size);
    size_t toml_len = nul ? (size_t)(nul - data) : size;
    fz_write(in, data, toml_len);

    /* The arguments: NUL-terminated copies of the pieces after the TOML. */
    char *copy = NULL, *args[MAX_ARGS];
    int n_args = 0;
    if (nul) {
        size_t rest = size - toml_len - 1;
        copy = malloc(rest + 1);
        if (!copy) return;
        memcpy(copy, nul + 1, rest);
        copy[rest] = '\0';
        for (char *p = copy; p <= copy + rest && n_args < MAX_ARGS; p += strlen(p) + 1) args[n_args++] = p;
    }

    union {
        wf_train_config train;
        wf_prep_config prep;
    } x, y;
    memset(&x, 0, sizeof x);
    memset(&y, 0, sizeof y);
    int help;
    wf_status s = parse(spec, &x, in, args, n_args, &help);
    if (s == WF_OK && !help) {
        size_t la = 0, lb = 0;
        char *ta = write_toml(spec, &x, a, &la);
        /* The positional arguments are not part of the TOML: give them again. */
        char *pos[MAX_ARGS + 1];
        int n_pos = 0;
        pos[n_pos++] = (char *)"--"; /* they may look like options: after "--" they stay positional */
        wf_strs p = {0};
        char *argv[MAX_ARGS + 2];
        int argc = 0;
        for (int i = 0; i < n_args; i++) argv[argc++] = args[i];
        memset(&y, 0, sizeof y);
        if (wf_opts_parse(spec, &y, argc, argv, &p, &help) == WF_OK && !help)
            for (size_t i = 0; i < p.n && n_pos < MAX_ARGS + 1; i++) pos[n_pos++] = p.items[i];
        wf_opts_free(spec, &y);
        memset(&y, 0, sizeof y);
        wf_status s2 = parse(spec, &y, a, pos, n_pos, &help);
        wf_opts_free_positional(&p);
        FZ_CHECK(s2 == WF_OK, "the written config does not parse: %s", wf_error_msg());
        char *tb = write_toml(spec, &y, b, &lb);
        FZ_CHECK(la == lb && memcmp(ta, tb, la) == 0, "the config written again differs:\n%s\n----\n%s", ta, tb);
        free(ta);
        free(tb);
        wf_opts_free(spec, &y);
    }
    wf_opts_free(spec, &x);
    wf_error_clear();
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    run(wf_train_spec(), data, size);
    run(wf_prep_spec(), data, size);
    return 0;
}
