/* Fuzz target: dataset.json (src/data/dataset.c), the index of a token
 * dataset, as `weft data inspect` (wf_dataset_info_load) and training
 * (wf_dataset_open, with and without verify) read it. The shards it may
 * name are real: a small dataset (train-00000.wfs, train-00001.wfs,
 * val-00000.wfs) is written once per process; only dataset.json changes.
 * A split that opens is read (a document and its tokens). With
 * WEFT_FUZZ_SEED_OUT=FILE the dataset.json written is also copied to FILE
 * (tests/fuzz/make_seeds.sh takes its seed from there). */
#include "fuzz.h"
#include "weft/shard.h"

static char dir_[4200];

static const char *dataset_dir(void) {
    if (dir_[0]) return dir_;
    fz_path(dir_, sizeof dir_, "dataset");
    wf_dataset_writer_opts o = {.dir = dir_, .vocab_size = 300, .shard_tokens = 16, .tokenizer_path = NULL};
    wf_dataset_writer *w = NULL;
    int32_t ids[12];
    for (int i = 0; i < 12; i++) ids[i] = (i * 37) % 300;
    FZ_CHECK(wf_dataset_writer_create(&w, &o) == WF_OK, "%s", wf_error_msg());
    for (int d = 0; d < 4; d++) FZ_CHECK(wf_dataset_writer_add(w, d == 3, ids, 5 + (size_t)d) == WF_OK, "%s", wf_error_msg());
    FZ_CHECK(wf_dataset_writer_finish(w) == WF_OK, "%s", wf_error_msg());
    wf_dataset_writer_destroy(w);
    fz_seed_out(dir_, "dataset.json");
    return dir_;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = dataset_dir();
    fz_write_in(dir, "dataset.json", data, size);

    wf_dataset_info info;
    memset(&info, 0, sizeof info);
    if (wf_dataset_info_load(&info, dir) == WF_OK)
        for (size_t i = 0; i < info.n_splits; i++) FZ_CHECK(info.splits[i].name != NULL, "split %zu has no name", i);
    wf_dataset_info_free(&info);
    wf_error_clear();

    static const char *const splits[] = {"train", "val"};
    for (int k = 0; k < 2; k++)
        for (int verify = 0; verify < 2; verify++) {
            wf_dataset d;
            memset(&d, 0, sizeof d);
            if (wf_dataset_open(&d, dir, splits[k], verify) == WF_OK) {
                uint64_t start, n;
                int32_t buf[32];
                if (d.n_docs && wf_dataset_doc(&d, d.n_docs - 1, &start, &n) == WF_OK)
                    (void)wf_dataset_read(&d, start, n < 32 ? (size_t)n : 32, buf);
                if (d.n_tokens) (void)wf_dataset_read(&d, d.n_tokens - 1, 1, buf);
                wf_dataset_close(&d);
            }
            wf_error_clear();
        }
    return 0;
}
