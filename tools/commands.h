/* The weft CLI's subcommands. Each takes the arguments after its own name
 * (argv[0] is the first option) and returns the process exit status; each
 * is an option table and a body, run by wf_tool_run. */
#ifndef WEFT_TOOLS_COMMANDS_H
#define WEFT_TOOLS_COMMANDS_H

#include "weft/config.h"

/* What a command does once its options are parsed: runs with them (the
 * command's own struct) and the positional arguments, and returns the
 * process exit status (wf_tool_fail's 1 on an error). */
typedef int (*wf_tool_body)(void *opts, const wf_strs *pos);

/* A whole command: zeroes opts (opts_size bytes), parses argv by spec,
 * runs body unless --help was asked (printed: 0) or the command line was
 * wrong (printed: 1), then frees the options and positional arguments.
 * Returns the exit status. */
int wf_tool_run(const wf_cmd_spec *spec, void *opts, size_t opts_size, int argc, char **argv, wf_tool_body body);

/* The whole command line as main() received it ("weft train ..."), for a
 * body that records it (run.json). */
char **wf_tool_argv(int *argc);

/* The compute device a command's --device asked for (cpu, cuda, auto:
 * wf_backend_open_device): WF_OK on the cpu, and for auto when cuda does
 * not open (logged); an error that says why otherwise ("--device cuda:
 * ..."). The commands' models run on the cpu backend only, so far. */
wf_status wf_tool_device(const char *device);

/* Prints "weft <cmd>: error: <this thread's message>" and returns 1. */
int wf_tool_fail(const char *cmd);

/* tools/cmd_tokenize.c, tools/cmd_data.c */
int wf_cmd_tokenize(int argc, char **argv);
int wf_cmd_data_inspect(int argc, char **argv);
int wf_cmd_data_dump(int argc, char **argv);
int wf_cmd_data_batch(int argc, char **argv); /* tools/cmd_loader.c */
int wf_cmd_train(int argc, char **argv);      /* tools/cmd_train.c */
int wf_cmd_sample(int argc, char **argv);     /* tools/cmd_sample.c */
int wf_cmd_eval(int argc, char **argv);       /* tools/cmd_eval.c */
int wf_cmd_prep(int argc, char **argv);       /* tools/cmd_prep.c */
int wf_cmd_ckpt_verify(int argc, char **argv);  /* tools/cmd_ckpt.c */
int wf_cmd_ckpt_inspect(int argc, char **argv);
int wf_cmd_export(int argc, char **argv);       /* tools/cmd_export.c */
int wf_cmd_report(int argc, char **argv);     /* tools/cmd_report.c */
int wf_cmd_ops_check(int argc, char **argv);  /* tools/cmd_ops_check.c */
int wf_cmd_doctor(int argc, char **argv);     /* tools/cmd_doctor.c */
int wf_cmd_plan(int argc, char **argv);       /* tools/cmd_plan.c */

/* tools/cmd_tokenizer.c */
int wf_cmd_tokenizer_train(int argc, char **argv);
int wf_cmd_tokenizer_encode(int argc, char **argv);
int wf_cmd_tokenizer_decode(int argc, char **argv);
int wf_cmd_tokenizer_info(int argc, char **argv);

/* tools/cmd_store.c */
int wf_cmd_store_ls(int argc, char **argv);
int wf_cmd_store_cp(int argc, char **argv);
int wf_cmd_store_cat(int argc, char **argv);
int wf_cmd_store_rm(int argc, char **argv);
int wf_cmd_store_stat(int argc, char **argv);

/* tools/cmd_trace.c */
int wf_cmd_trace_request(int argc, char **argv);
int wf_cmd_trace_analyze(int argc, char **argv);


#endif
