/* weft: writing JSON strings. One escaper for every JSON weft writes
 * (metrics, run records, reports, traces, tokenizer.json, prep output, the
 * CLI's --json): a quote, a backslash and the control characters below
 * 0x20 are escaped (\b \f \n \r \t by name, the others as \u00XX, as
 * Python's json and serde_json write them); every other byte, UTF-8
 * included, is copied as it is. Reading JSON is jansson's job. */
#ifndef WEFT_JSON_H
#define WEFT_JSON_H

#include <stddef.h>
#include <stdio.h>

#include "weft/buf.h"
#include "weft/status.h"

/* The escaped form of s[0, len) without quotes, into dst (room for
 * wf_json_escaped_len bytes; no NUL is added). Returns the bytes written. */
size_t wf_json_escape(char *dst, const char *s, size_t len);
size_t wf_json_escaped_len(const char *s, size_t len);

/* Appends s[0, len) as a JSON string literal, with its quotes. */
wf_status wf_buf_json_str(wf_buf *b, const char *s, size_t len);
/* Writes the NUL-terminated s as a JSON string literal, with its quotes;
 * NULL is written as null. */
void wf_json_fput_str(FILE *f, const char *s);
/* Writes only the escaped body of s (no quotes), for writers whose format
 * strings hold the quotes. */
void wf_json_fput_body(FILE *f, const char *s);

#endif
