/* weft: test hooks of the data loader (src/data/loader.c). Not public API:
 * only the loader's unit tests include this, to make a read fail on demand
 * (a healthy mmap'd dataset never fails a read). */
#ifndef WEFT_DATA_LOADER_INTERNAL_H
#define WEFT_DATA_LOADER_INTERNAL_H

#include "weft/loader.h"

/* Makes the reading of the batch whose cursor is `at` fail with WF_ERR_IO
 * (as a failed dataset read would), on whichever thread reads it. Call it
 * right after create, before the first wf_loader_next. */
void wf__loader_inject_error(wf_loader *l, wf_loader_state at);

#endif
