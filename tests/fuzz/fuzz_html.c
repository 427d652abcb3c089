/* Fuzz target: HTML to text (src/prep/html_text.c), as `weft prep` extracts
 * the text of every crawled page, followed by the normalization stage that
 * takes its output (src/prep/normalize.c). Any bytes (any encoding, broken
 * markup, character references past U+10FFFF) give text or a status. The
 * extracted text may hold invalid UTF-8 (gumbo passes some malformed
 * references through, found by this target); the normalization repairs it
 * (U+FFFD) or drops the document, so what prep keeps is always valid
 * UTF-8: that is checked here, with NFC and with NFKC. Then the MinHash
 * signatures (src/prep/minhash.c) of the raw bytes, which may be invalid
 * UTF-8, and of the normalized text, on words and on characters: a text's
 * 1-character shingles are the code points of its dedup normalization
 * less the spaces. */
#include "fuzz.h"
#include "weft/prep.h"

/* Code points of s[0, n) (valid UTF-8) that are not ' '. */
static size_t non_space_cps(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80 && s[i] != ' ';
    return k;
}

static void signatures(const char *s, size_t n, wf_buf *dn) {
    uint64_t sig[8];
    wf_minhash_signature(s, n, 3, 8, 1, sig);
    size_t chars = wf_minhash_signature_chars(s, n, 1 + (int)(n % 7), 8, 1, sig);
    if (wf_dedup_normalize(s, n, dn) == WF_OK) {
        size_t cps = non_space_cps(dn->data, dn->len);
        size_t ng = 1 + n % 7, want = cps == 0 ? 0 : cps < ng ? 1 : cps - ng + 1;
        FZ_CHECK(chars == want, "character shingles do not match the code points of the normalized text");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    wf_buf text = {0}, norm = {0}, dn = {0};
    signatures((const char *)data, size, &dn);
    if (wf_html_to_text((const char *)data, size, &text) == WF_OK) {
        for (int form = 1; form <= 2; form++) {
            wf_normalize_opts o = {.form = form, .cleanup = 1, .drop_invalid = size & 1, .max_control_ratio = 0.5};
            int repaired = 0;
            wf_norm_result r = wf_text_normalize(text.data, text.len, &o, &norm, &repaired);
            if (r == WF_NORM_OK) {
                FZ_CHECK(wf_utf8_valid(norm.data, norm.len), "normalized text is not valid UTF-8");
                signatures(norm.data, norm.len, &dn);
            }
        }
    }
    wf_buf_free(&text);
    wf_buf_free(&norm);
    wf_buf_free(&dn);
    wf_error_clear();
    return 0;
}
