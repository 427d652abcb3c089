/* weft: the whole public API. Tools include this; library modules include
 * only the headers they use. */
#ifndef WEFT_WEFT_H
#define WEFT_WEFT_H

#include "weft/arena.h"
#include "weft/config.h"
#include "weft/dirlock.h"
#include "weft/fileio.h"
#include "weft/log.h"
#include "weft/progress.h"
#include "weft/rng.h"
#include "weft/rundir.h"
#include "weft/status.h"
#include "weft/thread.h"

#define WF_VERSION "0.1.0"

#endif
