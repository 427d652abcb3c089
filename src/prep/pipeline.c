/* `weft prep`'s driver: a run is a sequence of steps, each a set of
 * deterministic units that any number of tasks share (docs/prep.md, "Tasks
 * and steps"; the files between steps: docs/formats/prep-intermediate.md):
 *
 *   1. extract (per input): read, extract, normalize, hash the paragraphs;
 *      the documents, and (hash, document, unit) records by hash range;
 *   2. dedup (per hash range): the first occurrence of each hash in input
 *      order is kept; the others go to per-input drop lists;
 *   3. filter (per input): the duplicate paragraphs removed, language id,
 *      quality rules, MinHash signatures; band keys by band;
 *   4. lsh (per band and key range): documents that share a key are joined
 *      (edges);
 *   5. cluster (one unit): union-find over the edges; every document of a
 *      cluster but its first (lowest id) is a near duplicate;
 *   6. output (per input): perplexity and the JSONL of the kept documents,
 *      compressed in pieces;
 *   7. finish (one unit): the counters added up, the pieces joined into
 *      shards in input order, stats.json and stats.txt.
 *
 * A task (--tasks N --task I, a Slurm array task, an MPI rank) does its own
 * share of a step's units first, then any unclaimed ones, then waits for
 * those other tasks hold. A unit is claimed with a lock (link(2), taken
 * over from a task that died), writes its files under temporary names,
 * renames them, and then writes its completion marker; a rerun does only
 * what is not complete. Every decision depends only on the inputs and the
 * config, so the output is the same bytes for any number of tasks and
 * threads. Within a unit, batches of documents go through the per-document
 * work on all threads (prep_batch.c).
 *
 * Each step is one function in its own file, prep_step_<name>.c, picked
 * from the table step_fns; this file keeps the run, the claims and that
 * table. */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "prep/prep_impl.h"
#include "weft/dirlock.h"
#include "weft/fileio.h"
#include "weft/log.h"
#include "weft/rundir.h"
#include "weft/store.h"
#include "weft/thread.h"

double wf__prep_epoch_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- paths of a run's files (docs/formats/prep-intermediate.md) ---- */

void wf__prep_run_path(const prep_run *r, char *out, size_t cap, const char *fmt, ...) {
    int n = snprintf(out, cap, "%s/", r->pdir);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < cap) vsnprintf(out + n, cap - (size_t)n, fmt, ap);
    va_end(ap);
}

size_t wf__prep_read_chunk(const prep_run *r) {
    return r->c->read_kb > 0 ? (size_t)r->c->read_kb << 10 : (size_t)4 << 20;
}

size_t wf__prep_step_units(const prep_run *r, int step) {
    const wf_prep_config *c = r->c;
    switch (step) {
    case PS_DEDUP: return c->dedup ? (size_t)r->ranges : 0;
    case PS_LSH: return c->minhash ? (size_t)r->bands * (size_t)r->lsh_ranges : 0;
    case PS_CLUSTER: return c->minhash ? 1 : 0;
    case PS_FINISH: return 1;
    default: return r->n_inputs;
    }
}

/* The test hook behind the killed-task tests: WEFT_PREP_CRASH=STEP:UNIT
 * kills the process with SIGKILL in the middle of that unit (after its
 * first batch, or before its files are renamed into place), as a crash,
 * an OOM kill or a preempted node would. */
void wf__prep_maybe_crash(int step, size_t unit) {
    const char *env = getenv("WEFT_PREP_CRASH");
    if (!env) return;
    const char *colon = strchr(env, ':');
    if (!colon || (size_t)(colon - env) != strlen(wf__prep_step_name(step)) ||
        strncmp(env, wf__prep_step_name(step), (size_t)(colon - env)) != 0 || (size_t)atol(colon + 1) != unit)
        return;
    fflush(NULL);
    raise(SIGKILL);
}

/* ---- units, claims and the task's loop ---- */

static int unit_done(const prep_run *r, int step, size_t u) {
    char path[4400];
    wf__prep_run_path(r, path, sizeof path, "done/%s.%06zu", wf__prep_step_name(step), u);
    return wf_path_exists(path);
}

