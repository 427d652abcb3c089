/* The C extension `weft._weft` behind the Python package (python/weft/,
 * docs/python.md): thin types over weft's public API (include/weft/ only),
 * shared here by its files.
 *
 * What it does: raises weft's errors as Python exceptions carrying weft's
 * message; hands out weft's memory-mapped bytes (shard tokens, document
 * indexes, checkpoint tensors) as read-only buffer objects that keep their
 * owner alive, so that NumPy arrays made from them are views of the mapping
 * and the mapping outlives every such array; releases the GIL around every
 * call that reads files, waits for the loader or encodes text.
 * What it does not do: NumPy itself. Arrays are made in Python with
 * numpy.frombuffer over these buffers, so the extension builds against
 * Python.h alone and works with any NumPy.
 */
#ifndef WEFT_PYWEFT_H
#define WEFT_PYWEFT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "weft/status.h"

/* Sets the Python exception for weft status `s` (the class of its code,
 * weft.FormatError etc.) with this thread's weft message, and returns NULL
 * so that callers can `return pw_raise(s);`. */
PyObject *pw_raise(wf_status s);
/* The same with an exception already made (e.g. with extra attributes). */
PyObject *pw_error_object(wf_status s);

/* A read-only buffer of `len` bytes at `ptr`, owned by `owner` (a new
 * reference is taken): the memory stays valid as long as the View lives. */
PyObject *pw_view_new(PyObject *owner, const void *ptr, Py_ssize_t len);

/* A writable C-contiguous buffer of exactly `len` bytes from `obj` (what
 * the Python layer allocates with numpy.empty), or -1 with TypeError /
 * ValueError set. Release with PyBuffer_Release. */
int pw_get_out_buffer(PyObject *obj, Py_ssize_t len, Py_buffer *b);

/* The types of each file, readied and added to the module by pw_add_*. */
int pw_add_data_types(PyObject *m);
int pw_add_loader_type(PyObject *m);
int pw_add_tokenizer_type(PyObject *m);
int pw_add_ckpt_type(PyObject *m);

/* Module-level functions of pyweft_data.c. */
PyObject *pw_dataset_info(PyObject *self, PyObject *args);

#endif
