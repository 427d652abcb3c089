/* Shared by the files of the downstream-task evaluation (weft/eval_tasks.h):
 * the manifest of task files and SHA-256. */
#ifndef WEFT_EVAL_TASKS_IMPL_H
#define WEFT_EVAL_TASKS_IMPL_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name;    /* the task's name in weft */
    const char *path;    /* relative to the oe_eval_tasks folder */
    uint64_t size;       /* bytes of the (gzip) file */
    const char *sha256;  /* lowercase hex of the file's bytes */
    int cloze;           /* 1: scored by last-word accuracy and bits per byte */
    int builtin_shots;   /* shots the file's contexts already hold */
} wf__task_file;

extern const wf__task_file wf__task_files[];
extern const size_t wf__n_task_files;


/* The shortest decimal that reads back to exactly v, or "null" when v is
 * not finite (eval.c; eval.jsonl's rule for numbers). Returns snprintf's. */
int wf__eval_put_num(char *buf, size_t size, double v);

#endif
