/* weft._weft.Tokenizer: weft's byte-level BPE tokenizer (tokenizer.h).
 *
 * A loaded tokenizer is immutable and safe to share between threads, so
 * every call releases the GIL while it encodes or decodes. encode_batch
 * encodes a list of texts on several threads (wf_parallel_run): the texts'
 * UTF-8 bytes are taken while the GIL is held (a tuple keeps the strings
 * alive), the threads take texts from a shared counter in chunks and
 * append their ids to a buffer of their own, noting where each text's ids
 * are, and the Python lists are built after the threads are done, so the
 * result does not depend on the thread count. */
#include "pyweft.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "weft/thread.h"
#include "weft/tokenizer.h"

typedef struct {
    PyObject_HEAD
    wf_tokenizer *t;
    PyObject **ints; /* (vocab_size) the Python int of every id, made at the first encode */
    size_t n_ints;
} pw_tok;

static void tok_dealloc(pw_tok *p) {
    for (size_t i = 0; p->ints && i < p->n_ints; i++) Py_XDECREF(p->ints[i]);
    PyMem_Free(p->ints);
    wf_tokenizer_destroy(p->t);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static int tok_init(pw_tok *p, PyObject *args, PyObject *kw) {
    static char *names[] = {"path", NULL};
    PyObject *path;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&:Tokenizer", names, PyUnicode_FSConverter, &path)) return -1;
    if (p->t) {
        Py_DECREF(path);
        PyErr_SetString(PyExc_RuntimeError, "Tokenizer is already loaded");
        return -1;
    }
    wf_status s;
    Py_BEGIN_ALLOW_THREADS
    s = wf_tokenizer_load(&p->t, PyBytes_AS_STRING(path));
    Py_END_ALLOW_THREADS
    Py_DECREF(path);
    if (s != WF_OK) {
        pw_raise(s);
        return -1;
    }
    return 0;
}

/* Methods of a Tokenizer whose __init__ did not succeed raise. */
static int tok_check(pw_tok *p) {
    if (p->t) return 0;
    PyErr_SetString(PyExc_RuntimeError, "the Tokenizer is not loaded");
    return -1;
}

/* The bytes of a str (its UTF-8, cached in the object) or bytes object;
 * valid while the object lives. */
static int text_bytes(PyObject *o, const char **p, Py_ssize_t *n) {
    if (PyUnicode_Check(o)) {
        *p = PyUnicode_AsUTF8AndSize(o, n);
        return *p ? 0 : -1;
    }
    if (PyBytes_Check(o)) {
        *p = PyBytes_AS_STRING(o);
        *n = PyBytes_GET_SIZE(o);
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "text must be str or bytes, not %.100s", Py_TYPE(o)->tp_name);
    return -1;
}

/* The Python ints of the vocabulary's ids, shared by every list of ids
 * this tokenizer returns: a list is then filled by reference counting
 * alone, where making a new int for each id took most of the time of
 * encode_batch beyond the encoding itself. */
static int make_ints(pw_tok *p) {
    if (p->ints) return 0;
    size_t n = wf_tokenizer_vocab_size(p->t);
    PyObject **ints = PyMem_Calloc(n ? n : 1, sizeof *ints);
    if (!ints) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        ints[i] = PyLong_FromSize_t(i);
        if (!ints[i]) {
            for (size_t k = 0; k < i; k++) Py_DECREF(ints[k]);
            PyMem_Free(ints);
            return -1;
        }
    }
    p->ints = ints;
    p->n_ints = n;
    return 0;
}

static PyObject *ids_list(pw_tok *p, const int32_t *ids, size_t n) {
    PyObject *l = PyList_New((Py_ssize_t)n);
    if (!l) return NULL;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i]; /* below the vocabulary size: the encoder makes no other */
        PyObject *x = (size_t)id < p->n_ints ? Py_NewRef(p->ints[id]) : PyLong_FromLong(id);
        if (!x) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, x);
    }
    return l;
}

