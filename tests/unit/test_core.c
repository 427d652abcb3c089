/* Unit tests for src/core: config (TOML + overrides + errors), arena
 * counters, the Philox RNG against the published known-answer vectors,
 * the permutation, atomic files, error messages, the directory lock, the
 * lines of JSON Lines texts and the search of sorted arrays. */
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "weft/json.h"
#include "weft/lines.h"
#include "weft/sorted.h"
#include "weft/weft.h"

/* ------------------------------------------------------------ config */

typedef struct {
    int64_t dim;
    double lr;
    int tied;
    char *name;
    wf_strs inputs;
    int64_t top;
    wf_opt_named_list src; /* src.<name>.* */
    char *mode;            /* an enum option */
} cfg;

static const char *const cfg_modes[] = {"fast", "careful", "off", NULL};

static const wf_opt cfg_opts[] = {
    {"model.dim", "dim", WF_OPT_INT, offsetof(cfg, dim), "64", 1, 65536, "model width"},
    {"optim.lr", NULL, WF_OPT_FLOAT, offsetof(cfg, lr), "3e-4", 0, 10, "learning rate"},
    {"model.tied", NULL, WF_OPT_BOOL, offsetof(cfg, tied), "true", WF_NO_RANGE, "tie embeddings"},
    {"run.name", "name", WF_OPT_STR, offsetof(cfg, name), "run", WF_NO_RANGE, "run name"},
    {"data.inputs", NULL, WF_OPT_STRS, offsetof(cfg, inputs), NULL, WF_NO_RANGE, "inputs"},
    {"top", NULL, WF_OPT_INT, offsetof(cfg, top), "7", WF_NO_RANGE, "a top-level key"},
    {"src.<name>.weight", NULL, WF_OPT_FLOAT, offsetof(cfg, src), NULL, 0, 1, "weight of one source"},
    {"src.<name>.files", NULL, WF_OPT_STRS, offsetof(cfg, src), NULL, WF_NO_RANGE, "its files"},
    {"src.<name>.on", NULL, WF_OPT_BOOL, offsetof(cfg, src), NULL, WF_NO_RANGE, "use it"},
    {"src.<name>.label", NULL, WF_OPT_STR, offsetof(cfg, src), NULL, WF_NO_RANGE, "its label"},
    {"run.mode", "mode", WF_OPT_STR, offsetof(cfg, mode), "fast", WF_CHOICES(cfg_modes), .help = "how"},
};
static const wf_cmd_spec cfg_spec = {"test", "weft test [options] [ARG...]", "a test command", cfg_opts,
                                     sizeof cfg_opts / sizeof *cfg_opts, 0, -1, 0};

static wf_status parse_args(cfg *c, int argc, const char **argv, wf_strs *pos) {
    int help = 0;
    memset(c, 0, sizeof *c);
    return wf_opts_parse(&cfg_spec, c, argc, (char **)argv, pos, &help);
}

static const char *write_cfg(const char *text) {
    static char path[600];
    snprintf(path, sizeof path, "%s/run.toml", wf_test_tmpdir());
    wf_test_write_file(path, text, strlen(text));
    return path;
}

WF_TEST(config_defaults) {
    cfg c;
    wf_strs pos;
    WF_CHECK_OK(parse_args(&c, 0, NULL, &pos));
    WF_CHECK_EQ(c.dim, 64);
    WF_CHECK_NEAR(c.lr, 3e-4, 0);
    WF_CHECK_EQ(c.tied, 1);
    WF_CHECK_STREQ(c.name, "run");
    WF_CHECK_EQ(c.inputs.n, 0);
    WF_CHECK_EQ(c.top, 7);
    WF_CHECK_STREQ(c.mode, "fast");
    wf_opts_free(&cfg_spec, &c);
    wf_opts_free_positional(&pos);
}

WF_TEST(config_bool_flag_takes_an_optional_true_or_false) {
    cfg c;
    wf_strs pos;
    const char *a1[] = {"--model.tied", "false", "file.txt"};
    WF_CHECK_OK(parse_args(&c, 3, a1, &pos));
    WF_CHECK_EQ(c.tied, 0);
    WF_CHECK_EQ(pos.n, 1);
    WF_CHECK_STREQ(pos.items[0], "file.txt");
    wf_opts_free(&cfg_spec, &c);
    wf_opts_free_positional(&pos);
    const char *a2[] = {"--no-model.tied", "--model.tied", "true"};
    WF_CHECK_OK(parse_args(&c, 3, a2, &pos));
    WF_CHECK_EQ(c.tied, 1);
    WF_CHECK_EQ(pos.n, 0);
    wf_opts_free(&cfg_spec, &c);
    wf_opts_free_positional(&pos);
    /* a word other than true/false after a flag is a positional argument */
    const char *a3[] = {"--no-model.tied", "--model.tied", "yesterday"};
    WF_CHECK_OK(parse_args(&c, 3, a3, &pos));
    WF_CHECK_EQ(c.tied, 1);
    WF_CHECK_EQ(pos.n, 1);
    WF_CHECK_STREQ(pos.items[0], "yesterday");
    wf_opts_free(&cfg_spec, &c);
    wf_opts_free_positional(&pos);
}

WF_TEST(config_toml_and_overrides) {
    const char *path = write_cfg(
        "# a comment\n"
        "top = 1_000\n"
        "[model]\n"
        "dim = 0x100   # hex\n"
        "tied = false\n"
        "[optim]\n"
        "lr = 1.5e-3\n"
        "[run]\n"
        "name = \"caf\\u00e9 \\\"q\\\"\"\n"
        "[data]\n"
        "inputs = [\n  'a.txt',\n  \"b.jsonl\", # trailing comma\n]\n");
    char cfgarg[700];
    snprintf(cfgarg, sizeof cfgarg, "--config=%s", path);
    const char *argv[] = {"x.txt", "--model.dim=512", cfgarg, "--name", "mine", "--no-model.tied", "y"};
    cfg c;
    wf_strs pos;
    WF_CHECK_OK(parse_args(&c, 7, argv, &pos));
    WF_CHECK_EQ(c.top, 1000);
    WF_CHECK_EQ(c.dim, 512); /* the command line wins over the file, whatever the order */
    WF_CHECK_NEAR(c.lr, 1.5e-3, 0);
    WF_CHECK_EQ(c.tied, 0);
    WF_CHECK_STREQ(c.name, "mine");
    WF_CHECK_EQ(c.inputs.n, 2);
    WF_CHECK_STREQ(c.inputs.items[0], "a.txt");
    WF_CHECK_STREQ(c.inputs.items[1], "b.jsonl");
    WF_CHECK_EQ(pos.n, 2);
    WF_CHECK_STREQ(pos.items[0], "x.txt");
    WF_CHECK_STREQ(pos.items[1], "y");
    wf_opts_free(&cfg_spec, &c);
    wf_opts_free_positional(&pos);

    /* the file alone */
    const char *argv2[] = {cfgarg};
    WF_CHECK_OK(parse_args(&c, 1, argv2, &pos));
    WF_CHECK_EQ(c.dim, 256);
    WF_CHECK_STREQ(c.name, "caf\xc3\xa9 \"q\"");
    wf_opts_free(&cfg_spec, &c);
    wf_opts_free_positional(&pos);
}

WF_TEST(config_list_override_comma) {
    const char *argv[] = {"--data.inputs=a,b,c"};
    cfg c;
    wf_strs pos;
    WF_CHECK_OK(parse_args(&c, 1, argv, &pos));
    WF_CHECK_EQ(c.inputs.n, 3);
    WF_CHECK_STREQ(c.inputs.items[2], "c");
    wf_opts_free(&cfg_spec, &c);
    wf_opts_free_positional(&pos);
}

/* Each bad file must fail with a message naming file:line and the key. */
static void expect_file_error(const char *text, wf_status st, const char *needle) {
    const char *path = write_cfg(text);
    char cfgarg[700];
    snprintf(cfgarg, sizeof cfgarg, "--config=%s", path);
    const char *argv[] = {cfgarg};
    cfg c;
    wf_strs pos;
    WF_CHECK_ERR(parse_args(&c, 1, argv, &pos), st, needle);
    if (!strstr(wf_error_msg(), "run.toml:")) wf_test_fail(__FILE__, __LINE__, "no file in '%s'", wf_error_msg());
    wf_opts_free(&cfg_spec, &c);
    wf_opts_free_positional(&pos);
}

