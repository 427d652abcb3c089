/* Internals of the stack dumps (weft/stackdump.h) shared by their two
 * files: stackdump.c takes the stacks and writes the dump; stackdump_sym.c
 * turns addresses into function names and source lines with elfutils'
 * libdw (the process's own modules, read from /proc/self/maps and the ELF
 * files; DWARF where a module has it, else its symbol tables).
 *
 * The symbolizer runs on an ordinary thread, never in a signal handler: it
 * allocates and opens files. */
#ifndef WEFT_STACKDUMP_IMPL_H
#define WEFT_STACKDUMP_IMPL_H

#include <stdint.h>

#include "weft/buf.h"

typedef struct wf__sym wf__sym;

/* A symbolizer over the modules mapped into this process now. Never NULL
 * unless out of memory: without libdw's view it falls back to dladdr
 * (exported names only). Close with wf__stackdump_sym_close. */
wf__sym *wf__stackdump_sym_open(void);
void wf__stackdump_sym_close(wf__sym *s); /* accepts NULL */

/* Appends frame lines for address `pc` to `out`, each
 *   "<indent>#N  0xADDR FUNCTION[+0xOFF][ [inlined]][ at FILE:LINE] (MODULE)\n"
 * numbered from *frame (incremented per line): one line for the function
 * the address is in, preceded by one line per function inlined into it at
 * that address (innermost first), as addr2line -i does. `exact`: pc is the
 * address of the instruction itself (an interrupted thread's), not a
 * return address, whose call instruction is looked up instead (pc - 1). */
void wf__stackdump_sym_frame(wf__sym *s, uintptr_t pc, int exact, const char *indent, int *frame, wf_buf *out);

/* Unwinds thread `tid` of this process from its stack pointer `sp` and the
 * address `pc` it is at (both from /proc/self/task/TID/syscall, while it
 * sits in a system call) into out (max addresses, out[0] = pc; the others
 * are return addresses). Returns how many; 0 when unwinding is not
 * possible here. The thread must stay where it is during the walk. */
int wf__stackdump_sym_unwind(wf__sym *s, int tid, uintptr_t pc, uintptr_t sp, uintptr_t *out, int max);

#endif
