/* weft._weft: token datasets. dataset_info() reads dataset.json; Split is
 * one opened split (wf_dataset: its shards mapped read-only), whose shards'
 * tokens and document indexes it hands out as View buffers of the mapping
 * itself, and whose virtual token stream it reads (with the vocabulary
 * check) into a caller's int32 buffer. */
#include "pyweft.h"

#include "weft/shard.h"

/* ---------------------------------------------------------- dataset_info */

static PyObject *shard_info_dict(const wf_shard_info *si) {
    return Py_BuildValue("{s:s,s:K,s:K,s:K}", "file", si->file, "n_tokens", (unsigned long long)si->n_tokens,
                         "n_docs", (unsigned long long)si->n_docs, "bytes", (unsigned long long)si->bytes);
}

static PyObject *info_dict(const wf_dataset_info *info) {
    PyObject *splits = PyList_New((Py_ssize_t)info->n_splits);
    if (!splits) return NULL;
    for (size_t i = 0; i < info->n_splits; i++) {
        const wf_split_info *sp = &info->splits[i];
        PyObject *shards = PyList_New((Py_ssize_t)sp->n_shards);
        if (!shards) goto fail;
        for (size_t k = 0; k < sp->n_shards; k++) {
            PyObject *d = shard_info_dict(&sp->shards[k]);
            if (!d) {
                Py_DECREF(shards);
                goto fail;
            }
            PyList_SET_ITEM(shards, (Py_ssize_t)k, d);
        }
        PyObject *s = Py_BuildValue("{s:s,s:K,s:K,s:N}", "name", sp->name, "n_tokens",
                                    (unsigned long long)sp->n_tokens, "n_docs", (unsigned long long)sp->n_docs,
                                    "shards", shards);
        if (!s) goto fail;
        PyList_SET_ITEM(splits, (Py_ssize_t)i, s);
    }
    return Py_BuildValue("{s:k,s:i,s:z,s:N}", "vocab_size", (unsigned long)info->vocab_size, "token_bytes",
                         info->token_bytes, "tokenizer", info->tokenizer, "splits", splits);
fail:
    Py_DECREF(splits);
    return NULL;
}

PyObject *pw_dataset_info(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *dir_obj;
    if (!PyArg_ParseTuple(args, "O&:dataset_info", PyUnicode_FSConverter, &dir_obj)) return NULL;
    wf_dataset_info info;
    wf_status s;
    Py_BEGIN_ALLOW_THREADS
    s = wf_dataset_info_load(&info, PyBytes_AS_STRING(dir_obj));
    Py_END_ALLOW_THREADS
    Py_DECREF(dir_obj);
    if (s != WF_OK) return pw_raise(s);
    PyObject *d = info_dict(&info);
    wf_dataset_info_free(&info);
    return d;
}

/* ----------------------------------------------------------------- Split */

typedef struct {
    PyObject_HEAD
    wf_dataset ds;
    int open;
} pw_split;

static void split_dealloc(pw_split *sp) {
    /* Views hold a reference to the split, so no array of its memory is
     * left when this runs: the mappings can go. */
    if (sp->open) wf_dataset_close(&sp->ds);
    Py_TYPE(sp)->tp_free((PyObject *)sp);
}

static int split_init(pw_split *sp, PyObject *args, PyObject *kw) {
    static char *names[] = {"dir", "split", "verify", NULL};
    PyObject *dir_obj;
    const char *split;
    int verify = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&s|p:Split", names, PyUnicode_FSConverter, &dir_obj, &split,
                                     &verify))
        return -1;
    if (sp->open) {
        Py_DECREF(dir_obj);
        PyErr_SetString(PyExc_RuntimeError, "Split is already open");
        return -1;
    }
    wf_status s;
    Py_BEGIN_ALLOW_THREADS
    s = wf_dataset_open(&sp->ds, PyBytes_AS_STRING(dir_obj), split, verify);
    Py_END_ALLOW_THREADS
    Py_DECREF(dir_obj);
    if (s != WF_OK) {
        pw_raise(s);
        return -1;
    }
    sp->open = 1;
    return 0;
}

static int split_check(pw_split *sp) {
    if (sp->open) return 0;
    PyErr_SetString(PyExc_RuntimeError, "Split is not open");
    return -1;
}