WF_TEST(config_errors_name_file_line_key) {
    expect_file_error("[model]\ndimm = 3\n", WF_ERR_CONFIG, "run.toml:2: unknown key 'model.dimm' (did you mean 'model.dim'?)");
    expect_file_error("[model]\n\ndim = \"big\"\n", WF_ERR_CONFIG, "run.toml:3: key 'model.dim' expects an integer, got a string");
    expect_file_error("[model]\ndim = 0\n", WF_ERR_RANGE, "run.toml:2: key 'model.dim' = 0 is out of range");
    expect_file_error("[optim]\nlr = 11.0\n", WF_ERR_RANGE, "key 'optim.lr' = 11 is out of range");
    expect_file_error("[model]\ntied = 1\n", WF_ERR_CONFIG, "key 'model.tied' expects true or false");
    expect_file_error("top = 1\ntop = 2\n", WF_ERR_CONFIG, "run.toml:2: key 'top' is defined twice (first on line 1)");
    expect_file_error("[model\n", WF_ERR_CONFIG, "run.toml:1: expected ']'");
    expect_file_error("top = \"open\n", WF_ERR_CONFIG, "run.toml:1:");
    expect_file_error("top = 1 2\n", WF_ERR_CONFIG, "unexpected text after value");
    expect_file_error("a = {x = 1}\n", WF_ERR_CONFIG, "inline tables are not supported");
    expect_file_error("[[t]]\n", WF_ERR_CONFIG, "arrays of tables");
    expect_file_error("top = 007\n", WF_ERR_CONFIG, "leading zeros");
    expect_file_error("[data]\ninputs = [1, 2]\n", WF_ERR_CONFIG, "item 0 is an integer");
}

/* The command line `argv` (argc words) fails with st and a message holding needle. */
static void expect_cli_error(int argc, const char **argv, wf_status st, const char *needle) {
    cfg c;
    wf_strs pos;
    WF_CHECK_ERR(parse_args(&c, argc, argv, &pos), st, needle);
    wf_opts_free(&cfg_spec, &c);
    wf_opts_free_positional(&pos);
}

WF_TEST(config_cli_errors) {
    const char *a1[] = {"--model.dim=abc"};
    expect_cli_error(1, a1, WF_ERR_CONFIG, "command line '--model.dim=abc': key 'model.dim' expects an integer");
    const char *a2[] = {"--dim=100000"};
    expect_cli_error(1, a2, WF_ERR_RANGE, "out of range");
    const char *a3[] = {"--bogus=1"};
    expect_cli_error(1, a3, WF_ERR_CONFIG, "unknown key 'bogus'");
    const char *a4[] = {"--dim"};
    expect_cli_error(1, a4, WF_ERR_CONFIG, "option needs a value");
    const char *a5[] = {"--config=/nonexistent/x.toml"};
    expect_cli_error(1, a5, WF_ERR_CONFIG, "/nonexistent/x.toml");
    /* A key with a named segment is checked under its full name, in both
     * forms of the command line. */
    const char *a6[] = {"--src.web.weight=abc"};
    expect_cli_error(1, a6, WF_ERR_CONFIG, "key 'src.web.weight' expects");
    const char *a7[] = {"--src.web.weight", "2"};
    expect_cli_error(2, a7, WF_ERR_RANGE, "src.web.weight");
}

/* An enum option takes only its declared values, from the command line and
 * from a file alike, says "did you mean" for a near miss, and
 * wf_opts_check_choices applies the same check to a struct filled in by
 * code. */
WF_TEST(config_enum_option) {
    const char *ok[] = {"--mode=careful"};
    cfg c;
    wf_strs pos;
    WF_CHECK_OK(parse_args(&c, 1, ok, &pos));
    WF_CHECK_STREQ(c.mode, "careful");
    WF_CHECK_OK(wf_opts_check_choices(&cfg_spec, &c));
    free(c.mode);
    c.mode = strdup("slow");
    WF_CHECK_ERR(wf_opts_check_choices(&cfg_spec, &c), WF_ERR_CONFIG,
                 "run.mode = 'slow': use fast, careful or off");
    wf_opts_free(&cfg_spec, &c);
    wf_opts_free_positional(&pos);
    const char *near[] = {"--run.mode=carefull"};
    expect_cli_error(1, near, WF_ERR_CONFIG,
                     "command line '--run.mode=carefull': run.mode = 'carefull' (did you mean 'careful'?): use "
                     "fast, careful or off");
    const char *far[] = {"--mode", "sideways"};
    expect_cli_error(2, far, WF_ERR_CONFIG, "run.mode = 'sideways': use fast, careful or off");
    const char *file = write_cfg("[run]\nmode = \"of\"\n");
    char arg[700];
    snprintf(arg, sizeof arg, "--config=%s", file);
    const char *from_file[] = {arg};
    expect_cli_error(1, from_file, WF_ERR_CONFIG, "run.toml:2: run.mode = 'of' (did you mean 'off'?)");
}

WF_TEST(config_help_lists_every_option) {
    char path[600];
    snprintf(path, sizeof path, "%s/help.txt", wf_test_tmpdir());
    FILE *fp = fopen(path, "w");
    WF_CHECK_TRUE(fp != NULL);
    wf_opts_print_help(&cfg_spec, fp);
    fclose(fp);
    char *text;
    size_t n;
    WF_CHECK_OK(wf_file_read(path, &text, &n));
    for (size_t i = 0; i < cfg_spec.n_opts; i++) WF_CHECK_TRUE(strstr(text, cfg_opts[i].key) != NULL);
    WF_CHECK_TRUE(strstr(text, "model width (default: 64; range 1..65536)") != NULL);
    WF_CHECK_TRUE(strstr(text, "how (default: fast; one of fast careful off)") != NULL);
    free(text);
}

WF_TEST(config_write_toml_round_trips) {
    const char *argv[] = {"--name=a \"b\"", "--data.inputs=x,y", "--optim.lr=0.1"};
    cfg c, c2;
    wf_strs pos;
    WF_CHECK_OK(parse_args(&c, 3, argv, &pos));
    wf_opts_free_positional(&pos);
    char path[600];
    snprintf(path, sizeof path, "%s/eff.toml", wf_test_tmpdir());
    FILE *fp = fopen(path, "w");
    wf_opts_write_toml(&cfg_spec, &c, fp);
    fclose(fp);
    char cfgarg[700];
    snprintf(cfgarg, sizeof cfgarg, "--config=%s", path);
    const char *argv2[] = {cfgarg};
    WF_CHECK_OK(parse_args(&c2, 1, argv2, &pos));
    WF_CHECK_STREQ(c2.name, c.name);
    WF_CHECK_NEAR(c2.lr, 0.1, 0);
    WF_CHECK_EQ(c2.inputs.n, 2);
    WF_CHECK_EQ(c2.dim, c.dim);
    wf_opts_free(&cfg_spec, &c);
    wf_opts_free(&cfg_spec, &c2);
    wf_opts_free_positional(&pos);
}

/* Keys with a named segment: values per name, sorted, replaced when given
 * again, checked like any key, and written back. */
