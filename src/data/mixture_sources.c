/* A mixture's sources on disk: their one tokenizer (weft/mixture.h,
 * wf_mix_spec_check_tokenizer; docs/loader.md, "One tokenizer"). The
 * schedule itself (mixture.c) reads no data; this reads each source's
 * dataset.json and, for a dataset of a weft before fingerprints, the
 * tokenizer file it names. Shared by `weft train` (data.sources) and the
 * Python package (weft.Loader(sources=...)), so both refuse the same
 * mixtures with the same message. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/fileio.h"
#include "weft/log.h"
#include "weft/mixture.h"
#include "weft/shard.h"
#include "weft/tokenizer.h"

wf_status wf_mix_spec_check_tokenizer(const wf_mix_spec *spec, const char *tokenizer, const char *key,
                                      const char *tokenizer_key, uint32_t *vocab_out, char **tokenizer_out) {
    if (tokenizer_out) *tokenizer_out = NULL;
    uint64_t fp[WF_MIX_MAX_SOURCES];
    char from[WF_MIX_MAX_SOURCES][320];
    uint32_t vocab = 0;
    char *first_tok = NULL;
    int first = -1;
    wf_status s = WF_OK;
    for (int k = 0; k < spec->n && s == WF_OK; k++) {
        wf_dataset_info info;
        s = wf_dataset_info_load(&info, spec->dirs[k]);
        if (s != WF_OK) {
            wf_error_wrap(s, "%s: source '%s': ", key, spec->names[k]);
            break;
        }
        if (k == 0) vocab = info.vocab_size;
        if (info.vocab_size != vocab) {
            s = wf_error(WF_ERR_CONFIG, "%s: source '%s' (%s) has a vocabulary of %u ids, source '%s' (%s) one of "
                                        "%u: the sources of a mixture are tokenized with one tokenizer",
                         key, spec->names[k], spec->dirs[k], info.vocab_size, spec->names[0], spec->dirs[0], vocab);
            wf_dataset_info_free(&info);
            break;
        }
        int known = 0;
        if (info.has_fingerprint) {
            fp[k] = info.tokenizer_fingerprint;
            known = 1;
            snprintf(from[k], sizeof from[k], "%s/dataset.json", spec->dirs[k]);
        } else if (info.tokenizer && wf_path_exists(info.tokenizer)) {
            /* A dataset of a weft before fingerprints: the file it names, as it is now. */
            if (wf_tokenizer_file_fingerprint(info.tokenizer, &fp[k]) == WF_OK) {
                known = 1;
                snprintf(from[k], sizeof from[k], "its tokenizer %s", info.tokenizer);
            }
            wf_error_clear();
        }
        if (!first_tok && info.tokenizer) {
            first_tok = strdup(info.tokenizer);
            if (!first_tok) s = wf_error(WF_ERR_NOMEM, "out of memory");
        }
        wf_dataset_info_free(&info);
        if (s != WF_OK) break;
        if (!known) {
            WF_WARN("%s: source '%s' (%s) records no tokenizer fingerprint and no tokenizer file weft can read (a "
                    "dataset of an older weft?): only its vocabulary size is checked against the others; tokenize "
                    "it again to have its tokenizer checked",
                    key, spec->names[k], spec->dirs[k]);
            continue;
        }
        if (first < 0) {
            first = k;
        } else if (fp[k] != fp[first]) {
            s = wf_error(WF_ERR_CONFIG,
                         "%s: source '%s' (%s) was tokenized with another tokenizer than source '%s' (%s): tokenizer "
                         "fingerprints %016" PRIx64 " (%s) and %016" PRIx64 " (%s); the sources of a mixture share "
                         "one tokenizer: tokenize them all with the same tokenizer.json",
                         key, spec->names[k], spec->dirs[k], spec->names[first], spec->dirs[first], fp[k], from[k],
                         fp[first], from[first]);
        }
    }
    if (s == WF_OK && tokenizer && first >= 0 && wf_path_exists(tokenizer)) {
        uint64_t g;
        s = wf_tokenizer_file_fingerprint(tokenizer, &g);
        if (s == WF_OK && g != fp[first])
            s = wf_error(WF_ERR_CONFIG,
                         "%s = %s (fingerprint %016" PRIx64 ") is not the tokenizer the sources were tokenized with "
                         "(%016" PRIx64 ", %s): the model would record the wrong one; give theirs or leave %s out",
                         tokenizer_key, tokenizer, g, fp[first], from[first], tokenizer_key);
    }
    if (s != WF_OK) {
        free(first_tok);
        return s;
    }
    if (vocab_out) *vocab_out = vocab;
    if (tokenizer_out)
        *tokenizer_out = first_tok;
    else
        free(first_tok);
    return WF_OK;
}
