/* Fuzz target: tokenizer.json (src/data/tokenizer_json.c), as `weft
 * tokenize`, training and generation load it. A tokenizer that loads is
 * used (its own input encoded and decoded) and must round-trip: saved,
 * loaded again and saved again, the two saved files are the same bytes. */
#include "fuzz.h"
#include "weft/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char in[4200], a[4200], b[4200];
    fz_write(fz_path(in, sizeof in, "tokenizer.json"), data, size);
    fz_path(a, sizeof a, "saved-a.json");
    fz_path(b, sizeof b, "saved-b.json");
    wf_tokenizer *t = NULL;
    if (wf_tokenizer_load(&t, in) != WF_OK) {
        wf_error_clear();
        return 0;
    }
    /* Use it: its own input (a bounded prefix) as text. */
    wf_ids ids = {0};
    size_t n = size < 512 ? size : 512;
    if (wf_tokenizer_encode(t, (const char *)data, n, 1, &ids) == WF_OK) {
        char *text = NULL;
        size_t len = 0;
        if (wf_tokenizer_decode(t, ids.ids, ids.n, &text, &len) == WF_OK) free(text);
    }
    wf_ids_free(&ids);
    wf_error_clear();

    FZ_CHECK(wf_tokenizer_save(t, a) == WF_OK, "save: %s", wf_error_msg());
    wf_tokenizer *u = NULL;
    FZ_CHECK(wf_tokenizer_load(&u, a) == WF_OK, "the saved tokenizer does not load: %s", wf_error_msg());
    FZ_CHECK(wf_tokenizer_vocab_size(u) == wf_tokenizer_vocab_size(t), "vocabulary %zu, saved and loaded %zu",
             wf_tokenizer_vocab_size(t), wf_tokenizer_vocab_size(u));
    FZ_CHECK(wf_tokenizer_save(u, b) == WF_OK, "save again: %s", wf_error_msg());
    size_t la = 0, lb = 0;
    char *ta = fz_read(a, &la), *tb = fz_read(b, &lb);
    FZ_CHECK(ta && tb && la == lb && memcmp(ta, tb, la) == 0, "the tokenizer saved again differs");
    free(ta);
    free(tb);
    wf_tokenizer_destroy(u);
    wf_tokenizer_destroy(t);
    return 0;
}