WF_TEST(config_named_keys) {
    const char *path = write_cfg("[src.web]\nweight = 0.7\nfiles = [\"a\", \"b\"]\n\n"
                                 "[src.books]\nweight = 0.3\non = true\nlabel = \"old\"\n"
                                 "[src]\nzh-Hant.on = true\n");
    char cfgarg[700];
    snprintf(cfgarg, sizeof cfgarg, "--config=%s", path);
    const char *argv[] = {"--src.web.weight=0.5", cfgarg, "--no-src.books.on", "--src.code.on",
                          "--src.wiki.on", "false", "--src.books.label", "new", "x"};
    cfg c;
    wf_strs pos;
    WF_CHECK_OK(parse_args(&c, 9, argv, &pos));
    WF_CHECK_EQ(pos.n, 1);
    WF_CHECK_EQ(c.top, 7);
    /* books: weight, on, label; code: on; web: weight, files; wiki: on; zh-Hant: on */
    static const char *const want[][2] = {{"books", "src.<name>.weight"}, {"books", "src.<name>.on"},
                                          {"books", "src.<name>.label"},  {"code", "src.<name>.on"},
                                          {"web", "src.<name>.weight"},   {"web", "src.<name>.files"},
                                          {"wiki", "src.<name>.on"},      {"zh-Hant", "src.<name>.on"}};
    WF_CHECK_EQ(c.src.n, 8);
    for (size_t i = 0; i < c.src.n; i++) {
        WF_CHECK_STREQ(c.src.items[i].name, want[i][0]);
        WF_CHECK_STREQ(c.src.items[i].opt->key, want[i][1]);
    }
    WF_CHECK_NEAR(wf_opts_named_get(&cfg_spec, &c, "src.<name>.weight", "web")->f, 0.5, 0); /* the command line won */
    WF_CHECK_NEAR(wf_opts_named_get(&cfg_spec, &c, "src.<name>.weight", "books")->f, 0.3, 0);
    WF_CHECK_EQ(wf_opts_named_get(&cfg_spec, &c, "src.<name>.on", "books")->b, 0);
    WF_CHECK_EQ(wf_opts_named_get(&cfg_spec, &c, "src.<name>.on", "code")->b, 1);
    WF_CHECK_EQ(wf_opts_named_get(&cfg_spec, &c, "src.<name>.on", "wiki")->b, 0);
    WF_CHECK_STREQ(wf_opts_named_get(&cfg_spec, &c, "src.<name>.label", "books")->s, "new");
    const wf_strs *files = &wf_opts_named_get(&cfg_spec, &c, "src.<name>.files", "web")->l;
    WF_CHECK_EQ(files->n, 2);
    WF_CHECK_STREQ(files->items[1], "b");
    WF_CHECK_TRUE(wf_opts_named_get(&cfg_spec, &c, "src.<name>.weight", "code") == NULL);
    WF_CHECK_TRUE(wf_opts_named_get(&cfg_spec, &c, "src.<name>.nope", "web") == NULL);
    wf_opts_free_positional(&pos);

    /* Written back and read again: the same values. */
    char out[600];
    snprintf(out, sizeof out, "%s/eff.toml", wf_test_tmpdir());
    FILE *fp = fopen(out, "w");
    wf_opts_write_toml(&cfg_spec, &c, fp);
    fclose(fp);
    char *text;
    size_t n;
    WF_CHECK_OK(wf_file_read(out, &text, &n));
    WF_CHECK_TRUE(strstr(text, "src.web.files = [\"a\", \"b\"]\n") != NULL);
    WF_CHECK_TRUE(strstr(text, "src.zh-Hant.on = true\n") != NULL);
    WF_CHECK_TRUE(strstr(text, "<name>") == NULL);
    free(text);
    cfg c2;
    snprintf(cfgarg, sizeof cfgarg, "--config=%s", out);
    const char *argv2[] = {cfgarg};
    WF_CHECK_OK(parse_args(&c2, 1, argv2, &pos));
    WF_CHECK_EQ(c2.src.n, c.src.n);
    for (size_t i = 0; i < c.src.n; i++) {
        WF_CHECK_STREQ(c2.src.items[i].name, c.src.items[i].name);
        WF_CHECK_TRUE(c2.src.items[i].opt == c.src.items[i].opt);
    }
    WF_CHECK_NEAR(wf_opts_named_get(&cfg_spec, &c2, "src.<name>.weight", "web")->f, 0.5, 0);
    wf_opts_free(&cfg_spec, &c);
    wf_opts_free(&cfg_spec, &c2);
    WF_CHECK_EQ(c2.src.n, 0);
    wf_opts_free_positional(&pos);

    /* Errors name the key as written, with its name. */
    expect_file_error("[src.web]\nweight = 2\n", WF_ERR_RANGE, "run.toml:2: key 'src.web.weight' = 2 is out of range");
    expect_file_error("[src.web]\nfiles = 3\n", WF_ERR_CONFIG, "key 'src.web.files' expects an array of strings");
    expect_file_error("[src.web]\nweigth = 1\n", WF_ERR_CONFIG, "unknown key 'src.web.weigth' (did you mean 'src.web.weight'?)");
    expect_file_error("[src]\nweight = 1\n", WF_ERR_CONFIG, "unknown key 'src.weight' (did you mean 'src.<name>.weight'?)");
    expect_file_error("[src.\"a.b\"]\nweight = 0.1\n", WF_ERR_CONFIG, "unknown key 'src.a.b.weight'");
    expect_file_error("[src.\"a b\"]\nweight = 0.1\n", WF_ERR_CONFIG, "unknown key 'src.a b.weight'");
    const char *a1[] = {"--src.web.weight=x"};
    WF_CHECK_ERR(parse_args(&c, 1, a1, &pos), WF_ERR_CONFIG, "command line '--src.web.weight=x': key 'src.web.weight' expects a number");
    wf_opts_free(&cfg_spec, &c);
    wf_opts_free_positional(&pos);
    const char *a2[] = {"--src..weight=0.1"};
    WF_CHECK_ERR(parse_args(&c, 1, a2, &pos), WF_ERR_CONFIG, "unknown key 'src..weight'");
    wf_opts_free(&cfg_spec, &c);
    wf_opts_free_positional(&pos);
    const char *a3[] = {"--no-src.web.weight"};
    WF_CHECK_ERR(parse_args(&c, 1, a3, &pos), WF_ERR_CONFIG, "unknown key 'no-src.web.weight'");
    wf_opts_free(&cfg_spec, &c);
    wf_opts_free_positional(&pos);
}

/* ------------------------------------------------------------ arena */

WF_TEST(arena_counters_and_alignment) {
    wf_arena *a;
    WF_CHECK_OK(wf_arena_create(&a, 1 << 16));
    float *x = wf_arena_alloc(a, 1000 * sizeof(float), 64);
    WF_CHECK_TRUE(x && ((uintptr_t)x % 64) == 0);
    for (int i = 0; i < 1000; i++) WF_CHECK_TRUE(x[i] == 0.0f);
    wf_arena_stats s = wf_arena_get_stats(a);
    WF_CHECK_TRUE(s.in_use >= 4000 && s.in_use < 4000 + 64);
    WF_CHECK_EQ(s.reserved, 1 << 16);
    wf_arena_mark m = wf_arena_get_mark(a);
    void *big = wf_arena_alloc(a, 1 << 20, 4096); /* larger than a chunk: its own chunk */
    WF_CHECK_TRUE(big && ((uintptr_t)big % 4096) == 0);
    s = wf_arena_get_stats(a);
    WF_CHECK_TRUE(s.reserved > (1 << 20));
    size_t peak = s.peak;
    WF_CHECK_TRUE(peak >= (1 << 20) + 4000);
    wf_arena_release(a, m);
    s = wf_arena_get_stats(a);
    WF_CHECK_TRUE(s.in_use < 4000 + 64);
    WF_CHECK_EQ(s.peak, peak); /* peak survives releases */
    wf_arena_reset(a);
    WF_CHECK_EQ(wf_arena_get_stats(a).in_use, 0);
    WF_CHECK_TRUE(wf_arena_alloc(a, 10, 3) == NULL); /* not a power of two */
    WF_CHECK_TRUE(strstr(wf_error_msg(), "alignment 3") != NULL);
    wf_arena_destroy(a);
    wf_arena_destroy(NULL);
}

/* The plan-only arena (weft plan) counts exactly as a real arena of the
 * same chunk size, across chunks, alignments, a block larger than a chunk,
 * a release and a reset, and hands out no memory: its blocks are never
 * touched here (writing one would fault). */
