/* See dump_record.h. */
#include "dump_record.h"

#include <string.h>

int dump_put_record(FILE *f, const char *name, uint32_t dtype, int ndim, const int64_t *shape,
                    const void *data, size_t elem_size) {
    uint32_t len = (uint32_t)strlen(name), nd = (uint32_t)ndim;
    size_t count = 1;
    for (int i = 0; i < ndim; i++) count *= (size_t)shape[i];
    if (fwrite(&len, 4, 1, f) != 1 || fwrite(name, 1, len, f) != len ||
        fwrite(&dtype, 4, 1, f) != 1 || fwrite(&nd, 4, 1, f) != 1 ||
        fwrite(shape, 8, (size_t)ndim, f) != (size_t)ndim ||
        fwrite(data, elem_size, count, f) != count)
        return -1;
    return 0;
}