static PyObject *split_shard(pw_split *sp, PyObject *arg) {
    if (split_check(sp) < 0) return NULL;
    Py_ssize_t k = PyLong_AsSsize_t(arg);
    if (k == -1 && PyErr_Occurred()) return NULL;
    if (k < 0 || (size_t)k >= sp->ds.n_shards)
        return PyErr_Format(PyExc_IndexError, "shard %zd of %zu", k, sp->ds.n_shards);
    wf_shard *s = &sp->ds.shards[k];
    wf_status ls = wf_shard_load(s); /* a shard in an object store: its bytes into memory */
    if (ls != WF_OK) return pw_raise(ls);
    PyObject *tokens = pw_view_new((PyObject *)sp, s->tokens, (Py_ssize_t)(s->n_tokens * (uint64_t)s->token_bytes));
    PyObject *index = pw_view_new((PyObject *)sp, s->doc_starts, (Py_ssize_t)(s->n_docs * 8));
    PyObject *file = pw_view_new((PyObject *)sp, s->map.data, (Py_ssize_t)s->map.size);
    if (!tokens || !index || !file) {
        Py_XDECREF(tokens);
        Py_XDECREF(index);
        Py_XDECREF(file);
        return NULL;
    }
    return Py_BuildValue("{s:O&,s:i,s:k,s:K,s:K,s:K,s:N,s:N,s:N}", "path", PyUnicode_DecodeFSDefault, s->path,
                         "token_bytes", s->token_bytes, "vocab_size", (unsigned long)s->vocab_size, "n_tokens",
                         (unsigned long long)s->n_tokens, "n_docs", (unsigned long long)s->n_docs, "base",
                         (unsigned long long)sp->ds.shard_base[k], "tokens", tokens, "index", index, "file", file);
}

static PyObject *split_read(pw_split *sp, PyObject *args) {
    unsigned long long start;
    PyObject *out;
    if (split_check(sp) < 0 || !PyArg_ParseTuple(args, "KO:read", &start, &out)) return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(out, &b, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (b.len % 4) {
        PyBuffer_Release(&b);
        return PyErr_Format(PyExc_ValueError, "output buffer of %zd bytes is not int32 tokens", b.len);
    }
    wf_status s;
    Py_BEGIN_ALLOW_THREADS
    s = wf_dataset_read(&sp->ds, start, (size_t)b.len / 4, b.buf);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    if (s != WF_OK) return pw_raise(s);
    Py_RETURN_NONE;
}

static PyObject *split_get_u64(pw_split *sp, void *which) {
    if (split_check(sp) < 0) return NULL;
    switch ((int)(intptr_t)which) {
    case 0: return PyLong_FromSize_t(sp->ds.n_shards);
    case 1: return PyLong_FromUnsignedLongLong(sp->ds.n_tokens);
    case 2: return PyLong_FromUnsignedLongLong(sp->ds.n_docs);
    default: return PyLong_FromUnsignedLong(sp->ds.vocab_size);
    }
}

static PyMethodDef split_methods[] = {
    {"shard", (PyCFunction)split_shard, METH_O,
     "shard(k) -> dict: path, token_bytes, vocab_size, n_tokens, n_docs, base (its first token's position in the "
     "split), and Views of its tokens, document index and whole file."},
    {"read", (PyCFunction)split_read, METH_VARARGS,
     "read(start, out): fills the writable int32 buffer `out` with tokens [start, start + len) of the split's "
     "token stream (across shards), checking each against the vocabulary."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef split_getset[] = {
    {"n_shards", (getter)split_get_u64, NULL, "Shards of the split.", (void *)0},
    {"n_tokens", (getter)split_get_u64, NULL, "Tokens of the split.", (void *)1},
    {"n_docs", (getter)split_get_u64, NULL, "Documents of the split.", (void *)2},
    {"vocab_size", (getter)split_get_u64, NULL, "Every token is below this.", (void *)3},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject split_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "weft._weft.Split",
    .tp_basicsize = sizeof(pw_split),
    .tp_dealloc = (destructor)split_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Split(dir, split, verify=False): one split of a dataset, its shards mapped (wf_dataset_open).",
    .tp_methods = split_methods,
    .tp_getset = split_getset,
    .tp_init = (initproc)split_init,
    .tp_new = PyType_GenericNew,
};

int pw_add_data_types(PyObject *m) {
    if (PyType_Ready(&split_type) < 0) return -1;
    return PyModule_AddObjectRef(m, "Split", (PyObject *)&split_type);
}
