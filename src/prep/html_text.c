/* HTML to text with gumbo, Google's HTML5 parser: the page is parsed as a
 * browser would (entities decoded, broken markup repaired), then its tree
 * is walked depth first, without recursion, and its text written the way
 * Common Crawl's WET files show pages: the title first, then one line per
 * block element (paragraph, heading, list item, table cell row, ...),
 * whitespace inside a line collapsed to single spaces, <pre> kept as is.
 * What readers never see is left out: <head> (but its title), scripts,
 * styles, templates, forms' option lists, embedded SVG and MathML.
 *
 * It does not find the "main content" of a page as trafilatura does:
 * boilerplate (menus, footers) is left to the dedup stage, as in CCNet. */
#include <gumbo.h>
#include <stdlib.h>
#include <string.h>

#include "prep/prep_impl.h"

typedef struct {
    wf_buf *out;
    int space;      /* a space is pending before the next word */
    int line_open;  /* the current line has text */
    wf_status status;
} emitter;

static void emit(emitter *e, const char *s, size_t n) {
    if (e->status == WF_OK) e->status = wf_buf_append(e->out, s, n);
}

static void end_line(emitter *e) {
    if (e->line_open) emit(e, "\n", 1);
    e->line_open = 0;
    e->space = 0;
}

/* Text in normal flow: runs of whitespace become one space. */
static void emit_flow(emitter *e, const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f') {
            if (e->line_open) e->space = 1;
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && s[j] != ' ' && s[j] != '\t' && s[j] != '\n' && s[j] != '\r' && s[j] != '\f') j++;
        if (e->space) emit(e, " ", 1);
        e->space = 0;
        emit(e, s + i, j - i);
        e->line_open = 1;
        i = j;
    }
}

/* Text inside <pre>: kept, lines and all. */
static void emit_pre(emitter *e, const char *s, size_t n) {
    if (e->space) emit(e, " ", 1);
    e->space = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\r') continue;
        emit(e, s + i, 1);
        e->line_open = s[i] != '\n';
    }
}

static int skipped_tag(GumboTag t) {
    switch (t) {
    case GUMBO_TAG_HEAD: case GUMBO_TAG_SCRIPT: case GUMBO_TAG_STYLE: case GUMBO_TAG_NOSCRIPT:
    case GUMBO_TAG_TEMPLATE: case GUMBO_TAG_SVG: case GUMBO_TAG_MATH: case GUMBO_TAG_IFRAME:
    case GUMBO_TAG_OBJECT: case GUMBO_TAG_EMBED: case GUMBO_TAG_CANVAS: case GUMBO_TAG_SELECT:
    case GUMBO_TAG_TEXTAREA: case GUMBO_TAG_AUDIO: case GUMBO_TAG_VIDEO: case GUMBO_TAG_MAP:
        return 1;
    default: return 0;
    }
}

static int block_tag(GumboTag t) {
    switch (t) {
    case GUMBO_TAG_P: case GUMBO_TAG_DIV: case GUMBO_TAG_H1: case GUMBO_TAG_H2: case GUMBO_TAG_H3:
    case GUMBO_TAG_H4: case GUMBO_TAG_H5: case GUMBO_TAG_H6: case GUMBO_TAG_UL: case GUMBO_TAG_OL:
    case GUMBO_TAG_LI: case GUMBO_TAG_DL: case GUMBO_TAG_DT: case GUMBO_TAG_DD: case GUMBO_TAG_TABLE:
    case GUMBO_TAG_TR: case GUMBO_TAG_CAPTION: case GUMBO_TAG_THEAD: case GUMBO_TAG_TBODY:
    case GUMBO_TAG_TFOOT: case GUMBO_TAG_PRE: case GUMBO_TAG_BLOCKQUOTE: case GUMBO_TAG_SECTION:
    case GUMBO_TAG_ARTICLE: case GUMBO_TAG_HEADER: case GUMBO_TAG_FOOTER: case GUMBO_TAG_NAV:
    case GUMBO_TAG_ASIDE: case GUMBO_TAG_MAIN: case GUMBO_TAG_FORM: case GUMBO_TAG_FIELDSET:
    case GUMBO_TAG_LEGEND: case GUMBO_TAG_FIGURE: case GUMBO_TAG_FIGCAPTION: case GUMBO_TAG_HR:
    case GUMBO_TAG_ADDRESS: case GUMBO_TAG_DETAILS: case GUMBO_TAG_SUMMARY: case GUMBO_TAG_BODY:
    case GUMBO_TAG_HTML: case GUMBO_TAG_CENTER: case GUMBO_TAG_DIR: case GUMBO_TAG_MENU:
    case GUMBO_TAG_LISTING: case GUMBO_TAG_PLAINTEXT: case GUMBO_TAG_XMP: case GUMBO_TAG_OPTGROUP:
    case GUMBO_TAG_OPTION: case GUMBO_TAG_HGROUP: case GUMBO_TAG_NOFRAMES:
        return 1;
    default: return 0;
    }
}

