/* Fuzz target: HTML to text (src/prep/html_text.c), as `weft prep` extracts
 * the text of every crawled page, followed by the normalization stage that
 * takes its output (src/prep/normalize.c). Any bytes (any encoding, broken
 * markup, character references past U+10FFFF) give text or a status. The
 * extracted text may hold invalid UTF-8 (gumbo passes some malformed
 * references through, found by this target); the normalization repairs it
 * (U+FFFD) or drops the document, so what prep keeps is always valid
 * UTF-8: that is checked here, with NFC and with NFKC. */
#include "fuzz.h"
#include "weft/prep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    wf_buf text = {0}, norm = {0};
    if (wf_html_to_text((const char *)data, size, &text) == WF_OK) {
        for (int form = 1; form <= 2; form++) {
            wf_normalize_opts o = {.form = form, .cleanup = 1, .drop_invalid = size & 1, .max_control_ratio = 0.5};
            int repaired = 0;
            wf_norm_result r = wf_text_normalize(text.data, text.len, &o, &norm, &repaired);
            if (r == WF_NORM_OK) FZ_CHECK(wf_utf8_valid(norm.data, norm.len), "normalized text is not valid UTF-8");
        }
    }
    wf_buf_free(&text);
    wf_buf_free(&norm);
    wf_error_clear();
    return 0;
}