/* The steps, in order, each in its own file (prep_step_<name>.c). */
static const prep_step_fn step_fns[PS_COUNT] = {wf__prep_step_extract, wf__prep_step_dedup,  wf__prep_step_filter,
                                                wf__prep_step_lsh,     wf__prep_step_cluster, wf__prep_step_output,
                                                wf__prep_step_finish};

/* Does one unit whose claim this task holds: its files, its counters, then
 * its completion marker. */
static wf_status run_unit(prep_run *r, int step, size_t u) {
    char path[4400];
    wf__prep_stats_free(&r->st);
    memset(&r->st, 0, sizeof r->st);
    static const char *const dirs[] = {"extract", "dedup", "filter", "lsh", "cluster", "output", "stats", "done"};
    for (size_t k = 0; k < sizeof dirs / sizeof *dirs; k++) {
        wf__prep_run_path(r, path, sizeof path, "%s", dirs[k]);
        WF_TRY(wf_mkdirs(path));
    }
    double t0 = wf_time_now();
    WF_DEBUG("prep: task %d/%d: %s %zu", r->task, r->tasks, wf__prep_step_name(step), u);
    WF_TRY(step_fns[step](r, u));
    r->st.step_seconds[step] += wf_time_now() - t0;
    r->st.step_units[step] = 1;
    if (step != PS_FINISH) {
        wf__prep_run_path(r, path, sizeof path, "stats/%s.%06zu.json", wf__prep_step_name(step), u);
        WF_TRY(wf__prep_partial_write(path, &r->st));
    }
    wf__prep_run_path(r, path, sizeof path, "done/%s.%06zu", wf__prep_step_name(step), u);
    return wf_file_write_atomic(path, "done\n", 5);
}

/* Tries to claim a unit: 1 claimed (*lock held), 0 another live task holds
 * it. A claim left by a task that died is taken over (same host: its pid
 * is gone; another host: its heartbeat is older than lock_stale_s). */
static wf_status claim(prep_run *r, int step, size_t u, wf_dirlock **lock, int *got) {
    char dir[4400], what[64];
    wf__prep_run_path(r, dir, sizeof dir, "claims/%s.%06zu", wf__prep_step_name(step), u);
    WF_TRY(wf_mkdirs(dir));
    snprintf(what, sizeof what, "prep unit %s %zu", wf__prep_step_name(step), u);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "weft prep task %d of %d", r->task, r->tasks);
    wf_dirlock_opts lo = {.command = cmd, .what = what, .stale_seconds = r->c->lock_stale_s};
    wf_status s = wf_dirlock_acquire(lock, dir, &lo);
    *got = s == WF_OK;
    if (s == WF_ERR_INVALID) {
        wf_error_clear();
        return WF_OK;
    }
    return s;
}

/* Runs every step: this task's own units first, then any other unclaimed
 * ones, then waits for the step's units other tasks hold (taking over
 * those of tasks that died) before the next step. */
static wf_status run_steps(prep_run *r, int *finished_here) {
    for (int step = 0; step < PS_COUNT; step++) {
        size_t n = wf__prep_step_units(r, step);
        if (!n) continue;
        size_t lo = n * (size_t)r->task / (size_t)r->tasks;
        int told = 0;
        for (int waited = 0;; waited++) {
            size_t left = 0;
            int did = 0;
            for (size_t k = 0; k < n; k++) {
                size_t u = (lo + k) % n;
                if (unit_done(r, step, u)) continue;
                wf_dirlock *lock = NULL;
                int got = 0;
                WF_TRY(claim(r, step, u, &lock, &got));
                if (!got) {
                    left++;
                    continue;
                }
                wf_status s = unit_done(r, step, u) ? WF_OK : run_unit(r, step, u);
                if (s == WF_OK && step == PS_FINISH) *finished_here = 1;
                wf_dirlock_release(lock);
                if (s != WF_OK) return wf_error_wrap(s, "%s %zu: ", wf__prep_step_name(step), u);
                did = 1;
            }
            if (!left) break;
            if (did) waited = -1;
            else {
                if (!told++)
                    WF_INFO("prep: task %d of %d waits for %zu %s unit(s) other tasks hold", r->task, r->tasks, left,
                            wf__prep_step_name(step));
                /* 0.1 s, doubling up to 2 s: a long wait polls the
                 * shared filesystem lightly. */
                long ms = waited < 5 ? 100L << waited : 2000;
                struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
                nanosleep(&ts, NULL);
            }
        }
    }
    return WF_OK;
}