WF_TEST(arena_plan_only_counts_as_a_real_one) {
    wf_arena *real, *plan;
    WF_CHECK_OK(wf_arena_create(&real, 1 << 16));
    WF_CHECK_OK(wf_arena_create_plan(&plan, 1 << 16));
    WF_CHECK_TRUE(wf_arena_plan_only(plan) && !wf_arena_plan_only(real) && !wf_arena_plan_only(NULL));
    const size_t sizes[] = {1000, 3, 70000, 64, 1, 40000, 5000, 1 << 18, 17};
    const size_t aligns[] = {64, 16, 4096, 64, 0, 256, 64, 4096, 8};
    wf_arena_mark mr = {0}, mp = {0};
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            if (i == 4) mr = wf_arena_get_mark(real), mp = wf_arena_get_mark(plan);
            char *r = wf_arena_alloc(real, sizes[i], aligns[i]);
            char *p = wf_arena_alloc(plan, sizes[i], aligns[i]);
            WF_CHECK_TRUE(r != NULL && p != NULL);
            size_t al = aligns[i] ? aligns[i] : 64;
            WF_CHECK_EQ((uintptr_t)p % al, 0);
            wf_arena_stats a = wf_arena_get_stats(real), b = wf_arena_get_stats(plan);
            WF_CHECK_EQ(a.in_use, b.in_use);
            WF_CHECK_EQ(a.peak, b.peak);
            WF_CHECK_EQ(a.reserved, b.reserved);
            WF_CHECK_EQ(a.n_allocs, b.n_allocs);
        }
        wf_arena_release(real, mr);
        wf_arena_release(plan, mp);
        WF_CHECK_EQ(wf_arena_get_stats(real).in_use, wf_arena_get_stats(plan).in_use);
        if (round == 1) break;
        wf_arena_reset(real);
        wf_arena_reset(plan);
    }
    wf_arena_destroy(real);
    wf_arena_destroy(plan);
}

/* ------------------------------------------------------------ rng */

WF_TEST(rng_philox_known_answers) {
    /* Known-answer tests from the Random123 distribution (kat_vectors). */
    uint32_t out[4];
    uint32_t c0[4] = {0, 0, 0, 0}, k0[2] = {0, 0};
    wf_philox4x32(c0, k0, out);
    WF_CHECK_EQ(out[0], 0x6627e8d5u);
    WF_CHECK_EQ(out[1], 0xe169c58du);
    WF_CHECK_EQ(out[2], 0xbc57ac4cu);
    WF_CHECK_EQ(out[3], 0x9b00dbd8u);
    uint32_t c1[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, k1[2] = {0xffffffffu, 0xffffffffu};
    wf_philox4x32(c1, k1, out);
    WF_CHECK_EQ(out[0], 0x408f276du);
    WF_CHECK_EQ(out[1], 0x41c83b0eu);
    WF_CHECK_EQ(out[2], 0xa20bc7c6u);
    WF_CHECK_EQ(out[3], 0x6d5451fdu);
    uint32_t c2[4] = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, k2[2] = {0xa4093822u, 0x299f31d0u};
    wf_philox4x32(c2, k2, out);
    WF_CHECK_EQ(out[0], 0xd16cfe09u);
    WF_CHECK_EQ(out[1], 0x94fdccebu);
    WF_CHECK_EQ(out[2], 0x5001e420u);
    WF_CHECK_EQ(out[3], 0x24126ea1u);
}

WF_TEST(rng_streams_reproducible_and_distributed) {
    wf_rng a = wf_rng_make(42, 1), b = wf_rng_make(42, 1), c = wf_rng_make(42, 2);
    int differ = 0;
    for (int i = 0; i < 100; i++) {
        uint64_t x = wf_rng_u64(&a), y = wf_rng_u64(&b), z = wf_rng_u64(&c);
        WF_CHECK_EQ(x, y);
        differ += x != z;
        WF_CHECK_EQ(wf_rng_at(42, 1, (uint64_t)i), x); /* random access */
    }
    WF_CHECK_TRUE(differ > 95);
    /* moments of 100k normals and uniforms */
    wf_rng r = wf_rng_make(7, 0);
    double s1 = 0, s2 = 0, u1 = 0;
    int n = 100000;
    for (int i = 0; i < n; i++) {
        double v = wf_rng_normal(&r);
        s1 += v;
        s2 += v * v;
        float u = wf_rng_uniform(&r);
        WF_CHECK_TRUE(u >= 0.0f && u < 1.0f);
        u1 += u;
    }
    WF_CHECK_NEAR(s1 / n, 0.0, 0.02);
    WF_CHECK_NEAR(s2 / n, 1.0, 0.02);
    WF_CHECK_NEAR(u1 / n, 0.5, 0.01);
    for (int i = 0; i < 1000; i++) WF_CHECK_TRUE(wf_rng_below(&r, 3) < 3);
}

WF_TEST(rng_permute_is_a_bijection) {
    uint64_t sizes[] = {1, 2, 3, 10, 17, 1000, 4097};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        uint64_t n = sizes[k];
        unsigned char *seen = calloc(n, 1);
        int moved = 0;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t p = wf_rng_permute(i, n, 123, 0);
            WF_CHECK_TRUE(p < n);
            WF_CHECK_TRUE(!seen[p]);
            seen[p] = 1;
            moved += p != i;
        }
        if (n >= 10) WF_CHECK_TRUE(moved > (int)n / 2);
        free(seen);
    }
    /* another round key gives another order */
    int same = 0;
    for (uint64_t i = 0; i < 1000; i++) same += wf_rng_permute(i, 1000, 123, 0) == wf_rng_permute(i, 1000, 123, 1);
    WF_CHECK_TRUE(same < 20);
}

/* ------------------------------------------------------------ files */

WF_TEST(fileio_atomic_write_and_read) {
    char path[600];
    snprintf(path, sizeof path, "%s/sub/dir", wf_test_tmpdir());
    WF_CHECK_OK(wf_mkdirs(path));
    WF_CHECK_TRUE(wf_path_is_dir(path));
    snprintf(path, sizeof path, "%s/sub/dir/f.bin", wf_test_tmpdir());
    WF_CHECK_OK(wf_file_write_atomic(path, "hello", 5));
    char *data;
    size_t n;
    WF_CHECK_OK(wf_file_read(path, &data, &n));
    WF_CHECK_EQ(n, 5);
    WF_CHECK_STREQ(data, "hello");
    free(data);
    /* an aborted write leaves the old file and no temporary */
    wf_afile f;
    WF_CHECK_OK(wf_afile_open(&f, path));
    fputs("partial", f.fp);
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s", f.tmp_path);
    wf_afile_abort(&f);
    WF_CHECK_TRUE(!wf_path_exists(tmp));
    WF_CHECK_OK(wf_file_read(path, &data, &n));
    WF_CHECK_STREQ(data, "hello");
    free(data);
    wf_mmap m;
    WF_CHECK_OK(wf_mmap_open(&m, path));
    WF_CHECK_EQ(m.size, 5);
    WF_CHECK_TRUE(memcmp(m.data, "hello", 5) == 0);
    wf_mmap_close(&m);
    WF_CHECK_ERR(wf_file_read("/nonexistent/file", &data, &n), WF_ERR_NOTFOUND, "/nonexistent/file");
    WF_CHECK_EQ(wf_hash64("abc", 3), wf_hash64("abc", 3));
    WF_CHECK_TRUE(wf_hash64("abc", 3) != wf_hash64("abd", 3));
    wf_hasher *h = wf_hasher_create();
    wf_hasher_update(h, "ab", 2);
    wf_hasher_update(h, "c", 1);
    WF_CHECK_EQ(wf_hasher_digest(h), wf_hash64("abc", 3));
    wf_hasher_destroy(h);
}

/* ------------------------------------------------------------ errors */

static wf_status inner(void) { return wf_error(WF_ERR_FORMAT, "bad magic"); }

WF_TEST(status_messages) {
    WF_CHECK_STREQ(wf_status_str(WF_ERR_CHECKSUM), "checksum mismatch");
    WF_CHECK_EQ(inner(), WF_ERR_FORMAT);
    WF_CHECK_EQ(wf_error_wrap(WF_ERR_FORMAT, "shard %d: ", 3), WF_ERR_FORMAT);
    WF_CHECK_STREQ(wf_error_msg(), "shard 3: bad magic");
    wf_error_clear();
    WF_CHECK_STREQ(wf_error_msg(), "");
}

