/* weft: SHA-256 and HMAC-SHA-256 (FIPS 180-4, RFC 2104), in one place: the
 * S3 request signer (src/store) signs with them, and the downstream task
 * files are checked against their manifest with them (src/train). Not
 * constant-time: nothing compares secrets with them. */
#ifndef WEFT_SHA256_H
#define WEFT_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t len;          /* bytes hashed so far */
    unsigned char buf[64]; /* the partial block */
    size_t fill;
} wf_sha256_ctx;

void wf_sha256_init(wf_sha256_ctx *s);
void wf_sha256_update(wf_sha256_ctx *s, const void *data, size_t n);
void wf_sha256_final(wf_sha256_ctx *s, unsigned char out[32]);
/* The digest of n bytes, in one call. */
void wf_sha256(const void *data, size_t n, unsigned char out[32]);
/* The same as lower-case hex (64 characters and the NUL). */
void wf_sha256_hex(const void *data, size_t n, char hex[65]);
void wf_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t msg_len, unsigned char out[32]);
/* Lower-case hex of n bytes into out (2n + 1 characters with the NUL). */
void wf_hex(const unsigned char *p, size_t n, char *out);

#endif
