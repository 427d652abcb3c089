/* weft._weft.Loader: weft's data loader (include/weft/loader.h) for one
 * rank, of one dataset or of a mixture (weft/mixture.h). next_into copies
 * the next batch into the caller's int32 buffer (a fresh NumPy array each
 * time: the loader's own buffer is reused at the next call, so it is never
 * handed out) with the GIL released while it waits for the prefetch
 * thread. The cursor {epoch, sample} goes in and out as two integers.
 *
 * A mixture is made from its spec in weft train's syntax (sources as
 * data.sources, changes as data.weight_schedule: wf_mix_spec_parse), its
 * sources' tokenizer checked as weft train checks it
 * (wf_mix_spec_check_tokenizer). The loader keeps the spec's schedule,
 * plus the changes set_weights adds, and before every batch does what the
 * trainer does before every step: the weights of the batch's step (step n
 * is global batch n - 1, slots [(n-1) G, n G)) are compared with the
 * cursor's, and a difference starts a new segment there
 * (wf_mix_set_weights + wf_loader_set_mix). next_mix_into also copies each
 * row's source, its position in its source's order and the global batch's
 * count per source; the cursor (wf_mix_state) goes in and out as a tuple
 * (slot, segment_slot, taken, segment_taken, weights).
 *
 * A loader is used from one thread at a time (loader.h): a second thread
 * calling in while a call runs gets a RuntimeError instead of a data race. */
#include "pyweft.h"

#include <stdlib.h>
#include <string.h>

#include "weft/loader.h"
#include "weft/mixture.h"

typedef struct {
    PyObject_HEAD
    wf_loader *l;
    int busy; /* a call is running with the GIL released */
    int batch, seq_len, global_batch;
    /* A mixture (n_src > 0): its spec, and the schedule's changes (the
     * spec's, then set_weights'), by increasing 1-based step. */
    int n_src;
    wf_mix_spec spec;
    int n_changes, cap_changes;
    int64_t *change_step;
    wf_mix_weights *change_w;
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
    wf_mix_spec_free(&p->spec);
    free(p->change_step);
    free(p->change_w);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static int loader_mix_enter(pw_loader *p) {
    if (loader_enter(p) < 0) return -1;
    if (!p->n_src) {
        p->busy = 0;
        PyErr_SetString(PyExc_TypeError, "this Loader reads one dataset, not a mixture");
        return -1;
    }
    return 0;
}

/* The weights of the 1-based step `step`: the last change at or before
 * it, else the sources'. */
static const wf_mix_weights *weights_at(const pw_loader *p, int64_t step) {
    const wf_mix_weights *w = &p->spec.weights;
    for (int i = 0; i < p->n_changes && p->change_step[i] <= step; i++) w = &p->change_w[i];
    return w;
}

/* Adds (or replaces) the change at `step`; -1 with MemoryError. */
static int add_change(pw_loader *p, int64_t step, const wf_mix_weights *w) {
    int at = 0;
    while (at < p->n_changes && p->change_step[at] < step) at++;
    if (at < p->n_changes && p->change_step[at] == step) {
        p->change_w[at] = *w;
        return 0;
    }
    if (p->n_changes == p->cap_changes) {
        int cap = p->cap_changes ? 2 * p->cap_changes : 8;
        int64_t *cs = realloc(p->change_step, (size_t)cap * sizeof *cs);
        if (cs) p->change_step = cs;
        wf_mix_weights *cw = cs ? realloc(p->change_w, (size_t)cap * sizeof *cw) : NULL;
        if (!cw) {
            PyErr_NoMemory();
            return -1;
        }
        p->change_w = cw;
        p->cap_changes = cap;
    }
    memmove(p->change_step + at + 1, p->change_step + at, (size_t)(p->n_changes - at) * sizeof *p->change_step);
    memmove(p->change_w + at + 1, p->change_w + at, (size_t)(p->n_changes - at) * sizeof *p->change_w);
    p->change_step[at] = step;
    p->change_w[at] = *w;
    p->n_changes++;
    return 0;
}

/* Before a batch, what the trainer does before a step: the weights of the
 * next batch's step, when they differ from the cursor's, start a new
 * segment at the cursor. Called with the GIL released. */
static wf_status apply_schedule(pw_loader *p) {
    wf_mix_state st;
    wf_status s = wf_loader_get_mix(p->l, &st);
    if (s != WF_OK) return s;
    const wf_mix_weights *w = weights_at(p, (int64_t)(st.slot / (uint64_t)p->global_batch) + 1);
    if (wf_mix_weights_equal(w, &st.weights)) return WF_OK;
    wf_mix_set_weights(&st, w);
    return wf_loader_set_mix(p->l, &st);
}

/* Bytes objects (os.fsencode'd) or str of a sequence, as C strings in
 * `out` (n of them); `keep` holds the references. -1 with an exception. */
static int c_strings(PyObject *seq, const char *what, const char **out, Py_ssize_t max, Py_ssize_t *n,
                     PyObject **keep) {
    *keep = PySequence_Fast(seq, "");
    if (!*keep) {
        PyErr_Format(PyExc_TypeError, "%s must be a sequence of str", what);
        return -1;
    }
    *n = PySequence_Fast_GET_SIZE(*keep);
    if (*n > max) {
        PyErr_Format(PyExc_ValueError, "%s has %zd items; at most %zd", what, *n, max);
        return -1;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(*keep, i);
        out[i] = PyBytes_Check(it) ? PyBytes_AS_STRING(it) : PyUnicode_Check(it) ? PyUnicode_AsUTF8(it) : NULL;
        if (!out[i]) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "%s item %zd is not a str", what, i + 1);
            return -1;
        }
    }
    return 0;
}