static PyObject *tok_encode(pw_tok *p, PyObject *args, PyObject *kw) {
    static char *names[] = {"text", "parse_special", NULL};
    PyObject *text;
    int special = 0;
    if (tok_check(p) < 0 || !PyArg_ParseTupleAndKeywords(args, kw, "O|p:encode", names, &text, &special))
        return NULL;
    const char *bytes;
    Py_ssize_t n;
    if (make_ints(p) < 0 || text_bytes(text, &bytes, &n) < 0) return NULL;
    wf_ids ids = {0};
    wf_status s;
    Py_BEGIN_ALLOW_THREADS
    s = wf_tokenizer_encode(p->t, bytes, (size_t)n, special, &ids);
    Py_END_ALLOW_THREADS
    PyObject *r = s == WF_OK ? ids_list(p, ids.ids, ids.n) : pw_raise(s);
    wf_ids_free(&ids);
    return r;
}

/* ---- encode_batch ---- */

#define BATCH_CHUNK 16 /* texts a thread takes at a time */

/* Each thread appends the ids of the texts it takes to its own buffer and
 * notes where each text's ids are: no allocation per text. */
typedef struct {
    const wf_tokenizer *t;
    const char **text;
    size_t *len;
    size_t n;
    int special;
    atomic_size_t next;
    wf_ids *buf;    /* (threads) */
    int *where;     /* (n) the thread that encoded text i ... */
    size_t *first;  /* (n) ... and where its ids start in that thread's buffer */
    size_t *count;  /* (n) how many */
} batch_job;

static wf_status batch_worker(void *ctx, int tid, int n_threads) {
    (void)n_threads;
    batch_job *j = ctx;
    wf_ids *out = &j->buf[tid];
    for (;;) {
        size_t first = atomic_fetch_add_explicit(&j->next, BATCH_CHUNK, memory_order_relaxed);
        if (first >= j->n) return WF_OK;
        size_t last = first + BATCH_CHUNK < j->n ? first + BATCH_CHUNK : j->n;
        for (size_t i = first; i < last; i++) {
            j->where[i] = tid;
            j->first[i] = out->n;
            WF_TRY(wf_tokenizer_encode(j->t, j->text[i], j->len[i], j->special, out));
            j->count[i] = out->n - j->first[i];
        }
    }
}

static PyObject *tok_encode_batch(pw_tok *p, PyObject *args, PyObject *kw) {
    static char *names[] = {"texts", "parse_special", "num_threads", NULL};
    PyObject *texts;
    int special = 0, threads = 0;
    if (tok_check(p) < 0 ||
        !PyArg_ParseTupleAndKeywords(args, kw, "O|pi:encode_batch", names, &texts, &special, &threads))
        return NULL;
    if (threads < 0)
        return PyErr_Format(PyExc_ValueError, "num_threads is %d; use 0 (the default count) or more", threads);
    if (make_ints(p) < 0) return NULL;
    /* A tuple: holds the texts even if the caller's list changes meanwhile. */
    PyObject *tup = PySequence_Tuple(texts);
    if (!tup) return NULL;
    size_t n = (size_t)PyTuple_GET_SIZE(tup);
    if (threads == 0) threads = wf_default_threads();
    batch_job j = {.t = p->t, .n = n, .special = special};
    atomic_init(&j.next, 0);
    j.text = calloc(n + 1, sizeof *j.text);
    j.len = calloc(n + 1, sizeof *j.len);
    j.where = calloc(n + 1, sizeof *j.where);
    j.first = calloc(n + 1, sizeof *j.first);
    j.count = calloc(n + 1, sizeof *j.count);
    j.buf = calloc((size_t)threads, sizeof *j.buf);
    PyObject *result = NULL;
    if (!j.text || !j.len || !j.where || !j.first || !j.count || !j.buf) {
        PyErr_NoMemory();
        goto done;
    }
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        Py_ssize_t len;
        PyObject *item = PyTuple_GET_ITEM(tup, (Py_ssize_t)i);
        if (!PyUnicode_Check(item) && !PyBytes_Check(item)) {
            PyErr_Format(PyExc_TypeError, "texts[%zu] must be str or bytes, not %.100s", i, Py_TYPE(item)->tp_name);
            goto done;
        }
        if (text_bytes(item, &j.text[i], &len) < 0) goto done;
        j.len[i] = (size_t)len;
        total += (size_t)len;
    }
    /* Threads cost tens of microseconds to start: small batches run on
     * the caller's thread alone. */
    size_t useful = total / 65536 + 1, by_texts = (n + BATCH_CHUNK - 1) / BATCH_CHUNK;
    int run_threads = threads;
    if ((size_t)run_threads > useful) run_threads = (int)useful;
    if ((size_t)run_threads > by_texts) run_threads = by_texts ? (int)by_texts : 1;
    wf_status s;
    Py_BEGIN_ALLOW_THREADS
    s = wf_parallel_run(run_threads, batch_worker, &j);
    Py_END_ALLOW_THREADS
    if (s != WF_OK) {
        pw_raise(s);
        goto done;
    }
    /* Thousands of new lists would start the cyclic garbage collector
     * again and again, each pass walking every list made so far (it
     * doubled the time of a batch of short texts); lists of ints make no
     * cycles, so it is paused while they are built. */
    int gc_was_on = PyGC_Disable();
    result = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; result && i < n; i++) {
        PyObject *l = ids_list(p, j.buf[j.where[i]].ids + j.first[i], j.count[i]);
        if (!l) Py_CLEAR(result);
        else PyList_SET_ITEM(result, (Py_ssize_t)i, l);
    }
    if (gc_was_on) PyGC_Enable();