static int pre_tag(GumboTag t) {
    return t == GUMBO_TAG_PRE || t == GUMBO_TAG_LISTING || t == GUMBO_TAG_PLAINTEXT || t == GUMBO_TAG_XMP;
}

static const GumboNode *find_title(const GumboNode *root) {
    if (root->type != GUMBO_NODE_ELEMENT) return NULL;
    const GumboVector *kids = &root->v.element.children;
    for (unsigned i = 0; i < kids->length; i++) {
        const GumboNode *k = kids->data[i];
        if (k->type == GUMBO_NODE_ELEMENT && k->v.element.tag == GUMBO_TAG_HEAD) {
            const GumboVector *hk = &k->v.element.children;
            for (unsigned j = 0; j < hk->length; j++) {
                const GumboNode *t = hk->data[j];
                if (t->type == GUMBO_NODE_ELEMENT && t->v.element.tag == GUMBO_TAG_TITLE) return t;
            }
        }
    }
    return NULL;
}

/* One step of the walk: a node to enter, or an element to leave. */
typedef struct {
    const GumboNode *node;
    int leave;
} walk_item;

wf_status wf_html_to_text(const char *html, size_t len, wf_buf *out) {
    out->len = 0;
    WF_TRY(wf_buf_reserve(out, len / 2 + 64));
    out->data[0] = '\0';
    GumboOptions opts = kGumboDefaultOptions;
    opts.max_errors = 0; /* the parse errors are not needed: do not keep them */
    GumboOutput *g = gumbo_parse_with_options(&opts, html, len);
    if (!g) return wf_error(WF_ERR_NOMEM, "out of memory parsing %zu bytes of HTML", len);
    emitter e = {out, 0, 0, WF_OK};

    const GumboNode *title = find_title(g->root);
    if (title) {
        const GumboVector *tk = &title->v.element.children;
        for (unsigned i = 0; i < tk->length; i++) {
            const GumboNode *t = tk->data[i];
            if (t->type == GUMBO_NODE_TEXT || t->type == GUMBO_NODE_WHITESPACE)
                emit_flow(&e, t->v.text.text, strlen(t->v.text.text));
        }
        end_line(&e);
    }

    size_t cap = 256, n = 0;
    walk_item *stack = malloc(cap * sizeof *stack);
    if (!stack) {
        gumbo_destroy_output(&opts, g);
        return wf_error(WF_ERR_NOMEM, "out of memory walking HTML");
    }
    stack[n++] = (walk_item){g->root, 0};
    int pre_depth = 0;
    while (n > 0 && e.status == WF_OK) {
        walk_item it = stack[--n];
        const GumboNode *node = it.node;
        if (node->type == GUMBO_NODE_TEXT || node->type == GUMBO_NODE_CDATA ||
            node->type == GUMBO_NODE_WHITESPACE) {
            const char *s = node->v.text.text;
            if (pre_depth) emit_pre(&e, s, strlen(s));
            else emit_flow(&e, s, strlen(s));
            continue;
        }
        if (node->type != GUMBO_NODE_ELEMENT && node->type != GUMBO_NODE_TEMPLATE) continue;
        GumboTag tag = node->v.element.tag;
        if (it.leave) {
            if (pre_tag(tag)) pre_depth--;
            if (block_tag(tag)) end_line(&e);
            else if (tag == GUMBO_TAG_TD || tag == GUMBO_TAG_TH) e.space = e.line_open;
            continue;
        }
        if (node->type == GUMBO_NODE_TEMPLATE || skipped_tag(tag)) continue;
        if (tag == GUMBO_TAG_BR) {
            if (pre_depth) emit(&e, "\n", 1), e.line_open = 0;
            else end_line(&e);
            continue;
        }
        if (tag == GUMBO_TAG_IMG) {
            /* Images say nothing in text; their alt text is often junk. */
            continue;
        }
        if (block_tag(tag)) end_line(&e);
        if (pre_tag(tag)) pre_depth++;
        const GumboVector *kids = &node->v.element.children;
        e.status = WF_GROW(stack, cap, n + kids->length + 1, 64);
        if (e.status != WF_OK) break;
        stack[n++] = (walk_item){node, 1};
        for (unsigned i = kids->length; i-- > 0;) stack[n++] = (walk_item){kids->data[i], 0};
    }
    end_line(&e);
    free(stack);
    gumbo_destroy_output(&opts, g);
    return e.status;
}