/* The mixture: the spec parsed, the sources' tokenizer checked, the
 * schedule's changes copied. -1 with an exception. */
static int open_mixture(pw_loader *p, PyObject *sources, PyObject *schedule) {
    const char *src[WF_MIX_MAX_SOURCES + 1], *chg[4096];
    Py_ssize_t n_src = 0, n_chg = 0;
    PyObject *keep_src = NULL, *keep_chg = NULL;
    int rc = -1;
    if (c_strings(sources, "sources", src, WF_MIX_MAX_SOURCES + 1, &n_src, &keep_src) < 0) goto out;
    if (schedule != Py_None &&
        c_strings(schedule, "weight_schedule", chg, (Py_ssize_t)(sizeof chg / sizeof *chg), &n_chg, &keep_chg) < 0)
        goto out;
    wf_status s;
    Py_BEGIN_ALLOW_THREADS
    s = wf_mix_spec_parse(&p->spec, src, (size_t)n_src, chg, (size_t)n_chg, "sources", "weight_schedule");
    if (s == WF_OK) s = wf_mix_spec_check_tokenizer(&p->spec, NULL, "sources", NULL, NULL, NULL);
    Py_END_ALLOW_THREADS
    if (s != WF_OK) {
        pw_raise(s);
        goto out;
    }
    for (int i = 0; i < p->spec.n_changes; i++)
        if (add_change(p, p->spec.change_step[i], &p->spec.change_w[i]) < 0) goto out;
    p->n_src = p->spec.n;
    rc = 0;
out:
    Py_XDECREF(keep_src);
    Py_XDECREF(keep_chg);
    return rc;
}

static int loader_init(pw_loader *p, PyObject *args, PyObject *kw) {
    static char *names[] = {"dir",     "split",  "seed",    "seq_len", "global_batch",    "rank", "world_size",
                            "shuffle", "prefetch", "verify", "sources", "weight_schedule", NULL};
    PyObject *dir_arg, *sources = Py_None, *schedule = Py_None, *dir_obj = NULL;
    const char *split;
    unsigned long long seed;
    int seq_len, global_batch, rank, world_size, shuffle, prefetch, verify;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OsKiiiippp|OO:Loader", names, &dir_arg, &split, &seed, &seq_len,
                                     &global_batch, &rank, &world_size, &shuffle, &prefetch, &verify, &sources,
                                     &schedule))
        return -1;
    if (p->l) {
        PyErr_SetString(PyExc_RuntimeError, "Loader is already open");
        return -1;
    }
    wf_mix_spec_free(&p->spec); /* of an __init__ that failed before */
    p->n_src = p->n_changes = 0;
    if ((dir_arg == Py_None) == (sources == Py_None)) {
        PyErr_SetString(PyExc_TypeError, "give a dataset directory or a mixture's sources, not both or neither");
        return -1;
    }
    if (dir_arg != Py_None && !PyUnicode_FSConverter(dir_arg, &dir_obj)) return -1;
    if (sources != Py_None && open_mixture(p, sources, schedule) < 0) return -1;
    wf_loader_opts o = {
        .dir = dir_obj ? PyBytes_AS_STRING(dir_obj) : NULL,
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
    if (p->n_src) {
        o.source_dirs = (const char *const *)p->spec.dirs;
        o.n_sources = p->n_src;
        o.weights = &p->spec.weights;
    }
    wf_status s;
    wf_loader *l = NULL;
    Py_BEGIN_ALLOW_THREADS
    s = wf_loader_create(&l, &o);
    Py_END_ALLOW_THREADS
    Py_XDECREF(dir_obj);
    if (s != WF_OK) {
        pw_raise(s);
        return -1;
    }
    p->l = l;
    p->batch = global_batch / world_size;
    p->seq_len = seq_len;
    p->global_batch = global_batch;
    return 0;
}