/* The intermediate files go once the run is complete (the completion
 * markers, run.json and the units' counters stay). */
static void remove_intermediates(const prep_run *r) {
    static const char *const dirs[] = {"extract", "dedup", "filter", "lsh", "cluster", "output"};
    char path[4400];
    for (size_t k = 0; k < sizeof dirs / sizeof *dirs; k++) {
        wf__prep_run_path(r, path, sizeof path, "%s", dirs[k]);
        if (wf_path_is_dir(path)) wf_remove_tree(path);
    }
}

/* ---- the run ---- */

/* Keys left out of a run's fingerprint: they do not change the output
 * (or, tasks and task, are checked on their own). */
static const char *const fp_ignored[] = {
    "output", "threads", "force", "json", "batch_mb", "read_kb", "tasks", "task", "lock_stale_s",
    "checkpoint_mb", /* unused */
};

/* The key of a TOML line "key = value" (wf_opts_write_toml's), and its
 * length. */
static size_t line_key(const char *line, size_t n) {
    for (size_t i = 0; i + 2 < n; i++)
        if (line[i] == ' ' && line[i + 1] == '=' && line[i + 2] == ' ') return i;
    return n;
}

static int fp_ignored_line(const char *line, size_t n) {
    size_t k = line_key(line, n);
    for (size_t i = 0; i < sizeof fp_ignored / sizeof *fp_ignored; i++)
        if (strlen(fp_ignored[i]) == k && memcmp(fp_ignored[i], line, k) == 0) return 1;
    return 0;
}

/* The effective config as TOML, one key a line, less the keys of
 * fp_ignored; *text is the caller's to free. */
static wf_status config_text(const wf_prep_config *c, char **text, size_t *len) {
    char *all = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&all, &n);
    if (!f) return wf_error(WF_ERR_NOMEM, "out of memory");
    wf_opts_write_toml(wf_prep_spec(), c, f);
    if (fclose(f) != 0 || !all) {
        free(all);
        return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        const char *nl = memchr(all + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - all) + 1 : n;
        if (!fp_ignored_line(all + i, e - i)) {
            memmove(all + m, all + i, e - i);
            m += e - i;
        }
        i = e;
    }
    all[m] = '\0';
    *text = all;
    *len = m;
    return WF_OK;
}

/* The fingerprint of a run: the config (less what does not change the
 * output) and the inputs with their sizes. */
static wf_status fingerprint(const prep_run *r, char out[32]) {
    char *text = NULL;
    size_t len = 0;
    WF_TRY(config_text(r->c, &text, &len));
    wf_buf b = {0};
    wf_status s = wf_buf_append(&b, text, len);
    free(text);
    for (size_t i = 0; i < r->n_inputs && s == WF_OK; i++) {
        char line[64];
        s = wf_buf_append(&b, "input ", 6);
        if (s == WF_OK) s = wf_buf_append(&b, r->inputs[i], strlen(r->inputs[i]));
        int k = snprintf(line, sizeof line, " %llu\n", (unsigned long long)r->sizes[i]);
        if (s == WF_OK) s = wf_buf_append(&b, line, (size_t)k);
    }
    if (s == WF_OK) snprintf(out, 32, "%016llx", (unsigned long long)wf_hash64(b.data, b.len));
    wf_buf_free(&b);
    return s;
}

/* Finds the line of `key` (k bytes) in text[0, n); NULL if none. *ln: its
 * length without the newline. */