/* A message with a path longer than the message buffer keeps its reason:
 * the path loses its middle, not the message its end. */
WF_TEST(long_path_keeps_the_reason) {
    char path[4200];
    memset(path, 'r', sizeof path - 1);
    memcpy(path, "/run/", 5);
    memcpy(path + sizeof path - 13, "/checkpoints", 13);
    wf_error(WF_ERR_IO, "%s: No such file or directory", path);
    const char *m = wf_error_msg();
    WF_CHECK_TRUE(strlen(m) == WF_ERROR_MSG_CAP - 1);
    WF_CHECK_TRUE(strncmp(m, "/run/rrr", 8) == 0);
    WF_CHECK_TRUE(strstr(m, "r...r") != NULL);
    WF_CHECK_TRUE(strstr(m, "rrr/checkpoints: No such file or directory") != NULL);
    /* wrapped in more context: still the reason at the end */
    wf_error_wrap(WF_ERR_IO, "saving %s: ", path);
    m = wf_error_msg();
    WF_CHECK_TRUE(strlen(m) < WF_ERROR_MSG_CAP);
    WF_CHECK_TRUE(strncmp(m, "saving /run/", 12) == 0);
    size_t n = strlen(m), tail = strlen(": No such file or directory");
    WF_CHECK_STREQ(m + n - tail, ": No such file or directory");
    /* a message whose words are all short is cut at its end */
    char words[3000];
    for (size_t i = 0; i < sizeof words - 1; i++) words[i] = i % 4 == 3 ? ' ' : 'w';
    words[sizeof words - 1] = '\0';
    wf_error(WF_ERR_IO, "%s", words);
    m = wf_error_msg();
    WF_CHECK_TRUE(strlen(m) == WF_ERROR_MSG_CAP - 1);
    WF_CHECK_STREQ(m + WF_ERROR_MSG_CAP - 4, "...");
    wf_error_clear();
}

typedef struct {
    int hits[4];
} par_ctx;

static wf_status par_task(void *ctx, int tid, int n) {
    par_ctx *p = ctx;
    p->hits[tid] = n;
    if (tid == 1) return wf_error(WF_ERR_IO, "thread %d failed", tid);
    return WF_OK;
}

WF_TEST(parallel_run_propagates_errors) {
    par_ctx p = {{0}};
    WF_CHECK_ERR(wf_parallel_run(3, par_task, &p), WF_ERR_IO, "thread 1 failed");
    WF_CHECK_EQ(p.hits[0], 3);
    WF_CHECK_EQ(p.hits[2], 3);
}

/* The first error survives cleanup that fails with its own message. */
static void failing_cleanup(void) { (void)wf_error(WF_ERR_IO, "cleanup: cannot remove tmp"); }

WF_TEST(error_keep_survives_cleanup) {
    wf_error_keep k = WF_ERROR_KEEP_INIT;
    WF_CHECK_EQ(wf_error_keep_note(&k, WF_OK), WF_OK);
    WF_CHECK_EQ(wf_error_keep_note(&k, wf_error(WF_ERR_FORMAT, "shard 3: bad magic")), WF_ERR_FORMAT);
    failing_cleanup();
    wf_error_keep_note(&k, WF_ERR_IO); /* a later error is not the first */
    WF_CHECK_EQ(wf_error_keep_restore(&k), WF_ERR_FORMAT);
    WF_CHECK_STREQ(wf_error_msg(), "shard 3: bad magic");
    wf_error_keep none = WF_ERROR_KEEP_INIT;
    failing_cleanup();
    WF_CHECK_EQ(wf_error_keep_restore(&none), WF_OK);
    WF_CHECK_STREQ(wf_error_msg(), "cleanup: cannot remove tmp"); /* nothing kept: left alone */
}

static wf_status try_inner(void) { return wf_error(WF_ERR_CONFIG, "model.dim must be even"); }
static wf_status try_outer(void) {
    WF_TRY(try_inner());
    return WF_OK;
}

/* WF_TRY forwards the status and message unchanged, and at debug level
 * logs the file and line it forwarded from (read back from stderr). */
WF_TEST(try_forwards_unchanged_and_logs_where) {
    char path[600];
    snprintf(path, sizeof path, "%s/stderr.txt", wf_test_tmpdir());
    fflush(stderr);
    int saved = dup(2);
    FILE *f = fopen(path, "w");
    WF_CHECK_TRUE(f != NULL && saved >= 0);
    dup2(fileno(f), 2);
    wf_log_level old = wf_log_get_level();
    wf_log_set_level(WF_LOG_DEBUG);
    wf_status s = try_outer();
    wf_log_set_level(old);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fclose(f);
    WF_CHECK_EQ(s, WF_ERR_CONFIG);
    WF_CHECK_STREQ(wf_error_msg(), "model.dim must be even");
    char log[4096] = "";
    f = fopen(path, "r");
    WF_CHECK_TRUE(f != NULL);
    size_t n = fread(log, 1, sizeof log - 1, f);
    log[n] = '\0';
    fclose(f);
    WF_CHECK_TRUE(strstr(log, "test_core.c:") != NULL);
    WF_CHECK_TRUE(strstr(log, "forwarded configuration error from try_inner(): model.dim must be even") != NULL);
}

static wf_status checked(int bucket, int next) {
    WF_CHECK(bucket == next, "bucket %d started while %d is next", bucket, next);
    return WF_OK;
}

WF_TEST(check_names_the_invariant) {
    WF_CHECK_OK(checked(2, 2));
    WF_CHECK_ERR(checked(3, 2), WF_ERR_INTERNAL, "invariant `bucket == next` does not hold: bucket 3 started while 2 is next");
    WF_CHECK_TRUE(strstr(wf_error_msg(), "test_core.c:") != NULL);
}

/* ------------------------------------------------------------ dirlock */

static const char *lock_dir(void) {
    static char dir[600];
    snprintf(dir, sizeof dir, "%s/run", wf_test_tmpdir());
    WF_CHECK_OK(wf_mkdirs(dir));
    return dir;
}

static void write_lock_file(const char *dir, const char *host, long long pid, double age_s) {
    char path[700], text[512];
    snprintf(path, sizeof path, "%s/" WF_DIRLOCK_FILE, dir);
    snprintf(text, sizeof text,
             "{\"format\":\"weft-dirlock\",\"version\":1,\"host\":\"%s\",\"pid\":%lld,\"started\":1764037800,"
             "\"command\":\"weft train\"}\n",
             host, pid);
    wf_test_write_file(path, text, strlen(text));
    struct timespec ts[2];
    clock_gettime(CLOCK_REALTIME, &ts[0]);
    ts[0].tv_sec -= (time_t)age_s;
    ts[1] = ts[0];
    WF_CHECK_TRUE(utimensat(AT_FDCWD, path, ts, 0) == 0);
}

static void my_host(char *buf, size_t n) {
    WF_CHECK_TRUE(gethostname(buf, n) == 0);
}

/* Takes DIR's lock over (it must succeed), checks that the lock now names
 * this process, and releases it. */
static void expect_taken_over(const char *dir) {
    wf_dirlock *l = NULL;
    WF_CHECK_OK(wf_dirlock_acquire(&l, dir, NULL));
    char who[512], want[64];
    WF_CHECK_EQ(wf_dirlock_describe(dir, who, sizeof who), 0);
    snprintf(want, sizeof want, "pid %ld,", (long)getpid());
    WF_CHECK_TRUE(strstr(who, want) != NULL);
    wf_dirlock_release(l);
}

/* A second job on the same directory fails at once, naming the holder; the
 * lock is gone after release and can be taken again. */
