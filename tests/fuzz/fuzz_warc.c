/* Fuzz target: WARC/WET records (src/prep/warc.c) as `weft prep` reads a
 * crawl: the format from the contents, compression (gzip, with a member per
 * record as crawls ship them, or zstd) from the magic bytes. Every record
 * is read until the end, a damaged input (which ends early with a
 * warning) or an error. The reader is module-internal (src/prep's
 * prep_impl.h): its one include here. */
#include "fuzz.h"
#include "prep/prep_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static wf_prep_config c;
    static int have_config;
    if (!have_config) {
        FZ_CHECK(wf_prep_config_default(&c) == WF_OK, "%s", wf_error_msg());
        have_config = 1;
    }
    char path[4200];
    fz_write(fz_path(path, sizeof path, "crawl.warc"), data, size);
    prep_reader *r = NULL;
    if (wf__prep_reader_open(&r, path, &c) == WF_OK) {
        prep_record rec;
        int eof = 0;
        for (int i = 0; i < 100000; i++) {
            if (wf__prep_reader_next(r, &rec, &eof) != WF_OK || eof) break;
            FZ_CHECK(rec.len == 0 || rec.data != NULL, "a record of %zu bytes without data", rec.len);
        }
        (void)wf__prep_reader_consumed(r);
        (void)wf__prep_reader_damaged(r);
    }
    wf__prep_reader_close(r);
    wf_error_clear();
    return 0;
}
