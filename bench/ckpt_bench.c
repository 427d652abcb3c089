/* Checkpoint throughput against the disk and against memcpy.
 *
 * The state is a real training state: the parameters of a model preset
 * (stories15M by default) and its AdamW moments, 3 x 4 bytes per parameter,
 * in weft's tensor table. Measured in the same run, best of --repeat:
 *   - the disk's sequential write bandwidth: the same number of bytes
 *     written with write() in 8 MiB chunks into one new file, then fsync
 *     (what a checkpoint's I/O could reach);
 *   - synchronous saves (wf_ckpt_save, ckpt.async = false): GB/s and the
 *     ratio to that bandwidth;
 *   - asynchronous saves: the time training is blocked (copy into the
 *     staging buffer) against memcpy of the same bytes between two
 *     buffers, and the writer thread's time;
 *   - loading it back (open, read every piece, check every checksum).
 *
 *   ckpt_bench [--preset NAME] [--repeat N] [--dir DIR]
 *
 * Writes into DIR (default: a new directory under $TMPDIR or /tmp) and
 * removes what it wrote. Not a test: it prints numbers and asserts nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt_impl.h"
#include "weft/arena.h"
#include "weft/ckpt.h"
#include "weft/fileio.h"
#include "weft/model.h"
#include "weft/optim.h"
#include "weft/thread.h"

/* The disk peer: `bytes` written and fsynced into a new file. A failure
 * is said (what and why) and returns -1: the benchmark then stops, since
 * a ratio against a peer that did not run would be nonsense. */
