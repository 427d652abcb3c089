/* weft: the lines of a text in memory, for the JSON Lines files weft reads
 * back (metrics.jsonl, eval.jsonl). One loop for all of them: the text is
 * split at '\n', blank lines (nothing but spaces, tabs and '\r') are
 * skipped but counted, so that a line number names the line a text editor
 * shows, and a last line without its newline is a line too. The text is
 * only read: nothing is written into it, and it need not end in a NUL.
 *
 *   wf_lines it;
 *   wf_lines_init(&it, text, len);
 *   json_t *o;
 *   while (wf_lines_next_json(&it, &o)) {   // o is NULL where a line is no JSON
 *       ... it.lineno ...
 *       json_decref(o);
 *   }
 *
 * It does not judge what a line holds: whether a value is the record a
 * reader expects is the reader's business. */
#ifndef WEFT_LINES_H
#define WEFT_LINES_H

#include <stddef.h>

struct json_t; /* jansson's; include <jansson.h> to use the values */

typedef struct {
    const char *next, *end; /* the text not yet returned */
    size_t lineno;          /* the line last returned, from 1 (blank lines count); 0 before the first */
} wf_lines;

/* Starts at the first line of text[0, len). */
void wf_lines_init(wf_lines *it, const char *text, size_t len);

/* The next line that is not blank: 1 with *line pointing into the text
 * and *len its bytes without the '\n' (a '\r' before it stays, as JSON
 * allows it as whitespace); 0 at the end of the text. */
int wf_lines_next(wf_lines *it, const char **line, size_t *len);

/* The next line that is not blank, parsed as JSON: 1 with *value the new
 * reference the caller owns (json_decref), or NULL when the line is not
 * one JSON object or array (jansson's json_loadb with no flags); 0 at the
 * end of the text. */
int wf_lines_next_json(wf_lines *it, struct json_t **value);

#endif