static const char *find_key_line(const char *text, size_t n, const char *key, size_t k, size_t *ln) {
    for (size_t i = 0; i < n;) {
        const char *nl = memchr(text + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - text) : n;
        if (line_key(text + i, e - i) == k && memcmp(text + i, key, k) == 0) {
            *ln = e - i;
            return text + i;
        }
        i = e + 1;
    }
    return NULL;
}

/* Why the run in OUT is of another config, for the message that refuses
 * it: the first key whose value differs between its _prep/config.toml and
 * this config, or that only one of them has (a key this weft added: the
 * run was made by an earlier weft). Empty when the keys agree or that file
 * cannot be read. */
static void config_difference(const prep_run *r, char *why, size_t cap) {
    why[0] = '\0';
    char path[4400];
    wf__prep_run_path(r, path, sizeof path, "config.toml");
    char *old = NULL, *cur = NULL;
    size_t n_old = 0, n_cur = 0;
    if (wf_file_read(path, &old, &n_old) != WF_OK || config_text(r->c, &cur, &n_cur) != WF_OK) {
        wf_error_clear();
        free(old);
        free(cur);
        return;
    }
    const char *texts[2] = {cur, old};
    size_t lens[2] = {n_cur, n_old};
    for (int side = 0; side < 2 && !why[0]; side++) {
        const char *t = texts[side], *o = texts[1 - side];
        for (size_t i = 0; i < lens[side] && !why[0];) {
            const char *nl = memchr(t + i, '\n', lens[side] - i);
            size_t e = nl ? (size_t)(nl - t) : lens[side], ln = e - i, k = line_key(t + i, ln), oln = 0;
            const char *line = t + i;
            i = e + 1;
            if (k == ln || fp_ignored_line(line, ln)) continue;
            const char *other = find_key_line(o, lens[1 - side], line, k, &oln);
            if (side == 0 && !other)
                snprintf(why, cap,
                         "%.*s is not in the run's %s: a run of an earlier weft, from before that setting, "
                         "whose output this weft would not continue",
                         (int)k, line, path);
            else if (side == 0 && (oln != ln || memcmp(other, line, ln) != 0))
                snprintf(why, cap, "%.*s here, %.*s in the run's %s", (int)ln, line, (int)oln, other, path);
            else if (side == 1 && !other)
                snprintf(why, cap, "the run's %s has %.*s, which this weft does not know", path, (int)k, line);
        }
    }
    free(old);
    free(cur);
}

static int env_int(const char *name, long *v) {
    const char *e = getenv(name);
    if (!e || !*e) return 0;
    char *end;
    errno = 0;
    long x = strtol(e, &end, 10);
    if (errno || *end) return 0;
    *v = x;
    return 1;
}

/* This task's place: --tasks/--task, a Slurm array, an MPI launcher's rank
 * and size (Open MPI, MPICH/Hydra, srun), or one task. */
static wf_status resolve_task(const wf_prep_config *c, int *tasks, int *task, const char **from, long *array_id,
                              long *array_min) {
    long n = 1, i = 0, lo = 0;
    *from = "a single task";
    *array_id = *array_min = -1;
    if (c->tasks > 0) {
        n = c->tasks;
        i = c->task < 0 ? 0 : c->task;
        if (c->task < 0 && n > 1)
            return wf_error(WF_ERR_CONFIG, "tasks = %ld: give this task's number too (--task 0 to %ld)", n, n - 1);
        *from = "--tasks/--task";
    } else if (c->task >= 0) {
        return wf_error(WF_ERR_CONFIG, "task = %lld: give the number of tasks too (--tasks N)", (long long)c->task);
    } else if (env_int("SLURM_ARRAY_TASK_ID", &i) && env_int("SLURM_ARRAY_TASK_COUNT", &n)) {
        if (env_int("SLURM_ARRAY_TASK_MIN", &lo)) i -= lo;
        *array_id = i + lo;
        *array_min = lo;
        *from = "SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT (less SLURM_ARRAY_TASK_MIN)";
    } else if (env_int("OMPI_COMM_WORLD_RANK", &i) && env_int("OMPI_COMM_WORLD_SIZE", &n)) {
        *from = "OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE";
    } else if (env_int("PMI_RANK", &i) && env_int("PMI_SIZE", &n)) {
        *from = "PMI_RANK and PMI_SIZE";
    } else if (env_int("SLURM_PROCID", &i) && env_int("SLURM_STEP_NUM_TASKS", &n)) {
        *from = "SLURM_PROCID and SLURM_STEP_NUM_TASKS";
    } else {
        n = 1, i = 0;
    }
    if (n < 1 || n > 1000000 || i < 0 || i >= n)
        return wf_error(WF_ERR_CONFIG, "task %ld of %ld (from %s): a task's number must be 0 to tasks - 1", i, n,
                        *from);
    *tasks = (int)n;
    *task = (int)i;
    return WF_OK;
}

