/* Lines of a text in memory and JSON Lines (include/weft/lines.h). */
#include "weft/lines.h"

#include <jansson.h>
#include <string.h>

void wf_lines_init(wf_lines *it, const char *text, size_t len) {
    it->next = text;
    it->end = text + len;
    it->lineno = 0;
}

static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

int wf_lines_next(wf_lines *it, const char **line, size_t *len) {
    while (it->next < it->end) {
        const char *s = it->next;
        const char *nl = memchr(s, '\n', (size_t)(it->end - s));
        size_t n = nl ? (size_t)(nl - s) : (size_t)(it->end - s);
        it->next = nl ? nl + 1 : it->end;
        it->lineno++;
        if (blank(s, n)) continue;
        *line = s;
        *len = n;
        return 1;
    }
    return 0;
}

int wf_lines_next_json(wf_lines *it, json_t **value) {
    const char *line;
    size_t n;
    if (!wf_lines_next(it, &line, &n)) return 0;
    json_error_t err;
    *value = json_loadb(line, n, 0, &err);
    return 1;
}