WF_TEST(dirlock_second_job_is_refused) {
    const char *dir = lock_dir();
    wf_dirlock_opts o = {.command = "weft train", .what = "run directory"};
    wf_dirlock *a = NULL, *b = NULL;
    WF_CHECK_OK(wf_dirlock_acquire(&a, dir, &o));
    char host[256], want[400];
    my_host(host, sizeof host);
    snprintf(want, sizeof want, "in use by another job (host %s, pid %ld, started ", host, (long)getpid());
    WF_CHECK_ERR(wf_dirlock_acquire(&b, dir, &o), WF_ERR_INVALID, want);
    WF_CHECK_TRUE(strstr(wf_error_msg(), "weft train") != NULL);
    WF_CHECK_TRUE(b == NULL);
    char who[512];
    WF_CHECK_EQ(wf_dirlock_describe(dir, who, sizeof who), 0);
    wf_dirlock_release(a);
    WF_CHECK_EQ(wf_dirlock_describe(dir, who, sizeof who), -1);
    WF_CHECK_OK(wf_dirlock_acquire(&b, dir, &o));
    wf_dirlock_release(b);
    WF_CHECK_ERR(wf_dirlock_acquire(&b, "/nonexistent/weft-run", &o), WF_ERR_NOTFOUND, "does not exist");
}

/* A lock whose process is gone (this host) is taken over. */
WF_TEST(dirlock_dead_pid_is_taken_over) {
    const char *dir = lock_dir();
    char host[256];
    my_host(host, sizeof host);
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0); /* its pid now names no process */
    write_lock_file(dir, host, (long long)child, 0);
    expect_taken_over(dir);
    /* A live process of this host (our parent) keeps its lock, however old. */
    wf_dirlock *l = NULL;
    write_lock_file(dir, host, (long long)getppid(), 1e6);
    WF_CHECK_ERR(wf_dirlock_acquire(&l, dir, NULL), WF_ERR_INVALID, "in use by another job");
}

/* A holder that was killed but not yet reaped by its parent is a zombie:
 * kill(pid, 0) still succeeds on it, yet it is gone and its lock is taken
 * over at once, without waiting for the heartbeat to go stale. */
WF_TEST(dirlock_zombie_pid_is_taken_over) {
    const char *dir = lock_dir();
    char host[256];
    my_host(host, sizeof host);
    /* The child waits on a pipe whose write end only this process holds,
     * so it ends with this test however the test ends. */
    int hold[2];
    WF_CHECK_TRUE(pipe(hold) == 0);
    pid_t child = fork();
    if (child == 0) {
        char c;
        close(hold[1]);
        while (read(hold[0], &c, 1) > 0) {}
        _exit(0);
    }
    WF_CHECK_TRUE(child > 0);
    close(hold[0]);
    /* A live holder keeps its lock, however old its heartbeat. */
    write_lock_file(dir, host, (long long)child, 1e6);
    wf_dirlock *l = NULL;
    WF_CHECK_ERR(wf_dirlock_acquire(&l, dir, NULL), WF_ERR_INVALID, "in use by another job");
    WF_CHECK_TRUE(kill(child, SIGKILL) == 0);
    /* Waits until it has died but leaves it unreaped (WNOWAIT). */
    siginfo_t si;
    memset(&si, 0, sizeof si);
    WF_CHECK_TRUE(waitid(P_PID, (id_t)child, &si, WEXITED | WNOWAIT) == 0);
    WF_CHECK_TRUE(kill(child, 0) == 0); /* what the lock once went by */
    write_lock_file(dir, host, (long long)child, 0); /* a fresh heartbeat */
    expect_taken_over(dir);
    WF_CHECK_TRUE(waitpid(child, NULL, 0) == child);
    close(hold[1]);
}

/* Another host's lock (a shared filesystem): live while its heartbeat is
 * recent, taken over once it is older than stale_seconds. */
WF_TEST(dirlock_foreign_host_goes_by_heartbeat) {
    const char *dir = lock_dir();
    wf_dirlock_opts o = {.stale_seconds = 60};
    wf_dirlock *l = NULL;
    write_lock_file(dir, "node-0042.cluster.example", 4242, 5);
    WF_CHECK_ERR(wf_dirlock_acquire(&l, dir, &o), WF_ERR_INVALID, "host node-0042.cluster.example, pid 4242");
    write_lock_file(dir, "node-0042.cluster.example", 4242, 120);
    WF_CHECK_OK(wf_dirlock_acquire(&l, dir, &o));
    wf_dirlock_release(l);
}

/* The holder's heartbeat thread keeps the file's time fresh. */
WF_TEST(dirlock_heartbeat_refreshes) {
    const char *dir = lock_dir();
    wf_dirlock_opts o = {.stale_seconds = 10, .heartbeat_seconds = 0.05};
    wf_dirlock *l = NULL;
    WF_CHECK_OK(wf_dirlock_acquire(&l, dir, &o));
    char path[700];
    snprintf(path, sizeof path, "%s/" WF_DIRLOCK_FILE, dir);
    struct timespec ts[2] = {{0, 0}, {1000, 0}}; /* an ancient time */
    WF_CHECK_TRUE(utimensat(AT_FDCWD, path, ts, 0) == 0);
    struct stat st;
    for (int i = 0; i < 100; i++) {
        usleep(20000);
        WF_CHECK_TRUE(stat(path, &st) == 0);
        if (st.st_mtim.tv_sec > 1000) break;
    }
    WF_CHECK_TRUE(st.st_mtim.tv_sec > 1000);
    wf_dirlock_release(l);
}

/* Eight processes start on one directory at the same moment: exactly one
 * gets the lock (link(2) is atomic), the others are refused. */
WF_TEST(dirlock_concurrent_start_one_wins) {
    const char *dir = lock_dir();
    enum { N = 8 };
    int go[2], res[2];
    WF_CHECK_TRUE(pipe(go) == 0 && pipe(res) == 0);
    pid_t kids[N];
    for (int i = 0; i < N; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            char c;
            close(go[1]);
            if (read(go[0], &c, 1) != 0) _exit(3); /* waits for the close below */
            wf_dirlock *l = NULL;
            char won = wf_dirlock_acquire(&l, dir, NULL) == WF_OK ? 'W' : 'L';
            if (won == 'L' && !strstr(wf_error_msg(), "in use by another job")) won = 'E';
            if (write(res[1], &won, 1) != 1) _exit(4);
            usleep(300000); /* hold it while the others try */
            wf_dirlock_release(l);
            _exit(0);
        }
    }
    close(go[0]);
    close(go[1]); /* every child's read returns now */
    int wins = 0, losses = 0;
    for (int i = 0; i < N; i++) {
        char c = 0;
        WF_CHECK_TRUE(read(res[0], &c, 1) == 1);
        wins += c == 'W';
        losses += c == 'L';
    }
    for (int i = 0; i < N; i++) waitpid(kids[i], NULL, 0);
    WF_CHECK_EQ(wins, 1);
    WF_CHECK_EQ(losses, N - 1);
}

/* ------------------------------------------------------------ sorted */

/* The edges, by hand: empty, before the first, the first, between, the
 * last, after the last, and a key repeated (lower bound at its first copy,
 * upper bound past its last). */
WF_TEST(sorted_u64_edges) {
    WF_CHECK_EQ(wf_sorted_u64_lower_bound(NULL, 0, 7), 0);
    WF_CHECK_EQ(wf_sorted_u64_upper_bound(NULL, 0, 7), 0);
    WF_CHECK_EQ(wf_sorted_u64_contains(NULL, 0, 7), 0);
    const uint64_t one[] = {5};
    WF_CHECK_EQ(wf_sorted_u64_lower_bound(one, 1, 4), 0);
    WF_CHECK_EQ(wf_sorted_u64_lower_bound(one, 1, 5), 0);
    WF_CHECK_EQ(wf_sorted_u64_lower_bound(one, 1, 6), 1);
    WF_CHECK_EQ(wf_sorted_u64_upper_bound(one, 1, 5), 1);
    const uint64_t a[] = {0, 3, 3, 3, 9, UINT64_MAX};
    const size_t n = sizeof a / sizeof *a;
    WF_CHECK_EQ(wf_sorted_u64_lower_bound(a, n, 0), 0);          /* first */
    WF_CHECK_EQ(wf_sorted_u64_upper_bound(a, n, 0), 1);
    WF_CHECK_EQ(wf_sorted_u64_lower_bound(a, n, 3), 1);          /* repeated */
    WF_CHECK_EQ(wf_sorted_u64_upper_bound(a, n, 3), 4);
    WF_CHECK_EQ(wf_sorted_u64_lower_bound(a, n, 4), 4);          /* absent, between */
    WF_CHECK_EQ(wf_sorted_u64_upper_bound(a, n, 4), 4);
    WF_CHECK_EQ(wf_sorted_u64_lower_bound(a, n, UINT64_MAX), 5); /* last */
    WF_CHECK_EQ(wf_sorted_u64_upper_bound(a, n, UINT64_MAX), 6);
    WF_CHECK_EQ(wf_sorted_u64_lower_bound(a + 1, n - 2, 0), 0);  /* absent, before all */
    WF_CHECK_EQ(wf_sorted_u64_lower_bound(a, n - 1, 10), 5);     /* absent, after all */
    WF_CHECK_EQ(wf_sorted_u64_contains(a, n, 0), 1);
    WF_CHECK_EQ(wf_sorted_u64_contains(a, n, 3), 1);
    WF_CHECK_EQ(wf_sorted_u64_contains(a, n, UINT64_MAX), 1);
    WF_CHECK_EQ(wf_sorted_u64_contains(a, n, 4), 0);
    WF_CHECK_EQ(wf_sorted_u64_contains(a, n - 1, UINT64_MAX), 0);
}