static PyObject *loader_next_into(pw_loader *p, PyObject *out) {
    if (loader_enter(p) < 0) return NULL;
    if (p->n_src) {
        p->busy = 0;
        PyErr_SetString(PyExc_TypeError, "this Loader reads a mixture: use next_mix_into");
        return NULL;
    }
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


static PyObject *u64_tuple(const uint64_t *v, int n) {
    PyObject *t = PyTuple_New(n);
    for (int k = 0; t && k < n; k++) {
        PyObject *x = PyLong_FromUnsignedLongLong((unsigned long long)v[k]);
        if (!x) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, k, x);
    }
    return t;
}

static PyObject *weights_tuple(const wf_mix_weights *w) {
    uint64_t v[WF_MIX_MAX_SOURCES];
    for (int k = 0; k < w->n; k++) v[k] = w->w[k];
    return u64_tuple(v, w->n);
}

/* (slot, segment_slot, taken, segment_taken, weights) */
static PyObject *mix_state_tuple(const wf_mix_state *st, int n) {
    return Py_BuildValue("(KKNNN)", (unsigned long long)st->slot, (unsigned long long)st->seg_slot,
                         u64_tuple(st->taken, n), u64_tuple(st->seg_taken, n), weights_tuple(&st->weights));
}

/* n non-negative integers of a sequence; -1 with an exception. */
static int u64_list(PyObject *seq, const char *what, uint64_t *out, int n) {
    PyObject *f = PySequence_Fast(seq, "");
    if (!f) {
        PyErr_Format(PyExc_TypeError, "%s must be a sequence of integers", what);
        return -1;
    }
    int rc = 0;
    if (PySequence_Fast_GET_SIZE(f) != n) {
        PyErr_Format(PyExc_ValueError, "%s has %zd values; the mixture has %d sources", what,
                     PySequence_Fast_GET_SIZE(f), n);
        rc = -1;
    }
    for (int k = 0; rc == 0 && k < n; k++) {
        out[k] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(f, k));
        if (PyErr_Occurred()) rc = -1;
    }
    Py_DECREF(f);
    return rc;
}

static PyObject *loader_next_mix_into(pw_loader *p, PyObject *args) {
    PyObject *out, *src_out, *pos_out, *cnt_out;
    if (!PyArg_ParseTuple(args, "OOOO:next_mix_into", &out, &src_out, &pos_out, &cnt_out) ||
        loader_mix_enter(p) < 0)
        return NULL;
    Py_buffer b, bs, bp, bc;
    int got = 0;
    if (pw_get_out_buffer(out, (Py_ssize_t)p->batch * (p->seq_len + 1) * 4, &b) == 0 && ++got &&
        pw_get_out_buffer(src_out, (Py_ssize_t)p->batch * 4, &bs) == 0 && ++got &&
        pw_get_out_buffer(pos_out, (Py_ssize_t)p->batch * 8, &bp) == 0 && ++got &&
        pw_get_out_buffer(cnt_out, (Py_ssize_t)p->n_src * 4, &bc) == 0)
        ++got;
    if (got < 4) {
        if (got > 0) PyBuffer_Release(&b);
        if (got > 1) PyBuffer_Release(&bs);
        if (got > 2) PyBuffer_Release(&bp);
        p->busy = 0;
        return NULL;
    }
    wf_status s;
    const wf_batch *batch = NULL;
    Py_BEGIN_ALLOW_THREADS
    s = apply_schedule(p);
    if (s == WF_OK) s = wf_loader_next(p->l, &batch);
    if (s == WF_OK) {
        memcpy(b.buf, batch->tokens, (size_t)b.len);
        int32_t *src = bs.buf;
        for (int i = 0; i < p->batch; i++) src[i] = (int32_t)batch->source[i];
        memcpy(bp.buf, batch->source_pos, (size_t)bp.len);
        memcpy(bc.buf, batch->counts, (size_t)bc.len);
    }
    Py_END_ALLOW_THREADS
    p->busy = 0;
    PyBuffer_Release(&b);
    PyBuffer_Release(&bs);
    PyBuffer_Release(&bp);
    PyBuffer_Release(&bc);
    if (s != WF_OK) return pw_raise(s);
    return Py_BuildValue("(Nd)", mix_state_tuple(batch->mix, p->n_src), batch->wait_seconds);
}