done:
    for (int t = 0; j.buf && t < threads; t++) wf_ids_free(&j.buf[t]);
    free(j.buf);
    free(j.count);
    free(j.first);
    free(j.where);
    free(j.len);
    free(j.text);
    Py_DECREF(tup);
    return result;
}

/* ---- decode ---- */

/* The ids of a sequence of ints, or of a buffer of int32 (a NumPy array),
 * as a malloc'd array. */
static int32_t *ids_from(PyObject *o, size_t *n) {
    Py_buffer b;
    if (PyObject_CheckBuffer(o) && PyObject_GetBuffer(o, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) {
        int ok = b.itemsize == 4 && b.format && (strcmp(b.format, "i") == 0 || strcmp(b.format, "<i") == 0 ||
                                                strcmp(b.format, "=i") == 0);
        int32_t *ids = NULL;
        if (ok) {
            *n = (size_t)b.len / 4;
            ids = malloc(*n ? (size_t)b.len : 1);
            if (ids) memcpy(ids, b.buf, (size_t)b.len);
            else PyErr_NoMemory();
        }
        PyBuffer_Release(&b);
        if (ok) return ids;
    }
    PyErr_Clear();
    PyObject *seq = PySequence_Fast(o, "ids must be a sequence of integers");
    if (!seq) return NULL;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    int32_t *ids = malloc((size_t)len * sizeof *ids + 1);
    if (!ids) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError, "ids[%zd] is not a token id (too large)", i);
            } else {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "ids[%zd] is not an integer", i);
            }
            goto fail;
        }
        if (v < INT32_MIN || v > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "ids[%zd] = %ld is not a token id", i, v);
            goto fail;
        }
        ids[i] = (int32_t)v;
    }
    Py_DECREF(seq);
    *n = (size_t)len;
    return ids;
fail:
    free(ids);
    Py_DECREF(seq);
    return NULL;
}

static PyObject *tok_decode(pw_tok *p, PyObject *arg) {
    if (tok_check(p) < 0) return NULL;
    size_t n = 0;
    int32_t *ids = ids_from(arg, &n);
    if (!ids) return NULL;
    char *out = NULL;
    size_t len = 0;
    wf_status s;
    Py_BEGIN_ALLOW_THREADS
    s = wf_tokenizer_decode(p->t, ids, n, &out, &len);
    Py_END_ALLOW_THREADS
    free(ids);
    PyObject *r = s == WF_OK ? PyBytes_FromStringAndSize(out, (Py_ssize_t)len) : pw_raise(s);
    free(out);
    return r;
}

/* ---- vocabulary ---- */

static PyObject *tok_token_to_id(pw_tok *p, PyObject *arg) {
    if (tok_check(p) < 0) return NULL;
    const char *s = PyUnicode_AsUTF8(arg);
    if (!s) return NULL;
    int32_t id = wf_tokenizer_token_id(p->t, s);
    if (id < 0) Py_RETURN_NONE;
    return PyLong_FromLong(id);
}

