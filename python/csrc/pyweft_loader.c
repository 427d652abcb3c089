/* weft._weft.Loader: weft's data loader (include/weft/loader.h) for one
 * rank. next_into copies the next batch into the caller's int32 buffer
 * (a fresh NumPy array each time: the loader's own buffer is reused at the
 * next call, so it is never handed out) with the GIL released while it
 * waits for the prefetch thread. The cursor {epoch, sample} goes in and out
 * as two integers. A loader is used from one thread at a time (loader.h):
 * a second thread calling in while a call runs gets a RuntimeError instead
 * of a data race. */
#include "pyweft.h"

#include <string.h>

#include "weft/loader.h"

typedef struct {
    PyObject_HEAD
    wf_loader *l;
    int busy; /* a call is running with the GIL released */
    int batch, seq_len;
} pw_loader;

static int loader_enter(pw_loader *p) {
    if (!p->l) {
        PyErr_SetString(PyExc_RuntimeError, "the Loader is closed");
        return -1;
    }
    if (p->busy) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the Loader is in use by another thread: a loader serves one thread (make one per thread)");
        return -1;
    }
    p->busy = 1;
    return 0;
}

static void loader_dealloc(pw_loader *p) {
    wf_loader_destroy(p->l); /* stops and joins the prefetch thread */
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static int loader_init(pw_loader *p, PyObject *args, PyObject *kw) {
    static char *names[] = {"dir", "split", "seed", "seq_len", "global_batch", "rank", "world_size", "shuffle",
                            "prefetch", "verify", NULL};
    PyObject *dir_obj;
    const char *split;
    unsigned long long seed;
    int seq_len, global_batch, rank, world_size, shuffle, prefetch, verify;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&sKiiiippp:Loader", names, PyUnicode_FSConverter, &dir_obj, &split,
                                     &seed, &seq_len, &global_batch, &rank, &world_size, &shuffle, &prefetch,
                                     &verify))
        return -1;
    if (p->l) {
        Py_DECREF(dir_obj);
        PyErr_SetString(PyExc_RuntimeError, "Loader is already open");
        return -1;
    }
    wf_loader_opts o = {
        .dir = PyBytes_AS_STRING(dir_obj),
        .split = split,
        .seed = seed,
        .seq_len = seq_len,
        .global_batch = global_batch,
        .rank = rank,
        .world_size = world_size,
        .shuffle = shuffle,
        .prefetch = prefetch,
        .verify = verify,
    };
    wf_status s;
    wf_loader *l = NULL;
    Py_BEGIN_ALLOW_THREADS
    s = wf_loader_create(&l, &o);
    Py_END_ALLOW_THREADS
    Py_DECREF(dir_obj);
    if (s != WF_OK) {
        pw_raise(s);
        return -1;
    }
    p->l = l;
    p->batch = global_batch / world_size;
    p->seq_len = seq_len;
    return 0;
}

static PyObject *loader_next_into(pw_loader *p, PyObject *out) {
    if (loader_enter(p) < 0) return NULL;
    Py_buffer b;
    if (pw_get_out_buffer(out, (Py_ssize_t)p->batch * (p->seq_len + 1) * 4, &b) < 0) {
        p->busy = 0;
        return NULL;
    }
    wf_status s;
    const wf_batch *batch = NULL;
    Py_BEGIN_ALLOW_THREADS
    s = wf_loader_next(p->l, &batch);
    if (s == WF_OK) memcpy(b.buf, batch->tokens, (size_t)b.len);
    Py_END_ALLOW_THREADS
    p->busy = 0;
    PyBuffer_Release(&b);
    if (s != WF_OK) return pw_raise(s);
    return Py_BuildValue("(KKd)", (unsigned long long)batch->state.epoch, (unsigned long long)batch->state.sample,
                         batch->wait_seconds);
}

static PyObject *loader_get_state(pw_loader *p, PyObject *noargs) {
    (void)noargs;
    if (loader_enter(p) < 0) return NULL;
    wf_loader_state st = wf_loader_get_state(p->l);
    p->busy = 0;
    return Py_BuildValue("(KK)", (unsigned long long)st.epoch, (unsigned long long)st.sample);
}

