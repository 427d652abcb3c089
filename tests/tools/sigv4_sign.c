/* sigv4_sign: weft's S3 request signer (src/store/sigv4.c) and its
 * SHA-256 / HMAC-SHA-256 (sha256.c) on requests given as JSON, for
 * tests/py/test_store_sigv4.py, which computes the same with botocore and
 * Python's hashlib. Uses the store module's internal header.
 *
 *   sigv4_sign < requests.json
 *
 * Input: a JSON array of objects, each either
 *   {"sign": {method, host, path, query: [[name, value], ...], headers:
 *    [[name, value], ...], body_hex, amz_date, region, access_key,
 *    secret_key, session_token}}
 *   {"hash": body_hex, "key": key_hex}
 * Output: one JSON line per item: {"authorization": ..., "canonical": ...}
 * or {"sha256": hex, "hmac": hex}. Exit status 1 on an error. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_impl.h"

static unsigned char *unhex(const char *s, size_t *n) {
    size_t len = strlen(s) / 2;
    unsigned char *p = malloc(len + 1);
    for (size_t i = 0; p && i < len; i++) {
        int hi = s[2 * i] <= '9' ? s[2 * i] - '0' : s[2 * i] - 'a' + 10;
        int lo = s[2 * i + 1] <= '9' ? s[2 * i + 1] - '0' : s[2 * i + 1] - 'a' + 10;
        p[i] = (unsigned char)(hi << 4 | lo);
    }
    *n = len;
    return p;
}

static const char *str(json_t *o, const char *k) {
    const char *v = json_string_value(json_object_get(o, k));
    return v ? v : "";
}

static wf__kv *pairs(json_t *a, size_t *n) {
    *n = json_array_size(a);
    wf__kv *kv = calloc(*n + 1, sizeof *kv);
    for (size_t i = 0; i < *n; i++) {
        kv[i].name = json_string_value(json_array_get(json_array_get(a, i), 0));
        kv[i].value = json_string_value(json_array_get(json_array_get(a, i), 1));
    }
    return kv;
}

int main(void) {
    json_error_t err;
    json_t *all = json_loadf(stdin, 0, &err);
    if (!json_is_array(all)) {
        fprintf(stderr, "sigv4_sign: want a JSON array on stdin: %s\n", err.text);
        return 1;
    }
    size_t i;
    json_t *item;
    json_array_foreach(all, i, item) {
        json_t *sign = json_object_get(item, "sign");
        size_t blen;
        unsigned char *body = unhex(sign ? str(sign, "body_hex") : str(item, "hash"), &blen);
        unsigned char digest[32];
        char hex[65];
        wf_sha256(body, blen, digest);
        wf_hex(digest, 32, hex);
        if (!sign) {
            size_t klen;
            unsigned char *key = unhex(str(item, "key"), &klen), mac[32];
            char mhex[65];
            wf_hmac_sha256(key, klen, body, blen, mac);
            wf_hex(mac, 32, mhex);
            printf("{\"sha256\": \"%s\", \"hmac\": \"%s\"}\n", hex, mhex);
            free(key);
            free(body);
            continue;
        }
        size_t nq, nh;
        wf__kv *q = pairs(json_object_get(sign, "query"), &nq), *h = pairs(json_object_get(sign, "headers"), &nh);
        wf__sigv4_req r = {str(sign, "method"), str(sign, "host"), str(sign, "path"), q, nq, h, nh, hex,
                           str(sign, "amz_date"), str(sign, "region"), "s3", str(sign, "access_key"),
                           str(sign, "secret_key"), str(sign, "session_token")};
        wf_buf auth = {0}, canon = {0};
        if (wf__sigv4_sign(&r, &auth, &canon) != WF_OK) {
            fprintf(stderr, "sigv4_sign: %s\n", wf_error_msg());
            return 1;
        }
        json_t *out = json_pack("{s:s, s:s}", "authorization", auth.data, "canonical", canon.data);
        char *line = json_dumps(out, JSON_COMPACT);
        printf("%s\n", line);
        free(line);
        json_decref(out);
        wf_buf_free(&auth), wf_buf_free(&canon);
        free(q), free(h), free(body);
    }
    json_decref(all);
    return 0;
}
