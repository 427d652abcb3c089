/* weft._weft.Checkpoint: a checkpoint opened for reading (ckpt.h). A
 * tensor that one piece holds is handed out in place (wf_ckpt_view, a View
 * of the data file's mapping); any tensor can be read whole into a
 * caller's float32 buffer from whichever pieces hold it, whatever number
 * of ranks wrote it (wf_ckpt_read_range). The reader records which pieces
 * it has checked, so calls on one checkpoint are serialised by a lock
 * (taken with the GIL released); the data files stay mapped while any View
 * of them lives. */
#include "pyweft.h"

#include <pythread.h>
#include <stdlib.h>
#include <string.h>

#include "weft/ckpt.h"

typedef struct {
    PyObject_HEAD
    wf_ckpt *c;
    PyThread_type_lock lock;
} pw_ckpt;

static void ckpt_dealloc(pw_ckpt *p) {
    wf_ckpt_close(p->c);
    if (p->lock) PyThread_free_lock(p->lock);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static int ckpt_init(pw_ckpt *p, PyObject *args, PyObject *kw) {
    static char *names[] = {"path", NULL};
    PyObject *path;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&:Checkpoint", names, PyUnicode_FSConverter, &path)) return -1;
    if (p->c) {
        Py_DECREF(path);
        PyErr_SetString(PyExc_RuntimeError, "Checkpoint is already open");
        return -1;
    }
    p->lock = PyThread_allocate_lock();
    if (!p->lock) {
        Py_DECREF(path);
        PyErr_NoMemory();
        return -1;
    }
    wf_status s;
    Py_BEGIN_ALLOW_THREADS
    s = wf_ckpt_open_path(&p->c, PyBytes_AS_STRING(path));
    Py_END_ALLOW_THREADS
    Py_DECREF(path);
    if (s != WF_OK) {
        pw_raise(s);
        return -1;
    }
    return 0;
}

static int ckpt_check(pw_ckpt *p) {
    if (p->c) return 0;
    PyErr_SetString(PyExc_RuntimeError, "the Checkpoint is not open");
    return -1;
}

/* Takes the checkpoint's lock; waits with the GIL released. */
static void ckpt_lock(pw_ckpt *p) {
    if (PyThread_acquire_lock(p->lock, NOWAIT_LOCK)) return;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(p->lock, WAIT_LOCK);
    Py_END_ALLOW_THREADS
}

static PyObject *ckpt_tensors(pw_ckpt *p, PyObject *noargs) {
    (void)noargs;
    if (ckpt_check(p) < 0) return NULL;
    size_t n = wf_ckpt_num_tensors(p->c);
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        wf_ckpt_tensor_desc d;
        wf_ckpt_tensor_at(p->c, i, &d);
        PyObject *shape = PyTuple_New(d.ndim);
        for (int k = 0; shape && k < d.ndim; k++) {
            PyObject *x = PyLong_FromLongLong(d.shape[k]);
            if (!x) Py_CLEAR(shape);
            else PyTuple_SET_ITEM(shape, k, x);
        }
        PyObject *e = shape ? Py_BuildValue("(ssNi)", d.name, d.dtype, shape, d.n_pieces) : NULL;
        if (!e) Py_CLEAR(l);
        else PyList_SET_ITEM(l, (Py_ssize_t)i, e);
    }
    return l;
}

static int64_t numel_of(pw_ckpt *p, const char *name, int *found) {
    long i = wf_ckpt_find(p->c, name);
    *found = i >= 0;
    if (i < 0) return 0;
    wf_ckpt_tensor_desc d;
    wf_ckpt_tensor_at(p->c, (size_t)i, &d);
    int64_t n = 1;
    for (int k = 0; k < d.ndim; k++) n *= d.shape[k];
    return n;
}

static PyObject *ckpt_view(pw_ckpt *p, PyObject *arg) {
    if (ckpt_check(p) < 0) return NULL;
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name) return NULL;
    int found;
    int64_t n = numel_of(p, name, &found);
    const float *data = NULL;
    wf_status s;
    ckpt_lock(p);
    Py_BEGIN_ALLOW_THREADS
    s = wf_ckpt_view(p->c, name, &data);
    Py_END_ALLOW_THREADS
    PyThread_release_lock(p->lock);
    if (s != WF_OK) return pw_raise(s);
    if (!data) Py_RETURN_NONE;
    return pw_view_new((PyObject *)p, data, (Py_ssize_t)n * 4);
}

static PyObject *ckpt_read_into(pw_ckpt *p, PyObject *args) {
    const char *name;
    PyObject *out;
    if (ckpt_check(p) < 0 || !PyArg_ParseTuple(args, "sO:read_into", &name, &out)) return NULL;
    int found;
    int64_t n = numel_of(p, name, &found);
    Py_buffer b;
    if (found && pw_get_out_buffer(out, (Py_ssize_t)n * 4, &b) < 0) return NULL;
    wf_status s;
    ckpt_lock(p);
    Py_BEGIN_ALLOW_THREADS
    s = wf_ckpt_read_range(p->c, name, 0, n, found ? b.buf : NULL);
    Py_END_ALLOW_THREADS
    PyThread_release_lock(p->lock);
    if (found) PyBuffer_Release(&b);
    if (s != WF_OK) return pw_raise(s);
    Py_RETURN_NONE;
}

