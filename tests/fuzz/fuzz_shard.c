/* Fuzz target: a token shard (src/data/shard.c): header, document index and
 * payload, opened with checksum verification as training does with
 * data.verify, and without it (the fast path that must still never read
 * outside the file). A shard that opens is read: its documents' bounds and
 * a few tokens at each end. */
#include "fuzz.h"
#include "weft/shard.h"

static void use(const wf_shard *s) {
    int32_t buf[8];
    uint64_t n = s->n_tokens < 8 ? s->n_tokens : 8;
    if (n) {
        wf_shard_read(s, 0, (size_t)n, buf);
        wf_shard_read(s, s->n_tokens - n, (size_t)n, buf);
    }
    uint64_t prev = 0;
    for (uint64_t d = 0; d <= s->n_docs && d < 64; d++) {
        uint64_t at = wf_shard_doc_start(s, d);
        FZ_CHECK(at >= prev && at <= s->n_tokens, "document %llu starts at %llu (previous %llu, %llu tokens)",
                 (unsigned long long)d, (unsigned long long)at, (unsigned long long)prev,
                 (unsigned long long)s->n_tokens);
        prev = at;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[4200];
    fz_write(fz_path(path, sizeof path, "train-00000.wfs"), data, size);
    for (int verify = 1; verify >= 0; verify--) {
        wf_shard s;
        memset(&s, 0, sizeof s);
        if (wf_shard_open(&s, path, verify) == WF_OK) use(&s);
        wf_shard_close(&s);
        wf_error_clear();
    }
    return 0;
}