/* Against a linear scan, on every prefix of arrays with runs of equal
 * keys, for every key from below the smallest to above the largest. */
WF_TEST(sorted_u64_matches_a_linear_scan) {
    uint64_t a[40];
    for (int trial = 0; trial < 50; trial++) {
        uint64_t v = 1;
        for (size_t i = 0; i < 40; i++) {
            v += wf_rng_at(7, (uint64_t)trial, i) % 3; /* steps of 0, 1 or 2 */
            a[i] = v;
        }
        for (size_t n = 0; n <= 40; n++) {
            for (uint64_t key = 0; key <= v + 1; key++) {
                size_t lo = 0, up = 0;
                while (lo < n && a[lo] < key) lo++;
                while (up < n && a[up] <= key) up++;
                WF_CHECK_EQ(wf_sorted_u64_lower_bound(a, n, key), lo);
                WF_CHECK_EQ(wf_sorted_u64_upper_bound(a, n, key), up);
                WF_CHECK_EQ(wf_sorted_u64_contains(a, n, key), lo < n && a[lo] == key);
            }
        }
    }
}

/* ------------------------------------------------------- buf, json, grow */

/* The one JSON escaper (weft/json.h): quote and backslash, the named
 * controls, other controls as \u00XX; UTF-8 and 0x7F as they are. */
WF_TEST(json_escape) {
    wf_buf b = {0};
    const char *s = "a\"b\\c\nd\te\x01 \xc3\xa9\b\f\r\x1f\x7f";
    WF_CHECK_OK(wf_buf_json_str(&b, s, strlen(s)));
    WF_CHECK_STREQ(b.data, "\"a\\\"b\\\\c\\nd\\te\\u0001 \xc3\xa9\\b\\f\\r\\u001f\x7f\"");
    WF_CHECK_EQ(b.len, strlen(b.data));
    WF_CHECK_EQ(wf_json_escaped_len(s, strlen(s)) + 2, b.len);
    /* The FILE sink writes the same bytes; NULL is null. */
    char path[600];
    snprintf(path, sizeof path, "%s/j.txt", wf_test_tmpdir());
    FILE *f = fopen(path, "w");
    WF_CHECK_TRUE(f != NULL);
    wf_json_fput_str(f, s);
    fputc(' ', f);
    wf_json_fput_str(f, NULL);
    fclose(f);
    char *got;
    size_t n;
    WF_CHECK_OK(wf_file_read(path, &got, &n));
    WF_CHECK_TRUE(n == b.len + 5 && memcmp(got, b.data, b.len) == 0 && strcmp(got + b.len, " null") == 0);
    free(got);
    wf_buf_free(&b);
}

/* A long string crosses the FILE sink's chunks unchanged. */
WF_TEST(json_escape_long) {
    char s[1000];
    for (size_t i = 0; i < sizeof s - 1; i++) s[i] = i % 7 == 0 ? '"' : (char)('a' + i % 26);
    s[sizeof s - 1] = '\0';
    wf_buf b = {0};
    WF_CHECK_OK(wf_buf_json_str(&b, s, strlen(s)));
    char path[600];
    snprintf(path, sizeof path, "%s/l.txt", wf_test_tmpdir());
    FILE *f = fopen(path, "w");
    wf_json_fput_str(f, s);
    fclose(f);
    char *got;
    size_t n;
    WF_CHECK_OK(wf_file_read(path, &got, &n));
    WF_CHECK_TRUE(n == b.len && memcmp(got, b.data, n) == 0);
    free(got);
    wf_buf_free(&b);
}

/* ------------------------------------------------------------ lines */

/* Lines end at '\n' and only there; blank ones are skipped but counted;
 * the last needs no newline; nothing past len is read (no NUL needed). */
WF_TEST(lines_split_skip_blank_and_count) {
    const char text[] = "a\n\n  \t\r\nbb\r\n\n  x y \nlastXYZ";
    wf_lines it;
    wf_lines_init(&it, text, sizeof text - 1 - 3);
    const char *line;
    size_t n;
    const char *want[] = {"a", "bb\r", "  x y ", "last"};
    const size_t want_no[] = {1, 4, 6, 7};
    for (int i = 0; i < 4; i++) {
        WF_CHECK_TRUE(wf_lines_next(&it, &line, &n));
        WF_CHECK_EQ(n, strlen(want[i]));
        WF_CHECK_TRUE(memcmp(line, want[i], n) == 0);
        WF_CHECK_EQ(it.lineno, want_no[i]);
    }
    WF_CHECK_TRUE(!wf_lines_next(&it, &line, &n));
    WF_CHECK_TRUE(!wf_lines_next(&it, &line, &n)); /* and stays at the end */
    WF_CHECK_EQ(it.lineno, 7);
    /* nothing, or nothing but blank lines */
    wf_lines_init(&it, "", 0);
    WF_CHECK_TRUE(!wf_lines_next(&it, &line, &n));
    WF_CHECK_EQ(it.lineno, 0);
    wf_lines_init(&it, "\n \n\r\n", 5);
    WF_CHECK_TRUE(!wf_lines_next(&it, &line, &n));
    WF_CHECK_EQ(it.lineno, 3);
}

/* JSON Lines: each line parsed alone; one that is not a JSON object or
 * array gives NULL at its own line number and the next goes on; a NUL
 * byte ends nothing but its line. */
WF_TEST(lines_json_values_and_bad_lines) {
    const char text[] = "{\"step\": 1}\n\nnot json\n[1, 2]\n{\"a\": 1} trailing\n\0\n  {\"step\": 2}  \r\n";
    wf_lines it;
    wf_lines_init(&it, text, sizeof text - 1);
    json_t *v;
    const size_t want_no[] = {1, 3, 4, 5, 6, 7};
    const int want_ok[] = {1, 0, 1, 0, 0, 1};
    for (int i = 0; i < 6; i++) {
        WF_CHECK_TRUE(wf_lines_next_json(&it, &v));
        WF_CHECK_EQ(it.lineno, want_no[i]);
        WF_CHECK_EQ(v != NULL, want_ok[i]);
        if (i == 0 || i == 5) WF_CHECK_EQ(json_integer_value(json_object_get(v, "step")), i == 0 ? 1 : 2);
        if (i == 2) WF_CHECK_EQ(json_array_size(v), 2);
        json_decref(v);
    }
    WF_CHECK_TRUE(!wf_lines_next_json(&it, &v));
}

