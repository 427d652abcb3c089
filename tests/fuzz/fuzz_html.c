/* Fuzz target: HTML to text (src/prep/html_text.c), as `weft prep` extracts
 * the text of every crawled page. Any bytes (any encoding, broken markup)
 * give text or a status; text that comes back is valid UTF-8 when the
 * input was. */
#include "fuzz.h"
#include "weft/prep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    wf_buf out = {0};
    if (wf_html_to_text((const char *)data, size, &out) == WF_OK && wf_utf8_valid((const char *)data, size))
        FZ_CHECK(wf_utf8_valid(out.data, out.len), "valid UTF-8 in, invalid UTF-8 out");
    wf_buf_free(&out);
    wf_error_clear();
    return 0;
}
