/* weft._weft: the module, weft's errors as Python exceptions, and the
 * read-only View buffer that carries weft's mapped memory to NumPy. */
#include "pyweft.h"

#include <string.h>

#include "weft/weft.h"

/* ------------------------------------------------------------ exceptions */

/* One exception class per weft status (status.h's WF_STATUS_MAP), each a
 * subclass of weft.Error and of the built-in exception a Python user would
 * catch for it. */
typedef struct {
    wf_status status;
    const char *name; /* "weft.FormatError" */
    PyObject **builtin;
    const char *doc;
    PyObject *cls;
} pw_exc;

static PyObject *error_base; /* weft.Error */

static pw_exc exc_table[] = {
    {WF_ERR_INVALID, "weft.InvalidArgumentError", &PyExc_ValueError, "An invalid argument (WF_ERR_INVALID).", NULL},
    {WF_ERR_IO, "weft.InputOutputError", &PyExc_OSError, "A read or write failed (WF_ERR_IO).", NULL},
    {WF_ERR_NOMEM, "weft.OutOfMemoryError", &PyExc_MemoryError, "Out of memory (WF_ERR_NOMEM).", NULL},
    {WF_ERR_FORMAT, "weft.FormatError", &PyExc_ValueError,
     "A malformed or corrupt file: a shard, dataset.json, a checkpoint, tokenizer.json (WF_ERR_FORMAT).", NULL},
    {WF_ERR_CONFIG, "weft.ConfigError", &PyExc_ValueError, "Options that do not fit together (WF_ERR_CONFIG).",
     NULL},
    {WF_ERR_NOTFOUND, "weft.NotFoundError", &PyExc_FileNotFoundError,
     "A missing file, directory, split or tensor (WF_ERR_NOTFOUND).", NULL},
    {WF_ERR_CHECKSUM, "weft.ChecksumError", NULL,
     "Data whose checksum does not match: the file is corrupt (WF_ERR_CHECKSUM; a FormatError).", NULL},
    {WF_ERR_UNSUPPORTED, "weft.UnsupportedError", &PyExc_ValueError,
     "A file or feature this weft does not support (WF_ERR_UNSUPPORTED).", NULL},
    {WF_ERR_EMPTY, "weft.EmptyError", &PyExc_ValueError, "Empty input, e.g. a split with no tokens (WF_ERR_EMPTY).",
     NULL},
    {WF_ERR_RANGE, "weft.RangeError", &PyExc_ValueError,
     "A value out of range, e.g. too few samples for the batch (WF_ERR_RANGE).", NULL},
    {WF_ERR_INTERNAL, "weft.InternalError", &PyExc_RuntimeError, "An internal error of weft (WF_ERR_INTERNAL).",
     NULL},
};
#define N_EXC (sizeof exc_table / sizeof *exc_table)

static PyObject *exc_class(wf_status s) {
    for (size_t i = 0; i < N_EXC; i++)
        if (exc_table[i].status == s) return exc_table[i].cls;
    return error_base;
}

PyObject *pw_error_object(wf_status s) {
    const char *msg = wf_error_msg();
    if (!msg || !*msg) msg = wf_status_str(s);
    PyObject *text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    if (!text) return NULL;
    PyObject *exc = PyObject_CallOneArg(exc_class(s), text);
    Py_DECREF(text);
    if (!exc) return NULL;
    PyObject *code = PyLong_FromLong((long)s);
    PyObject *reason = PyUnicode_FromString(wf_status_str(s));
    int bad = !code || !reason || PyObject_SetAttrString(exc, "status", code) < 0 ||
              PyObject_SetAttrString(exc, "reason", reason) < 0;
    Py_XDECREF(code);
    Py_XDECREF(reason);
    if (bad) {
        Py_DECREF(exc);
        return NULL;
    }
    wf_error_clear();
    return exc;
}

