/* Language identification with CLD2 (Compact Language Detector 2, from
 * Debian's libcld2).
 *
 * CLD2 is a C++ library with no C interface and no pkg-config file. The two
 * functions used here take and return only pointers, ints, bools and the
 * enum CLD2::Language (an int), which the Itanium C++ ABI used by gcc and
 * clang on Linux passes exactly as C passes the same types. So they are
 * declared below under their C++ (mangled) symbol names and called
 * directly: no C++ compiler and no shim file in the build. The names are
 * part of libcld2's ABI (soname libcld2.so.0); should they ever change, the
 * link fails loudly rather than anything misbehaving at run time.
 *
 * CLD2 is thread-safe (read-only tables) and needs valid UTF-8, which the
 * normalize stage guarantees. The confidence is the share of the text's
 * letters that CLD2 gives to the top language (its percent3[0] / 100). */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "prep/prep_impl.h"

/* CLD2::Language CLD2::ExtDetectLanguageSummary(const char *buffer, int buffer_length,
 *     bool is_plain_text, CLD2::Language *language3, int *percent3, int *text_bytes,
 *     bool *is_reliable) */
int _ZN4CLD224ExtDetectLanguageSummaryEPKcibPNS_8LanguageEPiS4_Pb(const char *buffer, int buffer_length,
                                                                bool is_plain_text, int *language3,
                                                                int *percent3, int *text_bytes,
                                                                bool *is_reliable);
/* const char *CLD2::LanguageCode(CLD2::Language lang) */
const char *_ZN4CLD212LanguageCodeENS_8LanguageE(int lang);

/* CLD2 looks at the whole buffer; beyond a few hundred kilobytes the
 * answer no longer changes, so long documents are sampled from the start. */
#define LANGID_MAX_BYTES (256 * 1024)

void wf_langid_detect(const char *text, size_t len, char code[16], double *confidence, int *reliable) {
    if (len > LANGID_MAX_BYTES) {
        /* Cut on a character boundary. */
        len = LANGID_MAX_BYTES;
        while (len > 0 && ((unsigned char)text[len] & 0xC0) == 0x80) len--;
    }
    int lang3[3] = {0, 0, 0}, pct3[3] = {0, 0, 0}, text_bytes = 0;
    bool rel = false;
    int lang = _ZN4CLD224ExtDetectLanguageSummaryEPKcibPNS_8LanguageEPiS4_Pb(text, (int)len, true, lang3, pct3,
                                                                           &text_bytes, &rel);
    const char *c = _ZN4CLD212LanguageCodeENS_8LanguageE(lang);
    if (!c || !c[0]) c = "un";
    snprintf(code, 16, "%s", c);
    int pct = 0;
    for (int i = 0; i < 3; i++)
        if (lang3[i] == lang) {
            pct = pct3[i];
            break;
        }
    *confidence = strcmp(code, "un") == 0 ? 0.0 : pct / 100.0;
    *reliable = rel;
}

/* CLD2::Language runs from 0 to NUM_LANGUAGES - 1 (614 in libcld2 0.0.0; a
 * larger bound is harmless: CLD2 maps values out of range to unknown). */
#define LANGID_MAX_ENUM 1024

int wf__prep_langid_known(const char *code) {
    if (strcmp(code, "un") == 0) return 0;
    for (int i = 0; i < LANGID_MAX_ENUM; i++) {
        const char *c = _ZN4CLD212LanguageCodeENS_8LanguageE(i);
        if (c && strcmp(c, code) == 0) return 1;
    }
    return 0;
}
