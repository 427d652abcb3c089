/* Fuzz target: the intermediate files of a prep run's steps
 * (src/prep/prep_inter.c, docs/formats/prep-intermediate.md), as the steps
 * read them: the header checked, then every record of the file's kind.
 * The first byte picks the kind (its low bits) and, with its high bit,
 * makes the target write a valid header (magic, version, kind, size,
 * checksum) over the rest, so that mutations reach the records rather than
 * stopping at the checksum. Docs and blob files are also read by the
 * streaming reader (as the filter, output and finish steps read them),
 * with a read size from the input's length, which must agree with the
 * whole-file reader. The readers are module-internal (src/prep's
 * prep_impl.h): its one include here. */
#include "fuzz.h"
#include "prep/prep_impl.h"
#include "weft/fileio.h"

static void put64(unsigned char *p, uint64_t x) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(x >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int kind = 1 + data[0] % (PI_KIND_COUNT - 1);
    int fix = data[0] & 0x80;
    size_t n = size - 1;
    unsigned char *buf = malloc(n + 32);
    FZ_CHECK(buf != NULL, "out of memory");
    memcpy(buf, data + 1, n);
    if (fix && n >= 32) {
        memcpy(buf, PREP_INTER_MAGIC, 8);
        buf[8] = PREP_INTER_VERSION, buf[9] = buf[10] = buf[11] = 0;
        buf[12] = (unsigned char)kind, buf[13] = buf[14] = buf[15] = 0;
        put64(buf + 16, n - 32);
        put64(buf + 24, wf_hash64(buf + 32, n - 32));
    }
    /* The streaming reader: the same records, or an error, never a read
     * outside its buffer. */
    int streamed_ok = -1, n_streamed = 0;
    FILE *mf = (kind == PI_DOCS || kind == PI_BLOB) && n ? fmemopen(buf, n, "rb") : NULL;
    if (mf) {
        prep_dr dr;
        wf_status s = wf__prep_dr_open_fp(&dr, mf, "fuzz", kind, 1 + n % 61, (int)(n % 2));
        while (s == WF_OK && !wf__prep_dr_end(&dr)) {
            prep_idoc d;
            const char *p = NULL;
            size_t got = 0;
            if (kind == PI_DOCS) {
                s = wf__prep_dr_doc(&dr, &d);
                if (s == WF_OK)
                    FZ_CHECK(d.text + d.text_len <= dr.buf.data + dr.buf.len, "a streamed text outside the buffer");
                n_streamed += s == WF_OK;
            } else {
                s = wf__prep_dr_bytes(&dr, &p, &got, 13);
                FZ_CHECK(s != WF_OK || (got > 0 && got <= 13), "a streamed read of no bytes or too many");
            }
        }
        FZ_CHECK(s != WF_OK || wf__prep_dr_offset(&dr) == dr.total, "the stream ended early");
        streamed_ok = s == WF_OK;
        wf__prep_dr_close(&dr);
        fclose(mf);
        wf_error_clear();
    }
    int whole_ok = 0, n_whole = 0;
    prep_ir r;
    if (wf__prep_ir_parse(&r, "fuzz", (const char *)buf, n, kind) == WF_OK) {
        wf_status s = WF_OK;
        while (s == WF_OK && !wf__prep_ir_end(&r)) {
            uint64_t a;
            uint32_t b;
            prep_idoc d;
            prep_piece p;
            switch (kind) {
            case PI_DOCS:
                s = wf__prep_ir_doc(&r, &d);
                n_whole += s == WF_OK;
                if (s == WF_OK) {
                    FZ_CHECK(d.lang[0] && memchr(d.lang, 0, sizeof d.lang), "a language code not terminated");
                    FZ_CHECK(d.text + d.text_len <= r.data + r.len, "a text outside the file");
                }
                break;
            case PI_HASHES:
            case PI_BANDS:
                s = wf__prep_ir_u64(&r, &a, "record");
                if (s == WF_OK) s = wf__prep_ir_u32(&r, &b, "record");
                if (s == WF_OK && kind == PI_HASHES) s = wf__prep_ir_u32(&r, &b, "record");
                break;
            case PI_DROPS:
                s = wf__prep_ir_u32(&r, &b, "record");
                if (s == WF_OK) s = wf__prep_ir_u32(&r, &b, "record");
                break;
            case PI_EDGES:
            case PI_CLUSTER:
                s = wf__prep_ir_u64(&r, &a, "record");
                break;
            case PI_INDEX:
                s = wf__prep_ir_piece(&r, &p);
                if (s == WF_OK)
                    FZ_CHECK(memchr(p.lang, 0, sizeof p.lang) && memchr(p.bucket, 0, sizeof p.bucket),
                             "a piece's names not terminated");
                break;
            default: /* a blob: its bytes are the pieces, read by the index */
                r.pos = r.len;
                break;
            }
            FZ_CHECK(r.pos <= r.len, "read past the end");
        }
        whole_ok = s == WF_OK;
    }
    if (streamed_ok >= 0) {
        FZ_CHECK(streamed_ok == whole_ok, "the streaming and whole-file readers disagree on a file");
        FZ_CHECK(!whole_ok || n_streamed == n_whole, "the streaming reader read another number of documents");
    }
    free(buf);
    wf_error_clear();
    return 0;
}