PyObject *pw_raise(wf_status s) {
    PyObject *exc = pw_error_object(s);
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

static int add_exceptions(PyObject *m) {
    error_base = PyErr_NewExceptionWithDoc(
        "weft.Error",
        "An error reported by weft. str(e) is weft's message (what, where, what to do); e.status is the\n"
        "wf_status code (negative) and e.reason its short description.",
        NULL, NULL);
    if (!error_base || PyModule_AddObjectRef(m, "Error", error_base) < 0) return -1;
    for (size_t i = 0; i < N_EXC; i++) {
        pw_exc *e = &exc_table[i];
        /* ChecksumError is a FormatError (the table lists FORMAT first). */
        PyObject *second = e->builtin ? *e->builtin : exc_class(WF_ERR_FORMAT);
        PyObject *bases = e->builtin ? PyTuple_Pack(2, error_base, second) : PyTuple_Pack(1, second);
        if (!bases) return -1;
        e->cls = PyErr_NewExceptionWithDoc(e->name, e->doc, bases, NULL);
        Py_DECREF(bases);
        if (!e->cls || PyModule_AddObjectRef(m, strchr(e->name, '.') + 1, e->cls) < 0) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ View */

typedef struct {
    PyObject_HEAD
    PyObject *owner;
    const void *ptr;
    Py_ssize_t len;
} pw_view;

static void view_dealloc(pw_view *v) {
    Py_XDECREF(v->owner);
    Py_TYPE(v)->tp_free((PyObject *)v);
}

static int view_getbuffer(pw_view *v, Py_buffer *b, int flags) {
    /* readonly = 1: a request for a writable buffer is refused (BufferError). */
    return PyBuffer_FillInfo(b, (PyObject *)v, (void *)(uintptr_t)v->ptr, v->len, 1, flags);
}

static PyBufferProcs view_as_buffer = {(getbufferproc)view_getbuffer, NULL};

static PyObject *view_address(pw_view *v, void *closure) {
    (void)closure;
    return PyLong_FromVoidPtr((void *)(uintptr_t)v->ptr);
}

static PyObject *view_owner(pw_view *v, void *closure) {
    (void)closure;
    return Py_NewRef(v->owner);
}

static PyGetSetDef view_getset[] = {
    {"address", (getter)view_address, NULL, "Address of the first byte (inside weft's mapping).", NULL},
    {"owner", (getter)view_owner, NULL, "The weft object whose memory this is.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static Py_ssize_t view_len(pw_view *v) { return v->len; }
static PySequenceMethods view_as_sequence = {.sq_length = (lenfunc)view_len};

static PyTypeObject view_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "weft._weft.View",
    .tp_basicsize = sizeof(pw_view),
    .tp_dealloc = (destructor)view_dealloc,
    .tp_as_buffer = &view_as_buffer,
    .tp_as_sequence = &view_as_sequence,
    .tp_getset = view_getset,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Read-only bytes of weft's memory (a mapped file), kept valid while this object lives.",
};

PyObject *pw_view_new(PyObject *owner, const void *ptr, Py_ssize_t len) {
    pw_view *v = PyObject_New(pw_view, &view_type);
    if (!v) return NULL;
    v->owner = Py_NewRef(owner);
    v->ptr = ptr;
    v->len = len;
    return (PyObject *)v;
}

int pw_get_out_buffer(PyObject *obj, Py_ssize_t len, Py_buffer *b) {
    if (PyObject_GetBuffer(obj, b, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (b->len != len) {
        PyErr_Format(PyExc_ValueError, "output buffer has %zd bytes, %zd needed", b->len, len);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- module */

static PyObject *pw_default_threads(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    return PyLong_FromLong(wf_default_threads());
}

static PyMethodDef module_methods[] = {
    {"dataset_info", pw_dataset_info, METH_VARARGS,
     "dataset_info(dir) -> dict: DIR/dataset.json as weft reads it (wf_dataset_info_load)."},
    {"default_threads", pw_default_threads, METH_NOARGS,
     "default_threads() -> int: WEFT_THREADS if set, else the number of online CPUs."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "weft._weft",
    .m_doc = "weft's C library for the weft package (use the classes of `weft`, docs/python.md).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__weft(void);
PyMODINIT_FUNC PyInit__weft(void) {
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    if (PyType_Ready(&view_type) < 0 || PyModule_AddObjectRef(m, "View", (PyObject *)&view_type) < 0 ||
        add_exceptions(m) < 0 || PyModule_AddStringConstant(m, "WEFT_VERSION", WF_VERSION) < 0 ||
        pw_add_data_types(m) < 0 || pw_add_loader_type(m) < 0 || pw_add_tokenizer_type(m) < 0 ||
        pw_add_ckpt_type(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
