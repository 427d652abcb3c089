/* Fuzz target: the S3 XML answers weft reads (src/store/s3_xml.c): a
 * ListObjectsV2 page and an <Error> body, as a server (or anything between
 * weft and it) may send them. The first byte picks the parser (even: the
 * listing, read twice into one listing as pages accumulate; odd: the
 * error); the rest is the body. Checked beyond "no crash": every listed key
 * is non-empty and NUL-free up to its end; a truncated page has a
 * non-empty continuation token and an untruncated one none; the error's
 * code and message are bounded and free of control characters. Uses the
 * module's internal header. */
#include "fuzz.h"
#include "store/store_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const char *xml = (const char *)data + 1;
    size_t len = size - 1;
    if ((data[0] & 1) == 0) {
        wf__s3_listing l = {0};
        for (int page = 0; page < 2; page++) {
            size_t before = l.n;
            if (wf__s3_parse_list(xml, len, &l) != WF_OK) break;
            if (l.truncated != (l.next_token != NULL) || (l.next_token && !*l.next_token)) abort();
            if (l.n < before) abort();
            for (size_t i = 0; i < l.n; i++)
                if (!l.objects[i].key || !l.objects[i].key[0]) abort();
        }
        wf__s3_listing_free(&l);
    } else {
        char code[64], msg[256];
        wf__s3_parse_error(xml, len, code, sizeof code, msg, sizeof msg);
        if (strlen(code) >= sizeof code || strlen(msg) >= sizeof msg) abort();
        for (const char *p = msg; *p; p++)
            if ((unsigned char)*p < 32) abort();
        for (const char *p = code; *p; p++)
            if ((unsigned char)*p < 32) abort();
    }
    wf_error_clear();
    return 0;
}