static PyObject *tok_id_to_bytes(pw_tok *p, PyObject *arg) {
    if (tok_check(p) < 0) return NULL;
    long id = PyLong_AsLong(arg);
    if (id == -1 && PyErr_Occurred()) return NULL;
    size_t len = 0;
    const char *b = id >= 0 && id <= INT32_MAX ? wf_tokenizer_id_bytes(p->t, (int32_t)id, &len) : NULL;
    if (!b)
        return PyErr_Format(PyExc_IndexError, "id %ld is outside the vocabulary [0, %zu)", id,
                            wf_tokenizer_vocab_size(p->t));
    return PyBytes_FromStringAndSize(b, (Py_ssize_t)len);
}

static PyObject *tok_added_tokens(pw_tok *p, PyObject *noargs) {
    (void)noargs;
    if (tok_check(p) < 0) return NULL;
    wf_tokenizer_info info;
    wf_tokenizer_get_info(p->t, &info);
    PyObject *l = PyList_New((Py_ssize_t)info.n_added);
    for (size_t i = 0; l && i < info.n_added; i++) {
        const char *content;
        int32_t id;
        int special;
        wf_tokenizer_added(p->t, i, &content, &id, &special);
        PyObject *e = Py_BuildValue("(slO)", content, (long)id, special ? Py_True : Py_False);
        if (!e) Py_CLEAR(l);
        else PyList_SET_ITEM(l, (Py_ssize_t)i, e);
    }
    return l;
}

static PyObject *tok_get(pw_tok *p, void *which) {
    if (tok_check(p) < 0) return NULL;
    switch ((int)(intptr_t)which) {
    case 0: return PyLong_FromSize_t(wf_tokenizer_vocab_size(p->t));
    case 1: return PyLong_FromLong(wf_tokenizer_bos(p->t));
    case 2: return PyLong_FromLong(wf_tokenizer_eos(p->t));
    default: return PyLong_FromLong(wf_tokenizer_pad(p->t));
    }
}

static PyMethodDef tok_methods[] = {
    {"encode", (PyCFunction)(void (*)(void))tok_encode, METH_VARARGS | METH_KEYWORDS,
     "encode(text, parse_special=False) -> list[int]"},
    {"encode_batch", (PyCFunction)(void (*)(void))tok_encode_batch, METH_VARARGS | METH_KEYWORDS,
     "encode_batch(texts, parse_special=False, num_threads=0) -> list[list[int]]"},
    {"decode", (PyCFunction)tok_decode, METH_O, "decode(ids) -> bytes"},
    {"token_to_id", (PyCFunction)tok_token_to_id, METH_O, "token_to_id(token) -> int or None"},
    {"id_to_bytes", (PyCFunction)tok_id_to_bytes, METH_O, "id_to_bytes(id) -> bytes"},
    {"added_tokens", (PyCFunction)tok_added_tokens, METH_NOARGS,
     "added_tokens() -> list of (content, id, special), in file order"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef tok_getset[] = {
    {"vocab_size", (getter)tok_get, NULL, "Every id is below this (vocabulary plus added tokens).", (void *)0},
    {"bos_id", (getter)tok_get, NULL, "Begin-of-text id, or -1.", (void *)1},
    {"eos_id", (getter)tok_get, NULL, "End-of-text id, or -1.", (void *)2},
    {"pad_id", (getter)tok_get, NULL, "Padding id, or -1.", (void *)3},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject tok_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "weft._weft.Tokenizer",
    .tp_basicsize = sizeof(pw_tok),
    .tp_dealloc = (destructor)tok_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Tokenizer(path): a tokenizer.json loaded by weft (wf_tokenizer_load).",
    .tp_methods = tok_methods,
    .tp_getset = tok_getset,
    .tp_init = (initproc)tok_init,
    .tp_new = PyType_GenericNew,
};

int pw_add_tokenizer_type(PyObject *m) {
    if (PyType_Ready(&tok_type) < 0) return -1;
    return PyModule_AddObjectRef(m, "Tokenizer", (PyObject *)&tok_type);
}
