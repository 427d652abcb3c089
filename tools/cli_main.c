/* weft: the command-line entry point. Dispatches to subcommands; only this
 * file's main() decides the process exit status. Subcommands use only the
 * public API in include/weft/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "weft/comm.h"
#include "weft/backend.h"
#include "weft/weft.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} tool_cmd;

/* The command line as main() received it, for wf_tool_argv. */
static int tool_argc;
static char **tool_argv;

static int cmd_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("weft %s\n", WF_VERSION);
    return 0;
}

static const tool_cmd commands[] = {
    {"version", cmd_version, "print weft's version"},
    {"prep", wf_cmd_prep, "crawled pages (WARC/WET/JSONL/text) to clean, deduplicated JSONL.zst documents"},
    {"tokenizer train", wf_cmd_tokenizer_train, "learn a byte-level BPE tokenizer.json from text"},
    {"tokenizer encode", wf_cmd_tokenizer_encode, "print the token ids of text"},
    {"tokenizer decode", wf_cmd_tokenizer_decode, "turn token ids back into text"},
    {"tokenizer info", wf_cmd_tokenizer_info, "describe a tokenizer.json"},
    {"tokenize", wf_cmd_tokenize, "encode text files into a dataset of token shards"},
    {"data inspect", wf_cmd_data_inspect, "show (and with --verify check) a tokenized dataset"},
    {"data dump", wf_cmd_data_dump, "print one document of a tokenized dataset"},
    {"data batch", wf_cmd_data_batch, "print a batch as the data loader serves it"},
    {"train", wf_cmd_train, "train a Llama-style model on a tokenized dataset"},
    {"plan", wf_cmd_plan, "per-rank memory of a training config in every sharding and recompute mode, the largest batch for a budget, bytes sent per step"},
    {"sample", wf_cmd_sample, "generate text from a trained model"},
    {"eval", wf_cmd_eval, "loss and bits per byte of checkpoints on datasets; --watch follows a training run"},
    {"trace request", wf_cmd_trace_request, "ask a running job to capture its next steps"},
    {"trace analyze", wf_cmd_trace_analyze, "analyse per-rank traces (breakdown, idle, top ops, overlap, stragglers)"},
    {"ckpt verify", wf_cmd_ckpt_verify, "check a checkpoint's manifest and every checksum"},
    {"ckpt inspect", wf_cmd_ckpt_inspect, "list what a checkpoint holds"},
    {"store ls", wf_cmd_store_ls, "list the objects (files) under an s3:// prefix or a local path"},
    {"store cp", wf_cmd_store_cp, "copy between local paths and s3:// objects (multipart for large files)"},
    {"store cat", wf_cmd_store_cat, "print an object or a byte range of it"},
    {"store rm", wf_cmd_store_rm, "remove objects"},
    {"store stat", wf_cmd_store_stat, "print an object's size"},
    {"export", wf_cmd_export, "write a checkpoint's model as a Hugging Face Llama directory"},
    {"report", wf_cmd_report, "write an HTML page with the plots of a training run"},
    {"ops-check", wf_cmd_ops_check, "check every op of a compute backend against the reference backend (--perf: time them)"},
    {"doctor", wf_cmd_doctor, "check the ranks' machines before a long job (under mpirun/srun): libraries, collectives, sgemm, memory, disk"},
};