/* OUT/_prep/run.json: what the run is (fingerprint, tasks, start).
 * Version 2 names the lsh edges by band and key range; a version 1 run
 * (edges by band) is read so that the config check can say which key its
 * weft lacked (minhash.ranges) instead of a bare version error. */
static wf_status run_read(const char *path, char fp[32], int *tasks, double *started, long *array_min) {
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) return wf_error(WF_ERR_FORMAT, "%s:%d: %s: the run's description is damaged; rerun with --force",
                               path, err.line, err.text);
    json_t *f = json_object_get(root, "format"), *p = json_object_get(root, "fingerprint");
    json_t *t = json_object_get(root, "tasks"), *st = json_object_get(root, "started");
    json_int_t version = json_integer_value(json_object_get(root, "version"));
    wf_status s = WF_OK;
    if (!json_is_string(f) || strcmp(json_string_value(f), "weft-prep-run") != 0 || !json_is_string(p) ||
        !json_is_integer(t) || !json_is_number(st) || version < 1 || version > 2) {
        s = wf_error(WF_ERR_FORMAT, "%s: not a weft prep run description (version 1 or 2); rerun with --force", path);
    } else {
        snprintf(fp, 32, "%s", json_string_value(p));
        *tasks = (int)json_integer_value(t);
        *started = json_number_value(st);
        json_t *am = json_object_get(root, "slurm_array_min");
        if (array_min) *array_min = json_is_integer(am) ? (long)json_integer_value(am) : 0;
    }
    json_decref(root);
    return s;
}

/* Creates run.json unless another task got there first (link(2) of a
 * complete file: *created says which). */
