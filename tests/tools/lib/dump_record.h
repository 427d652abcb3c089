/* The record format the Python tests read (tests/py/model_dump_io.py):
 * u32 name length, name bytes, u32 dtype, u32 ndim, ndim x i64 shape, then
 * the data. Shared by the dump programs in tests/tools/. */
#ifndef WEFT_TESTS_DUMP_RECORD_H
#define WEFT_TESTS_DUMP_RECORD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Writes one record; returns 0, or -1 on a write error. */
int dump_put_record(FILE *f, const char *name, uint32_t dtype, int ndim, const int64_t *shape,
                    const void *data, size_t elem_size);

#endif
