/* Fuzz target: JSONL documents (src/data/docs.c), as `weft tokenize` and
 * the tokenizer trainer read them: one JSON object per line, the document
 * in field "text". The same bytes are also read as plain text split into
 * paragraphs (the reader of every other input). Every document is taken
 * until the end or the first error. */
#include "fuzz.h"
#include "weft/docs.h"

static void read_all(const char *path, wf_text_doc_mode mode) {
    wf_docs_opts o = {.text_mode = mode, .field = NULL};
    const char *paths[1] = {path};
    wf_docs *d = NULL;
    if (wf_docs_open(&d, paths, 1, &o) == WF_OK) {
        const char *text;
        size_t len;
        while (wf_docs_next(d, &text, &len) == WF_OK && text) FZ_CHECK(len > 0, "an empty document came back");
        (void)wf_docs_progress(d);
        (void)wf_docs_count(d);
    }
    wf_docs_destroy(d);
    wf_error_clear();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char jsonl[4200], txt[4200];
    fz_write(fz_path(jsonl, sizeof jsonl, "docs.jsonl"), data, size);
    read_all(jsonl, WF_TEXT_DOC_FILE);
    fz_write(fz_path(txt, sizeof txt, "docs.txt"), data, size);
    read_all(txt, WF_TEXT_DOC_PARAGRAPH);
    return 0;
}