static PyObject *loader_get_mix(pw_loader *p, PyObject *noargs) {
    (void)noargs;
    if (loader_mix_enter(p) < 0) return NULL;
    wf_mix_state st;
    wf_status s = wf_loader_get_mix(p->l, &st);
    p->busy = 0;
    if (s != WF_OK) return pw_raise(s);
    return mix_state_tuple(&st, p->n_src);
}

static PyObject *loader_set_mix(pw_loader *p, PyObject *args) {
    unsigned long long slot, seg_slot;
    PyObject *taken, *seg_taken, *weights;
    if (!PyArg_ParseTuple(args, "KKOOO:set_mix", &slot, &seg_slot, &taken, &seg_taken, &weights) ||
        loader_mix_enter(p) < 0)
        return NULL;
    wf_mix_state st;
    memset(&st, 0, sizeof st);
    uint64_t w[WF_MIX_MAX_SOURCES];
    st.slot = slot;
    st.seg_slot = seg_slot;
    if (u64_list(taken, "taken", st.taken, p->n_src) < 0 || u64_list(seg_taken, "segment_taken", st.seg_taken,
                                                                      p->n_src) < 0 ||
        u64_list(weights, "weights", w, p->n_src) < 0) {
        p->busy = 0;
        return NULL;
    }
    wf_status s = wf_mix_weights_from_ints(&st.weights, w, p->n_src, "loader state: weights");
    Py_BEGIN_ALLOW_THREADS
    if (s == WF_OK) s = wf_mix_state_check(&st, "loader state");
    if (s == WF_OK) s = wf_loader_set_mix(p->l, &st);
    Py_END_ALLOW_THREADS
    p->busy = 0;
    if (s != WF_OK) return pw_raise(s);
    Py_RETURN_NONE;
}

static PyObject *loader_add_change(pw_loader *p, PyObject *args) {
    long long step;
    PyObject *texts;
    if (!PyArg_ParseTuple(args, "LO:add_change", &step, &texts) || loader_mix_enter(p) < 0) return NULL;
    const char *w[WF_MIX_MAX_SOURCES + 1];
    Py_ssize_t n = 0;
    PyObject *keep = NULL;
    wf_mix_weights mw;
    PyObject *ret = NULL;
    if (step < 1) {
        PyErr_Format(PyExc_ValueError, "step is %lld; steps are counted from 1", step);
    } else if (c_strings(texts, "weights", w, WF_MIX_MAX_SOURCES + 1, &n, &keep) == 0) {
        wf_status s = WF_OK;
        if (n != p->n_src)
            s = wf_error(WF_ERR_CONFIG, "set_weights: %zd weights for a mixture of %d sources; give one per source",
                         n, p->n_src);
        if (s == WF_OK) s = wf_mix_weights_parse(&mw, w, (int)n, "set_weights");
        if (s != WF_OK)
            pw_raise(s);
        else if (add_change(p, step, &mw) == 0)
            ret = weights_tuple(&mw);
    }
    Py_XDECREF(keep);
    p->busy = 0;
    return ret;
}

static PyObject *loader_weights_at(pw_loader *p, PyObject *args) {
    long long step;
    if (!PyArg_ParseTuple(args, "L:weights_at", &step) || loader_mix_enter(p) < 0) return NULL;
    p->busy = 0;
    return weights_tuple(weights_at(p, step));
}

static PyObject *loader_schedule(pw_loader *p, PyObject *noargs) {
    (void)noargs;
    if (loader_mix_enter(p) < 0) return NULL;
    p->busy = 0;
    PyObject *l = PyList_New(p->n_changes);
    for (int i = 0; l && i < p->n_changes; i++) {
        PyObject *item = Py_BuildValue("(LN)", (long long)p->change_step[i], weights_tuple(&p->change_w[i]));
        if (!item) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, i, item);
    }
    return l;
}