WF_TEST(buf_append_printf_and_failure) {
    wf_buf b = {0};
    WF_CHECK_OK(wf_buf_puts(&b, "step "));
    WF_CHECK_OK(wf_buf_printf(&b, "%d/%s", 7, "ten"));
    WF_CHECK_STREQ(b.data, "step 7/ten");
    WF_CHECK_EQ(b.len, 10);
    for (int i = 0; i < 1000; i++) WF_CHECK_OK(wf_buf_append(&b, "0123456789", 10));
    WF_CHECK_EQ(b.len, 10010);
    WF_CHECK_TRUE(b.cap >= b.len + 1);
    /* A growth that cannot be met fails, and the buffer stays failed. */
    /* (A size no allocator could give, without asking one: sanitizers
     * abort on such requests.) */
    WF_CHECK_ERR(wf_buf_reserve(&b, (size_t)-1 - 5), WF_ERR_NOMEM, "cannot grow");
    WF_CHECK_TRUE(b.failed);
    WF_CHECK_ERR(wf_buf_append(&b, "x", 1), WF_ERR_NOMEM, "failed to grow earlier");
    WF_CHECK_EQ(b.len, 10010);
    wf_buf_free(&b);
    WF_CHECK_TRUE(b.data == NULL && b.len == 0 && !b.failed);
}

WF_TEST(grow_doubles_and_keeps_contents) {
    int *v = NULL;
    size_t cap = 0;
    WF_CHECK_OK(WF_GROW(v, cap, 1, 16));
    WF_CHECK_EQ(cap, 16);
    for (int i = 0; i < 16; i++) v[i] = i;
    WF_CHECK_OK(WF_GROW(v, cap, 17, 16));
    WF_CHECK_EQ(cap, 32);
    WF_CHECK_OK(WF_GROW(v, cap, 200, 16));
    WF_CHECK_EQ(cap, 256);
    WF_CHECK_OK(WF_GROW(v, cap, 10, 16)); /* enough already: unchanged */
    WF_CHECK_EQ(cap, 256);
    for (int i = 0; i < 16; i++) WF_CHECK_EQ(v[i], i);
    WF_CHECK_ERR(WF_GROW(v, cap, (size_t)-1 / 2, 16), WF_ERR_NOMEM, "too large");
    WF_CHECK_EQ(cap, 256); /* left as it was */
    free(v);
}

/* rm -r without following links: the tree goes, a link's target stays. */
WF_TEST(remove_tree) {
    char dir[600], path[700], keep[600];
    snprintf(dir, sizeof dir, "%s/tree", wf_test_tmpdir());
    snprintf(keep, sizeof keep, "%s/keep.txt", wf_test_tmpdir());
    wf_test_write_file(keep, "x", 1);
    snprintf(path, sizeof path, "%s/a/b/c", dir);
    WF_CHECK_OK(wf_mkdirs(path));
    snprintf(path, sizeof path, "%s/a/b/c/f.bin", dir);
    wf_test_write_file(path, "abc", 3);
    snprintf(path, sizeof path, "%s/a/link", dir);
    WF_CHECK_TRUE(symlink(keep, path) == 0);
    WF_CHECK_OK(wf_remove_tree(dir));
    WF_CHECK_TRUE(!wf_path_exists(dir));
    WF_CHECK_TRUE(wf_path_exists(keep));
    WF_CHECK_OK(wf_remove_tree(dir)); /* gone already: fine */
}

/* Free space of the filesystem under a path, and an error naming a path
 * that does not exist (the trainer's disk check is tested on a small
 * tmpfs by tests/py/test_train_guards.py). */
WF_TEST(fs_free) {
    uint64_t bytes = 0, inodes = 0;
    WF_CHECK_OK(wf_fs_free(wf_test_tmpdir(), &bytes, &inodes));
    WF_CHECK_TRUE(bytes > 0 && inodes > 0);
    WF_CHECK_ERR(wf_fs_free("/nonexistent/weft/dir", &bytes, &inodes), WF_ERR_IO, "/nonexistent/weft/dir");
}

/* ------------------------------------------------------------ paths */

/* A joined path that does not fit is refused, never cut: the message names
 * it and the bytes it needs, the buffer is left empty. */
WF_TEST(path_join_refuses_instead_of_cutting) {
    char buf[16];
    size_t need = 0;
    WF_CHECK_OK(wf_path_join(buf, sizeof buf, "run", "SAVE", &need));
    WF_CHECK_STREQ(buf, "run/SAVE");
    WF_CHECK_EQ(need, 9);
    WF_CHECK_OK(wf_path_join(buf, sizeof buf, "run/", "SAVE", NULL));
    WF_CHECK_STREQ(buf, "run/SAVE");
    WF_CHECK_OK(wf_path_join(buf, sizeof buf, "", "SAVE", NULL));
    WF_CHECK_STREQ(buf, "SAVE");
    WF_CHECK_OK(wf_path_join(buf, sizeof buf, "0123456789", "abcd", &need)); /* 15 + NUL: fits */
    WF_CHECK_STREQ(buf, "0123456789/abcd");
    WF_CHECK_ERR(wf_path_join(buf, sizeof buf, "0123456789", "abcde", &need), WF_ERR_RANGE,
                 "0123456789/abcde: the path is 16 bytes, longer than the 15 this place allows");
    WF_CHECK_EQ(need, 17);
    WF_CHECK_STREQ(buf, "");
    char big[32];
    WF_CHECK_OK(wf_path_joinf(big, sizeof big, "h", "rank-%05d.txt", 3));
    WF_CHECK_STREQ(big, "h/rank-00003.txt");
    WF_CHECK_ERR(wf_path_joinf(buf, sizeof buf, "h", "rank-%05d.txt", 3), WF_ERR_RANGE, "h/rank-00003.txt");
    /* in place: the directory is the buffer */
    char p[WF_PATH_MAX] = "runs/a";
    WF_CHECK_OK(wf_path_join(p, sizeof p, p, "tb", NULL));
    WF_CHECK_STREQ(p, "runs/a/tb");
}

/* Every entry of a run directory has its name, and a run directory near
 * WF_PATH_MAX gives an error naming the path, not a shorter path. */
WF_TEST(rundir_paths) {
    char buf[WF_PATH_MAX];
    WF_CHECK_OK(wf_rundir_path(buf, sizeof buf, "runs/x", WF_RUN_SAVE));
    WF_CHECK_STREQ(buf, "runs/x/SAVE");
    WF_CHECK_OK(wf_rundir_path(buf, sizeof buf, "runs/x", WF_RUN_CHECKPOINTS));
    WF_CHECK_STREQ(buf, "runs/x/checkpoints");
    for (int e = 0; e < WF_RUN_N_ENTRIES; e++) WF_CHECK_TRUE(strcmp(wf_rundir_name((wf_run_entry)e), "?") != 0);
    char dir[WF_PATH_MAX];
    memset(dir, 'r', sizeof dir - 8);
    dir[sizeof dir - 8] = '\0'; /* 4088 bytes: DIR/SAVE is 4093, DIR/checkpoints is not */
    WF_CHECK_OK(wf_rundir_path(buf, sizeof buf, dir, WF_RUN_SAVE));
    WF_CHECK_ERR(wf_rundir_path(buf, sizeof buf, dir, WF_RUN_CHECKPOINTS), WF_ERR_RANGE,
                 "rrr/checkpoints: the path is 4100 bytes, longer than the 4095 this place allows");
    WF_CHECK_STREQ(buf, "");
    WF_CHECK_ERR(wf_rundir_path(buf, sizeof buf, "r", WF_RUN_N_ENTRIES), WF_ERR_INVALID, "unknown entry");
}

/* docs/formats/run-dir.md's table and wf_run_entry name the same entries. */
WF_TEST(rundir_table_matches_docs) {
    const char *root = getenv("WEFT_ROOT");
    char path[WF_PATH_MAX];
    WF_CHECK_OK(wf_path_join(path, sizeof path, root ? root : ".", "docs/formats/run-dir.md", NULL));
    char *text;
    size_t n;
    WF_CHECK_OK(wf_file_read(path, &text, &n));
    int rows = 0;
    for (const char *l = strstr(text, "\n| `WF_RUN_"); l; l = strstr(l + 1, "\n| `WF_RUN_")) rows++;
    WF_CHECK_EQ(rows, WF_RUN_N_ENTRIES);
    for (int e = 0; e < WF_RUN_N_ENTRIES; e++) {
        char cell[128];
        snprintf(cell, sizeof cell, "` | `%s` |", wf_rundir_name((wf_run_entry)e));
        if (!strstr(text, cell)) wf_test_fail(__FILE__, __LINE__, "run-dir.md has no row for %s", cell);
    }
    free(text);
}