static void usage(FILE *out) {
    fprintf(out, "weft %s: train Llama-style language models from raw web text\n\n"
                 "usage: weft <command> [options]   (weft <command> --help for its options)\n\ncommands:\n",
            WF_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(out, "  %-20s %s\n", commands[i].name, commands[i].summary);
}

/* Parses options for a command. Sets *done when the command should return
 * at once with the returned status: after printing --help (0) or an error
 * (1). Otherwise returns 0 with *done == 0. */
static int tool_parse(const wf_cmd_spec *spec, void *opts, int argc, char **argv, wf_strs *pos, int *done) {
    int help = 0;
    *done = 0;
    if (wf_opts_parse(spec, opts, argc, argv, pos, &help) != WF_OK) {
        *done = 1;
        return wf_tool_fail(spec->name);
    }
    if (help) {
        wf_opts_print_help(spec, stdout);
        *done = 1;
    }
    return 0;
}

int wf_tool_run(const wf_cmd_spec *spec, void *opts, size_t opts_size, int argc, char **argv, wf_tool_body body) {
    memset(opts, 0, opts_size);
    wf_strs pos = {0};
    int done;
    int rc = tool_parse(spec, opts, argc, argv, &pos, &done);
    if (!done) rc = body(opts, &pos);
    wf_opts_free(spec, opts);
    wf_opts_free_positional(&pos);
    return rc;
}

char **wf_tool_argv(int *argc) {
    *argc = tool_argc;
    return tool_argv;
}

wf_status wf_tool_device(const char *device) {
    wf_backend *be = NULL;
    char note[768], why[1024];
    if (wf_backend_open_device(&be, device, note, sizeof note) != WF_OK) {
        snprintf(why, sizeof why, "%s", wf_error_msg());
        return wf_error(WF_ERR_UNSUPPORTED, "--device %s: %s", device, why);
    }
    if (note[0]) WF_INFO("%s", note);
    if (be == wf_backend_cpu()) return WF_OK;
    snprintf(why, sizeof why, "%s", wf_backend_name(be));
    wf_backend_close(be);
    return wf_error(WF_ERR_UNSUPPORTED, "--device %s: the %s backend opened, but this command cannot run its model on it yet",
                    device, why);
}

int wf_tool_fail(const char *cmd) {
    wf_log_line("weft %s: error: %s", cmd, wf_error_msg()); /* whole, beside other ranks' lines */
    return 1;
}

/* Two settings that the OpenMP runtime and OpenBLAS read only when they
 * load, so weft restarts itself once with them set (docs/model.md):
 * - OPENBLAS_CORETYPE: Debian's OpenBLAS 0.3.21 takes its slow SSE kernels
 *   on CPUs it does not recognise;
 * - OMP_WAIT_POLICY=PASSIVE: idle OpenMP threads sleep instead of spinning,
 *   faster when other jobs share the cores, and no slower on a quiet
 *   machine.
 * bench/README.md, "Model step", has the figures for both.
 * Values the user set are left alone. */
static void runtime_settings(char **argv) {
    const char *core = getenv("OPENBLAS_CORETYPE") ? NULL : wf_kern_blas_better_core();
    int set_core = core && setenv("OPENBLAS_CORETYPE", core, 1) == 0;
    int set_wait = !getenv("OMP_WAIT_POLICY") && setenv("OMP_WAIT_POLICY", "PASSIVE", 1) == 0;
    if (!set_core && !set_wait) return;
    execv("/proc/self/exe", argv);
    /* exec failed: go on as we are, without pretending the settings apply */
    if (set_core) unsetenv("OPENBLAS_CORETYPE");
    if (set_wait) unsetenv("OMP_WAIT_POLICY");
}

int main(int argc, char **argv) {
    runtime_settings(argv);
    tool_argc = argc;
    tool_argv = argv;
    /* Under a launcher the ranks' output is merged: each printed line must
     * leave whole (stderr's are, weft/log.h). */
    if (strcmp(wf_comm_detect_backend(NULL), "single") != 0) wf_log_line_buffer_stdout();
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("weft %s\n", WF_VERSION);
        return 0;
    }
    /* Two-word commands ("tokenizer train") are matched before one-word. */
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
        const char *name = commands[i].name, *sp = strchr(name, ' ');
        if (sp && argc >= 3 && strncmp(argv[1], name, (size_t)(sp - name)) == 0 &&
            argv[1][sp - name] == '\0' && strcmp(argv[2], sp + 1) == 0)
            return commands[i].run(argc - 3, argv + 3);
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 2, argv + 2);
    int group = 0;
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
        const char *name = commands[i].name, *sp = strchr(name, ' ');
        if (sp && strncmp(argv[1], name, (size_t)(sp - name)) == 0 && argv[1][sp - name] == '\0') {
            if (!group) fprintf(stderr, "weft %s: needs a subcommand:\n", argv[1]);
            group = 1;
            fprintf(stderr, "  weft %-20s %s\n", name, commands[i].summary);
        }
    }
    if (group) return 2;
    fprintf(stderr, "weft: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