/* wf_ckpt_verify's report callback: collects the messages. Runs without
 * the GIL, so it keeps C strings; they become Python strings after. */
typedef struct {
    char **msgs;
    size_t n, cap;
} problems;

static void collect(void *ctx, const char *problem) {
    problems *pr = ctx;
    if (pr->n == pr->cap) {
        size_t cap = pr->cap ? 2 * pr->cap : 8;
        char **m = realloc(pr->msgs, cap * sizeof *m);
        if (!m) return;
        pr->msgs = m;
        pr->cap = cap;
    }
    char *copy = strdup(problem);
    if (copy) pr->msgs[pr->n++] = copy;
}

static PyObject *ckpt_verify(pw_ckpt *p, PyObject *noargs) {
    (void)noargs;
    if (ckpt_check(p) < 0) return NULL;
    problems pr = {0};
    wf_status s;
    ckpt_lock(p);
    Py_BEGIN_ALLOW_THREADS
    s = wf_ckpt_verify(p->c, collect, &pr);
    Py_END_ALLOW_THREADS
    PyThread_release_lock(p->lock);
    PyObject *list = PyList_New(0);
    for (size_t i = 0; i < pr.n; i++) {
        PyObject *m = list ? PyUnicode_DecodeUTF8(pr.msgs[i], (Py_ssize_t)strlen(pr.msgs[i]), "replace") : NULL;
        if (!m || PyList_Append(list, m) < 0) Py_CLEAR(list);
        Py_XDECREF(m);
        free(pr.msgs[i]);
    }
    free(pr.msgs);
    if (!list) return NULL;
    if (s == WF_OK) return list;
    /* The error carries every problem, not only the first. */
    PyObject *exc = pw_error_object(s);
    if (exc && PyObject_SetAttrString(exc, "problems", list) == 0) PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_XDECREF(exc);
    Py_DECREF(list);
    return NULL;
}

static PyObject *ckpt_get(pw_ckpt *p, void *which) {
    if (ckpt_check(p) < 0) return NULL;
    switch ((int)(intptr_t)which) {
    case 0: return PyLong_FromUnsignedLongLong(wf_ckpt_step(p->c));
    case 1: return PyLong_FromLong(wf_ckpt_world_size(p->c));
    case 2: return PyLong_FromUnsignedLongLong(wf_ckpt_data_bytes(p->c));
    case 3: return PyUnicode_DecodeFSDefault(wf_ckpt_path(p->c));
    default: {
        const char *t = wf_ckpt_manifest_text(p->c);
        return PyUnicode_DecodeUTF8(t, (Py_ssize_t)strlen(t), "strict");
    }
    }
}

static PyMethodDef ckpt_methods[] = {
    {"tensors", (PyCFunction)ckpt_tensors, METH_NOARGS,
     "tensors() -> list of (name, dtype, shape, n_pieces), in manifest order."},
    {"view", (PyCFunction)ckpt_view, METH_O,
     "view(name) -> View or None: the tensor's bytes in place when one piece holds it (checksum checked)."},
    {"read_into", (PyCFunction)ckpt_read_into, METH_VARARGS,
     "read_into(name, out): reads the whole tensor into the writable float32 buffer `out`."},
    {"verify", (PyCFunction)ckpt_verify, METH_NOARGS,
     "verify() -> []: checks every piece's checksum; raises ChecksumError (with .problems) if any is bad."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ckpt_getset[] = {
    {"step", (getter)ckpt_get, NULL, "Optimizer steps when it was saved.", (void *)0},
    {"world_size", (getter)ckpt_get, NULL, "Ranks that wrote it (data files).", (void *)1},
    {"data_bytes", (getter)ckpt_get, NULL, "Bytes of its data files.", (void *)2},
    {"path", (getter)ckpt_get, NULL, "The checkpoint directory.", (void *)3},
    {"manifest", (getter)ckpt_get, NULL, "manifest.json as stored.", (void *)4},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ckpt_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "weft._weft.Checkpoint",
    .tp_basicsize = sizeof(pw_ckpt),
    .tp_dealloc = (destructor)ckpt_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Checkpoint(path): a checkpoint directory, or the newest valid one of a run or checkpoints "
              "directory (wf_ckpt_open_path).",
    .tp_methods = ckpt_methods,
    .tp_getset = ckpt_getset,
    .tp_init = (initproc)ckpt_init,
    .tp_new = PyType_GenericNew,
};

int pw_add_ckpt_type(PyObject *m) {
    if (PyType_Ready(&ckpt_type) < 0) return -1;
    return PyModule_AddObjectRef(m, "Checkpoint", (PyObject *)&ckpt_type);
}
