/* weft: reading documents from input files, for the tokenizer trainer and
 * `weft tokenize`.
 *
 * Inputs, chosen by file name:
 *   *.jsonl (also .jsonl.gz, .jsonl.zst): one JSON object per line; the
 *       document is the string field `field` (default "text"). Blank lines
 *       are skipped. A malformed line or a missing field is an error that
 *       names the file and line.
 *   anything else (.txt, .txt.gz, .txt.zst, ...): raw bytes, split into
 *       documents by `text_mode`: the whole file, each line, or each
 *       paragraph (blocks separated by blank lines). Invalid UTF-8 passes
 *       through untouched: the byte-level tokenizer handles any bytes.
 * Empty documents are skipped. Streaming: memory is bounded by the largest
 * document, not by the input size.
 */
#ifndef WEFT_DOCS_H
#define WEFT_DOCS_H

#include <stddef.h>
#include <stdint.h>

#include "weft/status.h"

typedef enum { WF_TEXT_DOC_FILE = 0, WF_TEXT_DOC_LINE, WF_TEXT_DOC_PARAGRAPH } wf_text_doc_mode;

typedef struct {
    wf_text_doc_mode text_mode;
    const char *field; /* JSONL field; NULL means "text" */
} wf_docs_opts;

/* Parses "file", "line" or "paragraph"; returns -1 otherwise. */
int wf_docs_parse_mode(const char *name);

typedef struct wf_docs wf_docs;

/* Opens the inputs (checked to exist and be readable up front). The paths
 * are copied. */
wf_status wf_docs_open(wf_docs **out, const char *const *paths, size_t n_paths, const wf_docs_opts *o);

/* Next document: *text (not NUL-terminated, *len bytes) stays valid until
 * the next call. At the end returns WF_OK with *text == NULL. */
wf_status wf_docs_next(wf_docs *d, const char **text, size_t *len);

/* Bytes of the input files consumed so far and in total (on-disk sizes, so
 * compressed files count compressed bytes), for progress bars. */
uint64_t wf_docs_progress(const wf_docs *d);
uint64_t wf_docs_total(const wf_docs *d);

/* Documents returned so far. */
uint64_t wf_docs_count(const wf_docs *d);

void wf_docs_destroy(wf_docs *d); /* accepts NULL */

#endif