static double disk_write(const char *dir, size_t bytes, const unsigned char *buf) {
    char path[8192];
    snprintf(path, sizeof path, "%s/disk-bench.bin", dir);
    double t0 = wf_time_now();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        fprintf(stderr, "ckpt_bench: the disk peer failed: cannot create %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t chunk = (size_t)8 << 20;
    for (size_t off = 0; off < bytes;) {
        size_t n = bytes - off < chunk ? bytes - off : chunk;
        ssize_t w = write(fd, buf + off % ((size_t)64 << 20), n);
        if (w <= 0) {
            fprintf(stderr, "ckpt_bench: the disk peer failed: writing %s: %s\n", path,
                    w < 0 ? strerror(errno) : "no progress");
            close(fd);
            unlink(path);
            return -1;
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0) {
        fprintf(stderr, "ckpt_bench: the disk peer failed: fsync of %s: %s\n", path, strerror(errno));
        close(fd);
        unlink(path);
        return -1;
    }
    close(fd);
    double dt = wf_time_now() - t0;
    unlink(path);
    return dt;
}

static double min_d(double a, double b) { return a < b ? a : b; }

int main(int argc, char **argv) {
    const char *preset = "stories15M", *dir_arg = NULL;
    int repeat = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--preset") == 0) preset = argv[i + 1];
        else if (strcmp(argv[i], "--repeat") == 0) repeat = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--dir") == 0) dir_arg = argv[i + 1];
        else {
            fprintf(stderr, "usage: ckpt_bench [--preset NAME] [--repeat N] [--dir DIR]\n");
            return 2;
        }
    }
    if (repeat < 1) repeat = 1;
    char dir[4096];
    if (dir_arg) {
        snprintf(dir, sizeof dir, "%s", dir_arg);
        if (!wf_path_is_dir(dir)) {
            fprintf(stderr, "ckpt_bench: --dir %s is not an existing directory\n", dir);
            return 1;
        }
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/weft-ckpt-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir)) {
            fprintf(stderr, "ckpt_bench: cannot create %s: %s\n", dir, strerror(errno));
            return 1;
        }
    }
    wf_model_config mc;
    wf_arena *arena = NULL;
    wf_model *m = NULL;
    wf_adamw *opt = NULL;
    wf_adamw_config ac = wf_adamw_config_default();
    if (wf_model_config_preset(&mc, preset) != WF_OK || wf_arena_create(&arena, 0) != WF_OK ||
        wf_model_create(&m, &mc, arena) != WF_OK || wf_adamw_create(&opt, &ac, m, arena) != WF_OK) {
        fprintf(stderr, "ckpt_bench: %s\n", wf_error_msg());
        return 1;
    }
    wf_model_init(m, 1);
    int nt = wf_model_num_tensors(m);
    size_t np = wf_model_num_params(m);
    float *bufs[3] = {wf_model_params(m), wf_adamw_m(opt), wf_adamw_v(opt)};
    for (size_t i = 0; i < np; i++) {
        bufs[1][i] = bufs[0][i] * 0.01f;
        bufs[2][i] = bufs[0][i] * bufs[0][i];
    }
    wf_ckpt_tensor *state = calloc(3 * (size_t)nt, sizeof *state);
    char (*names)[96] = calloc(3 * (size_t)nt, sizeof *names);
    const char *prefix[3] = {"", "optim.m.", "optim.v."};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < nt; i++) {
            const wf_tensor_info *ti = wf_model_tensor(m, i);
            size_t j = (size_t)k * (size_t)nt + (size_t)i;
            snprintf(names[j], sizeof names[j], "%s%s", prefix[k], ti->name);
            state[j] = (wf_ckpt_tensor){names[j], ti->ndim, {ti->shape[0], ti->shape[1]}, bufs[k] + ti->offset, 0, 0, NULL};
        }
    size_t n_state = 3 * (size_t)nt, bytes = 3 * np * sizeof(float);
    printf("state: %s, %zu parameters, %zu tensors, %.1f MB (parameters + AdamW m, v); %d repeats; in %s\n", preset,
           np, n_state, (double)bytes / 1e6, repeat, dir);

    /* The peers: disk bandwidth and memcpy. */
    unsigned char *src = malloc((size_t)64 << 20), *dst = malloc(bytes);
    if (!src || !dst) return 1;
    for (size_t i = 0; i < ((size_t)64 << 20); i++) src[i] = (unsigned char)(i * 131u + 7u);
    memcpy(dst, bufs[0], np * sizeof(float)); /* touch the destination's pages once */
    memset(dst, 1, bytes);
    double t_disk = 1e30, t_memcpy = 1e30, t_sync = 1e30, t_block = 1e30, t_copy = 1e30, t_async = 1e30,
           t_load = 1e30;
    for (int r = 0; r < repeat; r++) {
        double d = disk_write(dir, bytes, src);
        if (d < 0) return 1;
        t_disk = min_d(t_disk, d);
        double t0 = wf_time_now();
        for (int k = 0; k < 3; k++) memcpy(dst + (size_t)k * np * 4, bufs[k], np * sizeof(float));
        t_memcpy = min_d(t_memcpy, wf_time_now() - t0);
    }

    /* XXH3 over the state: the checksum's share of a save. */
    double t_hash = 1e30;
    for (int r = 0; r < repeat; r++) {
        double t0 = wf_time_now();
        volatile uint64_t h = 0;
        for (int k = 0; k < 3; k++) h ^= wf_hash64(bufs[k], np * sizeof(float));
        (void)h;
        t_hash = min_d(t_hash, wf_time_now() - t0);
    }

    /* Each save goes to a new directory (a replaced one would add its
     * deletion to the time); they are removed between saves. */
    char ckdir[8192];
    snprintf(ckdir, sizeof ckdir, "%s/step-0000001", dir);
    for (int async = 0; async <= 1; async++) {
        wf_ckpt_writer *w;
        wf_ckpt_writer_opts o = {0, 1, async, 0, 0};
        if (wf_ckpt_writer_create(&w, state, n_state, &o) != WF_OK) {
            fprintf(stderr, "ckpt_bench: %s\n", wf_error_msg());
            return 1;
        }
        for (int r = 0; r < repeat; r++) {
            wf_ckpt_save_stats st;
            double t0 = wf_time_now();
            if (wf_ckpt_save(w, ckdir, 1, NULL, &st) != WF_OK || wf_ckpt_writer_wait(w, &st) != WF_OK) {
                fprintf(stderr, "ckpt_bench: %s\n", wf_error_msg());
                return 1;
            }
            double total = wf_time_now() - t0;
            if (r + 1 < repeat || !async) wf_remove_tree(ckdir); /* the last one is loaded below */
            if (!async) t_sync = min_d(t_sync, total);
            else {
                t_block = min_d(t_block, st.blocked_seconds);
                t_copy = min_d(t_copy, st.copy_seconds);
                t_async = min_d(t_async, st.write_seconds);
            }
        }
        wf_ckpt_writer_destroy(w);
    }
    for (int r = 0; r < repeat; r++) {
        double t0 = wf_time_now();
        wf_ckpt *c;
        if (wf_ckpt_open(&c, ckdir) != WF_OK || wf_ckpt_load(c, state, n_state) != WF_OK) {
            fprintf(stderr, "ckpt_bench: %s\n", wf_error_msg());
            return 1;
        }
        wf_ckpt_close(c);
        t_load = min_d(t_load, wf_time_now() - t0);
    }
    double gb = (double)bytes / 1e9;
    printf("disk sequential write + fsync      %7.3f s  %6.2f GB/s   (peer)\n", t_disk, gb / t_disk);
    printf("sync save                          %7.3f s  %6.2f GB/s   %.2f x the disk\n", t_sync, gb / t_sync,
           t_disk / t_sync);
    printf("async save: writer thread          %7.3f s  %6.2f GB/s   %.2f x the disk\n", t_async, gb / t_async,
           t_disk / t_async);
    printf("memcpy of the state                %7.4f s  %6.2f GB/s   (peer)\n", t_memcpy, gb / t_memcpy);
    printf("async save: training blocked       %7.4f s  %6.2f GB/s   %.2f x memcpy (copy %.4f s)\n", t_block,
           gb / t_block, t_block / t_memcpy, t_copy);
    printf("load (open, read, verify)          %7.3f s  %6.2f GB/s\n", t_load, gb / t_load);
    printf("XXH3-64 of the state               %7.4f s  %6.2f GB/s\n", t_hash, gb / t_hash);
    printf("async blocking vs a sync save: %.1f%% of its time\n", 100.0 * t_block / t_sync);

    wf_remove_tree(ckdir);
    if (!dir_arg) rmdir(dir);
    free(state);
    free(names);
    free(src);
    free(dst);
    wf_adamw_destroy(opt);
    wf_model_destroy(m);
    wf_arena_destroy(arena);
    return 0;
}