/* [(name, dir, samples per epoch)] of the sources. */
static PyObject *loader_sources(pw_loader *p, PyObject *noargs) {
    (void)noargs;
    if (loader_mix_enter(p) < 0) return NULL;
    p->busy = 0;
    PyObject *l = PyList_New(p->n_src);
    for (int k = 0; l && k < p->n_src; k++) {
        PyObject *item = Py_BuildValue("(sO&K)", p->spec.names[k], PyUnicode_DecodeFSDefault, p->spec.dirs[k],
                                       (unsigned long long)wf_loader_source_samples(p->l, k));
        if (!item) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, k, item);
    }
    return l;
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
    case 4: return PyLong_FromLong(p->n_src);
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
    {"next_mix_into", (PyCFunction)loader_next_mix_into, METH_VARARGS,
     "next_mix_into(out, sources, positions, counts) -> (state, wait_seconds): a mixture's next batch: first the "
     "weights of its step (step n is global batch n - 1) start a new segment if they differ from the cursor's; "
     "then the tokens into `out` ((B, T+1) int32), each row's source (B int32), its position in its source's order "
     "(B uint64) and the global batch's count per source (n uint32); the cursor the batch was read from "
     "(slot, segment_slot, taken, segment_taken, weights) and how long the call waited."},
    {"get_mix", (PyCFunction)loader_get_mix, METH_NOARGS,
     "get_mix() -> (slot, segment_slot, taken, segment_taken, weights): a mixture's cursor of the next batch."},
    {"set_mix", (PyCFunction)loader_set_mix, METH_VARARGS,
     "set_mix(slot, segment_slot, taken, segment_taken, weights): moves a mixture's cursor (checked: "
     "wf_mix_state_check); batches read ahead are dropped."},
    {"add_change", (PyCFunction)loader_add_change, METH_VARARGS,
     "add_change(step, weights) -> weights: the weights (decimal texts, one a source) from the 1-based step on, "
     "replacing a change at that step; returns them as integers without a common factor."},
    {"weights_at", (PyCFunction)loader_weights_at, METH_VARARGS,
     "weights_at(step) -> weights: the schedule's integer weights of the 1-based step."},
    {"schedule", (PyCFunction)loader_schedule, METH_NOARGS,
     "schedule() -> [(step, weights)]: the schedule's changes by step."},
    {"sources", (PyCFunction)loader_sources, METH_NOARGS,
     "sources() -> [(name, dir, samples_per_epoch)]: a mixture's sources in order."},
    {"close", (PyCFunction)loader_close, METH_NOARGS, "close(): stops the prefetch thread and unmaps the shards."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef loader_getset[] = {
    {"samples_per_epoch", (getter)loader_get, NULL, "Samples of T+1 tokens in an epoch.", (void *)0},
    {"batches_per_epoch", (getter)loader_get, NULL, "Global batches in an epoch.", (void *)1},
    {"batch", (getter)loader_get, NULL, "B: this rank's samples per batch (global_batch / world_size).", (void *)2},
    {"ready", (getter)loader_get, NULL, "Batches the prefetch thread has ready now.", (void *)3},
    {"n_sources", (getter)loader_get, NULL, "Sources of a mixture (0 for one dataset).", (void *)4},
    {"closed", (getter)loader_closed, NULL, "Whether close() was called.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject loader_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "weft._weft.Loader",
    .tp_basicsize = sizeof(pw_loader),
    .tp_dealloc = (destructor)loader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Loader(dir, split, seed, seq_len, global_batch, rank, world_size, shuffle, prefetch, verify, "
              "sources=None, weight_schedule=None): weft's data loader (wf_loader_create) of the dataset `dir`, or "
              "(dir None) of the mixture `sources` (data.sources' syntax) with the changes `weight_schedule` "
              "(data.weight_schedule's).",
    .tp_methods = loader_methods,
    .tp_getset = loader_getset,
    .tp_init = (initproc)loader_init,
    .tp_new = PyType_GenericNew,
};

int pw_add_loader_type(PyObject *m) {
    if (PyType_Ready(&loader_type) < 0) return -1;
    return PyModule_AddObjectRef(m, "Loader", (PyObject *)&loader_type);
}