static PyObject *loader_set_state(pw_loader *p, PyObject *args) {
    unsigned long long epoch, sample;
    if (!PyArg_ParseTuple(args, "KK:set_state", &epoch, &sample) || loader_enter(p) < 0) return NULL;
    wf_loader_state st = {epoch, sample};
    wf_status s;
    Py_BEGIN_ALLOW_THREADS
    s = wf_loader_set_state(p->l, st);
    Py_END_ALLOW_THREADS
    p->busy = 0;
    if (s != WF_OK) return pw_raise(s);
    Py_RETURN_NONE;
}

static PyObject *loader_close(pw_loader *p, PyObject *noargs) {
    (void)noargs;
    if (!p->l) Py_RETURN_NONE;
    if (loader_enter(p) < 0) return NULL;
    wf_loader *l = p->l;
    p->l = NULL;
    Py_BEGIN_ALLOW_THREADS
    wf_loader_destroy(l);
    Py_END_ALLOW_THREADS
    p->busy = 0;
    Py_RETURN_NONE;
}

static PyObject *loader_get(pw_loader *p, void *which) {
    if (!p->l) {
        PyErr_SetString(PyExc_RuntimeError, "the Loader is closed");
        return NULL;
    }
    switch ((int)(intptr_t)which) {
    case 0: return PyLong_FromUnsignedLongLong(wf_loader_samples_per_epoch(p->l));
    case 1: return PyLong_FromUnsignedLongLong(wf_loader_batches_per_epoch(p->l));
    case 2: return PyLong_FromLong(p->batch);
    default: return PyLong_FromLong(wf_loader_ready(p->l));
    }
}

static PyObject *loader_closed(pw_loader *p, void *closure) {
    (void)closure;
    return PyBool_FromLong(p->l == NULL);
}

static PyMethodDef loader_methods[] = {
    {"next_into", (PyCFunction)loader_next_into, METH_O,
     "next_into(out) -> (epoch, sample, wait_seconds): copies this rank's next batch, (B, T+1) int32, into the "
     "writable buffer `out`; returns the cursor it was read from and how long the call waited for it."},
    {"get_state", (PyCFunction)loader_get_state, METH_NOARGS,
     "get_state() -> (epoch, sample): the cursor of the next batch (the same on every rank, for any world size)."},
    {"set_state", (PyCFunction)loader_set_state, METH_VARARGS,
     "set_state(epoch, sample): moves the cursor; batches read ahead are dropped."},
    {"close", (PyCFunction)loader_close, METH_NOARGS, "close(): stops the prefetch thread and unmaps the shards."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef loader_getset[] = {
    {"samples_per_epoch", (getter)loader_get, NULL, "Samples of T+1 tokens in an epoch.", (void *)0},
    {"batches_per_epoch", (getter)loader_get, NULL, "Global batches in an epoch.", (void *)1},
    {"batch", (getter)loader_get, NULL, "B: this rank's samples per batch (global_batch / world_size).", (void *)2},
    {"ready", (getter)loader_get, NULL, "Batches the prefetch thread has ready now.", (void *)3},
    {"closed", (getter)loader_closed, NULL, "Whether close() was called.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject loader_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "weft._weft.Loader",
    .tp_basicsize = sizeof(pw_loader),
    .tp_dealloc = (destructor)loader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Loader(dir, split, seed, seq_len, global_batch, rank, world_size, shuffle, prefetch, verify): "
              "weft's data loader (wf_loader_create).",
    .tp_methods = loader_methods,
    .tp_getset = loader_getset,
    .tp_init = (initproc)loader_init,
    .tp_new = PyType_GenericNew,
};

int pw_add_loader_type(PyObject *m) {
    if (PyType_Ready(&loader_type) < 0) return -1;
    return PyModule_AddObjectRef(m, "Loader", (PyObject *)&loader_type);
}