static wf_status run_create(const prep_run *r, const char *path, const char *fp, int *created) {
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string("weft-prep-run"));
    json_object_set_new(root, "version", json_integer(2));
    json_object_set_new(root, "fingerprint", json_string(fp));
    json_object_set_new(root, "tasks", json_integer(r->tasks));
    json_object_set_new(root, "inputs", json_integer((json_int_t)r->n_inputs));
    json_object_set_new(root, "started", json_real(wf__prep_epoch_now()));
    if (r->array_id >= 0) json_object_set_new(root, "slurm_array_min", json_integer(r->array_min));
    char *text = json_dumps(root, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
    json_decref(root);
    if (!text) return wf_error(WF_ERR_NOMEM, "out of memory");
    char tmp[4500];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    size_t n = strlen(text);
    text[n] = '\n';
    wf_status s = wf_file_write_atomic(tmp, text, n + 1);
    free(text);
    WF_TRY(s);
    *created = link(tmp, path) == 0;
    int e = errno;
    unlink(tmp);
    if (!*created && e != EEXIST) return wf_error(WF_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    return WF_OK;
}

static void run_free(prep_run *r) {
    wf__prep_batch_free(r);
    free(r->sizes);
    wf__prep_stats_free(&r->st);
    wf__prep_ppl_close(r->ppl);
    wf__prep_rules_free(&r->rules);
    wf_buf_free(&r->line);
    wf_dirlock_release(r->lock);
}

/* A Slurm array task joins a run started with another number of tasks
 * (the failed task of an array resubmitted alone: --array=2 after
 * --array=0-3): the run's count stays and the task takes the slice of its
 * SLURM_ARRAY_TASK_ID (less the first run's SLURM_ARRAY_TASK_MIN) first.
 * Decided before the task's lock is taken, which depends on the slice;
 * open_run checks the rest (fingerprint, count) under that lock. */
static wf_status join_array(prep_run *r) {
    char runjson[4400], ofp[32];
    wf__prep_run_path(r, runjson, sizeof runjson, "run.json");
    if (r->array_id < 0 || r->c->force || !wf_path_exists(runjson)) return WF_OK;
    int otasks;
    long omin;
    double started;
    WF_TRY(run_read(runjson, ofp, &otasks, &started, &omin));
    if (otasks == r->tasks) return WF_OK;
    long i = r->array_id - omin;
    if (i < 0 || i >= otasks)
        return wf_error(WF_ERR_CONFIG,
                        "%s holds a prep run of %d task(s) (Slurm array ids %ld to %ld); this task's "
                        "SLURM_ARRAY_TASK_ID is %ld: resubmit ids of that range only (they join the run), or "
                        "--force (one task) to start over",
                        r->c->output, otasks, omin, omin + otasks - 1, r->array_id);
    WF_INFO("prep: Slurm array task %ld joins the run in %s as task %ld of %d (its array had %d task(s))",
            r->array_id, r->c->output, i, otasks, r->tasks);
    r->tasks = otasks;
    r->task = (int)i;
    return WF_OK;
}

/* Sets up the run in OUT (or joins it): *complete when there is nothing
 * left to do. */
static wf_status open_run(prep_run *r, int *complete) {
    const wf_prep_config *c = r->c;
    char fp[32], path[4400];
    WF_TRY(fingerprint(r, fp));
    char runjson[4400];
    wf__prep_run_path(r, runjson, sizeof runjson, "run.json");
    if (c->force) {
        if (r->tasks > 1)
            return wf_error(WF_ERR_CONFIG, "--force deletes the run in %s: give it to one task (--tasks 1), not to "
                            "each of %d", c->output, r->tasks);
        WF_TRY(wf__prep_output_wipe(c->output));
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        if (wf_path_exists(runjson)) {
            char ofp[32];
            int otasks;
            WF_TRY(run_read(runjson, ofp, &otasks, &r->started, NULL));
            if (strcmp(ofp, fp) != 0) {
                char why[9000];
                config_difference(r, why, sizeof why);
                if (why[0])
                    return wf_error(WF_ERR_CONFIG,
                                    "%s holds a prep run of another config (%s): give a new --output, or --force to "
                                    "delete that run and start over",
                                    c->output, why);
                return wf_error(WF_ERR_CONFIG,
                                "%s holds a prep run of another config or other inputs (their paths or sizes): give "
                                "a new --output, or --force to delete that run and start over",
                                c->output);
            }
            if (otasks != r->tasks)
                return wf_error(WF_ERR_CONFIG,
                                "%s holds a prep run of %d task(s); this is task %d of %d: run every task with the "
                                "same number of tasks, or --force (one task) to start over",
                                c->output, otasks, r->task, r->tasks);
            if (unit_done(r, PS_FINISH, 0)) {
                *complete = 1;
                return WF_OK;
            }
            size_t done = 0, total = 0;
            for (int st = 0; st < PS_COUNT; st++)
                for (size_t u = 0, n = wf__prep_step_units(r, st); u < n; u++)
                    total++, done += (size_t)unit_done(r, st, u);
            WF_INFO("prep: task %d of %d joins the run in %s (%zu of %zu units done)", r->task, r->tasks, c->output,
                    done, total);
            return WF_OK;
        }
        wf__prep_run_path(r, path, sizeof path, "state.json");
        if (wf_path_exists(path))
            return wf_error(WF_ERR_CONFIG,
                            "%s holds a prep run of an earlier weft (%s, resumed by input): give a new --output, or "
                            "--force to delete it and start over",
                            c->output, path);
        snprintf(path, sizeof path, "%s/stats.json", c->output);
        if (wf_path_exists(path))
            return wf_error(WF_ERR_CONFIG,
                            "%s holds the output of a prep run without its resume state (_prep/): give a new "
                            "--output, or --force to delete it",
                            c->output);
        WF_TRY(wf_mkdirs(r->pdir));
        int created = 0;
        WF_TRY(run_create(r, runjson, fp, &created));
        if (created) {
            wf__prep_run_path(r, path, sizeof path, "config.toml");
            wf_afile af;
            WF_TRY(wf_afile_open(&af, path));
            wf_opts_write_toml(wf_prep_spec(), c, af.fp);
            WF_TRY(wf_afile_commit(&af));
            WF_TRY(run_read(runjson, fp, &r->tasks, &r->started, NULL));
            return WF_OK;
        }
    }
    return wf_error(WF_ERR_INTERNAL, "%s: the run's description appeared and vanished", runjson);
}

static wf_status prep_run_local(const wf_prep_config *c, const char *const *inputs, size_t n_inputs) {
    WF_TRY(wf_prep_config_validate(c));
    /* Every path prep makes is its output directory plus a short name
     * (_prep/lsh/BBBB.rRRRR.edges, LANG/BUCKET_NNNNN.jsonl.zst.part): a
     * directory within WF_RUNDIR_MAX keeps them all within WF_PATH_MAX. */
    WF_TRY(wf_rundir_check(c->output, "output"));
    if (n_inputs == 0) return wf_error(WF_ERR_CONFIG, "no inputs: give WARC, WET, JSONL or text files");
    if (n_inputs >= ((size_t)1 << 31)) return wf_error(WF_ERR_CONFIG, "%zu inputs: at most 2^31 - 1", n_inputs);
    prep_run r;
    memset(&r, 0, sizeof r);
    r.c = c;
    r.inputs = inputs;
    r.n_inputs = n_inputs;
    r.threads = c->threads ? (int)c->threads : wf_default_threads();
    r.n_hashes = (int)(c->mh_bands * c->mh_rows);
    r.max_doc = (size_t)c->max_doc_mb << 20;
    r.ranges = (int)c->dedup_ranges;
    r.bands = (int)c->mh_bands;
    r.lsh_ranges = (int)c->mh_ranges;
    r.nopts.form = strcmp(c->unicode_form, "NFKC") == 0 ? 2 : strcmp(c->unicode_form, "NFC") == 0 ? 1 : 0;
    if (!c->normalize) r.nopts.form = 0;
    r.nopts.cleanup = c->normalize;
    r.nopts.drop_invalid = strcmp(c->invalid_utf8, "drop") == 0;
    r.nopts.max_control_ratio = c->max_control_ratio;
    WF_TRY(wf_path_join(r.pdir, sizeof r.pdir, c->output, "_prep", NULL));
    const char *from;
    wf_status s = resolve_task(c, &r.tasks, &r.task, &from, &r.array_id, &r.array_min);
    if (s == WF_OK) s = join_array(&r);
    r.sizes = calloc(n_inputs, sizeof *r.sizes);
    if (s == WF_OK && !r.sizes) s = wf_error(WF_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n_inputs && s == WF_OK; i++) {
        struct stat stt;
        wf_store_stat ost;
        if (wf_store_is_remote(inputs[i])) {
            s = wf_store_head(inputs[i], &ost);
            if (s == WF_OK) r.sizes[i] = ost.size;
            else wf_error_wrap(s, "input %s: ", inputs[i]);
        } else if (stat(inputs[i], &stt) != 0) s = wf_error(WF_ERR_NOTFOUND, "input %s: cannot read it: %s", inputs[i], strerror(errno));
        else if (!S_ISREG(stt.st_mode)) s = wf_error(WF_ERR_INVALID, "input %s is not a regular file", inputs[i]);
        else r.sizes[i] = (uint64_t)stt.st_size;
    }
    if (s == WF_OK) s = wf__prep_rules_build(c, &r.rules);
    if (s == WF_OK) s = wf_mkdirs(c->output);
    /* One job per output directory, or with several tasks one job per task,
     * before anything there is read. */
    char lockdir[4400];
    snprintf(lockdir, sizeof lockdir, "%s", c->output);
    if (s == WF_OK && r.tasks > 1) {
        snprintf(lockdir, sizeof lockdir, "%s/tasks/%06d", r.pdir, r.task);
        s = wf_mkdirs(lockdir);
    }
    char what[64];
    snprintf(what, sizeof what, r.tasks > 1 ? "prep task %d's directory" : "output directory", r.task);
    wf_dirlock_opts lo = {.command = "weft prep", .what = what, .stale_seconds = c->lock_stale_s};
    if (s == WF_OK) s = wf_dirlock_acquire(&r.lock, lockdir, &lo);
    int complete = 0;
    if (s == WF_OK) s = open_run(&r, &complete);
    if (s == WF_OK && complete) {
        WF_INFO("prep: %s is already complete (%zu inputs); --force starts over", c->output, n_inputs);
        remove_intermediates(&r);
        run_free(&r);
        return WF_OK;
    }
    if (s == WF_OK && r.tasks > 1) WF_INFO("prep: task %d of %d (from %s)", r.task, r.tasks, from);
    int finished_here = 0;
    if (s == WF_OK) s = run_steps(&r, &finished_here);
    if (s == WF_OK && finished_here) remove_intermediates(&r);
    if (s == WF_OK && !finished_here) WF_INFO("prep: task %d of %d: the run in %s is complete", r.task, r.tasks, c->output);
    run_free(&r);
    return s;
}


/* --output s3://...: the run goes into a local staging folder named after
 * the URL (so that a killed run resumes from it), then its outputs are
 * uploaded, stats.json last: as on disk, where stats.json is written when
 * the run is complete, its presence says the output is whole. The run's own
 * files (_prep/, the lock) stay local and the folder is removed once
 * uploaded. One task only: tasks on several machines share a run through
 * its folder, which must then be a shared one (docs/storage.md). */
wf_status wf_prep_run(const wf_prep_config *c, const char *const *inputs, size_t n_inputs) {
    if (!c->output || !wf_store_is_remote(c->output)) return prep_run_local(c, inputs, n_inputs);
    if (c->tasks > 1)
        return wf_error(WF_ERR_CONFIG, "--output %s: a run split into tasks shares its folder, which must be a local "
                                       "or shared one (an object store output takes one task)", c->output);
    char url[WF_PATH_MAX];
    WF_TRY(wf_path_join(url, sizeof url, c->output, "stats.json", NULL));
    wf_store_stat st;
    wf_status s = wf_store_head(url, &st);
    if (s == WF_OK && !c->force) {
        WF_INFO("prep: %s is already complete (it has stats.json); --force starts over", c->output);
        return WF_OK;
    }
    if (s == WF_ERR_NOTFOUND || s == WF_OK) wf_error_clear(), s = WF_OK;
    char stage[WF_PATH_MAX] = "";
    if (s == WF_OK) {
        const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        s = wf_path_joinf(stage, sizeof stage, tmp, "weft-prep-%016llx",
                          (unsigned long long)wf_hash64(c->output, strlen(c->output)));
    }
    if (s == WF_OK) {
        wf_prep_config lc = *c; /* shallow: only the output differs */
        lc.output = stage;
        s = prep_run_local(&lc, inputs, n_inputs);
    }
    wf_store_entry *files = NULL;
    size_t n_files = 0;
    if (s == WF_OK) s = wf_store_list(stage, &files, &n_files);
    for (int last = 0; s == WF_OK && last < 2; last++)
        for (size_t i = 0; s == WF_OK && i < n_files; i++) {
            const char *name = files[i].url + strlen(stage) + 1;
            if (strncmp(name, "_prep/", 6) == 0 || name[0] == '.') continue; /* the run's own files, the lock */
            if ((strcmp(name, "stats.json") == 0) != last) continue;
            char dst[WF_PATH_MAX];
            s = wf_path_join(dst, sizeof dst, c->output, name, NULL);
            if (s == WF_OK) s = wf_store_upload(files[i].url, dst);
        }
    wf_store_list_free(files, n_files);
    if (s == WF_OK) s = wf_remove_tree(stage);
    return s;
}
