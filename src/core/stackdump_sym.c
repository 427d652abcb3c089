/* Addresses to names for the stack dumps (stackdump_impl.h), with
 * elfutils' libdw: libdwfl reports every module of /proc/self/maps, gives
 * the symbol an address falls in (from .symtab, so static functions too,
 * or .dynsym of a stripped library), the source line from the module's
 * DWARF line table, and the functions inlined at that address from its
 * DWARF scopes (weft is built with -g, so its own frames get all three).
 *
 * Separate debug files are looked for in the module itself only: the
 * standard lookup of libdwfl can ask a debuginfod server over the network
 * when DEBUGINFOD_URLS is set, and weft never downloads at run time. A
 * system library without debug information still gets its function names
 * from its symbol tables.
 *
 * When libdwfl cannot start (no /proc), dladdr gives what the dynamic
 * linker knows: exported names only.
 *
 * A thread that cannot run the capture's signal handler (it sleeps in the
 * kernel uninterruptibly, blocks the signal, or a sanitizer's runtime
 * defers the signal until its system call returns) is unwound from the
 * stack pointer and address of its system call that /proc shows: libdwfl's
 * unwinder with those two registers, the modules' call frame information
 * (.eh_frame) and the thread's stack read with process_vm_readv on this
 * very process (a bad address is an error, never a fault). The other
 * registers are unknown, so a frame whose caller's frame is found through
 * one of them (a frame pointer) ends the walk early. */
#include <dlfcn.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <dwarf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/stackdump_impl.h"

typedef struct {
    pid_t pid, tid;
    Dwarf_Word pc, sp;
    int given;              /* next_thread handed out the thread */
    uintptr_t *out;         /* the walk's addresses */
    int n, max;
    int first_exact;        /* out[0] is the interrupted instruction */
} sd_walk;

struct wf__sym {
    Dwfl *dwfl;   /* NULL: dladdr only */
    int attached; /* the unwinder's callbacks are attached */
    sd_walk walk;
};

/* ---- the unwinder's callbacks: one thread, registers from /proc ---- */

static pid_t walk_next_thread(Dwfl *dwfl, void *arg, void **thread_arg) {
    (void)dwfl;
    sd_walk *w = arg;
    if (w->given) return 0;
    w->given = 1;
    *thread_arg = w;
    return w->tid;
}

static bool walk_get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_arg) {
    (void)dwfl;
    sd_walk *w = arg;
    if (tid != w->tid) return false;
    *thread_arg = w;
    return true;
}

static bool walk_memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg) {
    (void)dwfl;
    sd_walk *w = arg;
    struct iovec local = {.iov_base = result, .iov_len = sizeof *result};
    struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = sizeof *result};
    return process_vm_readv(w->pid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof *result;
}

static bool walk_set_initial_registers(Dwfl_Thread *thread, void *thread_arg) {
    sd_walk *w = thread_arg;
#if defined(__x86_64__)
    const int sp_reg = 7; /* DWARF's rsp */
#elif defined(__aarch64__)
    const int sp_reg = 31; /* DWARF's sp */
#else
    const int sp_reg = -1;
#endif
    if (sp_reg < 0 || !dwfl_thread_state_registers(thread, sp_reg, 1, &w->sp)) return false;
    dwfl_thread_state_register_pc(thread, w->pc);
    return true;
}

static const Dwfl_Thread_Callbacks walk_callbacks = {
    .next_thread = walk_next_thread,
    .get_thread = walk_get_thread,
    .memory_read = walk_memory_read,
    .set_initial_registers = walk_set_initial_registers,
};

static int walk_frame(Dwfl_Frame *frame, void *arg) {
    sd_walk *w = arg;
    Dwarf_Addr pc;
    bool activation = false;
    if (!dwfl_frame_pc(frame, &pc, &activation)) return DWARF_CB_ABORT;
    if (w->n == 0) w->first_exact = activation;
    w->out[w->n++] = (uintptr_t)pc;
    return w->n < w->max ? DWARF_CB_OK : DWARF_CB_ABORT;
}

int wf__stackdump_sym_unwind(wf__sym *s, int tid, uintptr_t pc, uintptr_t sp, uintptr_t *out, int max) {
    if (!s || !s->attached || !pc || !sp || max < 1) return 0;
    sd_walk *w = &s->walk;
    w->tid = tid;
    w->pc = pc;
    w->sp = sp;
    w->given = 0;
    w->out = out;
    w->n = 0;
    w->max = max;
    w->first_exact = 1;
    /* An error ends the walk where it could go no further: the frames
     * found until then stand. */
    (void)dwfl_getthread_frames(s->dwfl, tid, walk_frame, w);
    return w->n;
}

/* No separate debug files (see the top of the file). */
static int no_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
                        const char *file_name, const char *debuglink_file, GElf_Word debuglink_crc,
                        char **debuginfo_file_name) {
    (void)mod, (void)userdata, (void)modname, (void)base, (void)file_name, (void)debuglink_file;
    (void)debuglink_crc;
    *debuginfo_file_name = NULL;
    return -1;
}

static const Dwfl_Callbacks callbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = no_debuginfo,
};

wf__sym *wf__stackdump_sym_open(void) {
    wf__sym *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->dwfl = dwfl_begin(&callbacks);
    if (s->dwfl) {
        dwfl_report_begin(s->dwfl);
        if (dwfl_linux_proc_report(s->dwfl, getpid()) != 0 || dwfl_report_end(s->dwfl, NULL, NULL) != 0) {
            dwfl_end(s->dwfl);
            s->dwfl = NULL;
        }
    }
    if (s->dwfl) {
        s->walk.pid = getpid();
        s->attached = dwfl_attach_state(s->dwfl, NULL, s->walk.pid, &walk_callbacks, &s->walk);
    }
    return s;
}

void wf__stackdump_sym_close(wf__sym *s) {
    if (!s) return;
    if (s->dwfl) dwfl_end(s->dwfl);
    free(s);
}

static const char *base_name(const char *path) {
    const char *slash = path ? strrchr(path, '/') : NULL;
    return slash ? slash + 1 : path;
}

/* The compilation unit that holds `addr` (module-relative: less the
 * bias). libdw finds it through .debug_aranges, which clang does not
 * write: then every unit's address ranges are looked at. */
static Dwarf_Die *cu_of(Dwfl_Module *mod, Dwarf_Addr look, Dwarf_Addr *bias, Dwarf_Die *store) {
    Dwarf_Die *cu = dwfl_module_addrdie(mod, look, bias);
    if (cu) return cu;
    Dwarf *dw = dwfl_module_getdwarf(mod, bias);
    if (!dw) return NULL;
    Dwarf_Off off = 0, next;
    size_t header;
    while (dwarf_nextcu(dw, off, &next, &header, NULL, NULL, NULL) == 0) {
        if (dwarf_offdie(dw, off + header, store) && dwarf_haspc(store, look - *bias) == 1) return store;
        off = next;
    }
    return NULL;
}

/* The source file of a DW_AT_call_file index in cu's file table. */
static const char *call_file(Dwarf_Die *cu, Dwarf_Die *inlined, int *line) {
    Dwarf_Attribute a;
    Dwarf_Word idx = 0, ln = 0;
    *line = 0;
    if (!dwarf_attr(inlined, DW_AT_call_file, &a) || dwarf_formudata(&a, &idx) != 0) return NULL;
    if (dwarf_attr(inlined, DW_AT_call_line, &a) && dwarf_formudata(&a, &ln) == 0) *line = (int)ln;
    Dwarf_Files *files;
    size_t nfiles;
    if (dwarf_getsrcfiles(cu, &files, &nfiles) != 0 || idx >= nfiles) return NULL;
    return dwarf_filesrc(files, idx, NULL, NULL);
}

static void frame_line(wf_buf *out, const char *indent, int *frame, uintptr_t pc, const char *func,
                       uintptr_t off, int has_off, int inlined, const char *file, int line, const char *module) {
    wf_buf_printf(out, "%s#%-2d 0x%016llx %s", indent, (*frame)++, (unsigned long long)pc, func ? func : "??");
    if (has_off) wf_buf_printf(out, "+0x%llx", (unsigned long long)off);
    if (inlined) wf_buf_puts(out, " [inlined]");
    if (file) wf_buf_printf(out, " at %s:%d", file, line);
    wf_buf_printf(out, " (%s)\n", module ? module : "?");
}

static void frame_dladdr(uintptr_t pc, uintptr_t look, const char *indent, int *frame, wf_buf *out) {
    Dl_info info;
    memset(&info, 0, sizeof info);
    if (dladdr((void *)look, &info) && info.dli_sname && info.dli_saddr)
        frame_line(out, indent, frame, pc, info.dli_sname, look - (uintptr_t)info.dli_saddr, 1, 0, NULL, 0,
                   base_name(info.dli_fname));
    else
        frame_line(out, indent, frame, pc, NULL, 0, 0, 0, NULL, 0, info.dli_fname ? base_name(info.dli_fname) : NULL);
}

void wf__stackdump_sym_frame(wf__sym *s, uintptr_t pc, int exact, const char *indent, int *frame, wf_buf *out) {
    /* A return address points after its call: the call is what ran. */
    uintptr_t look = exact || pc == 0 ? pc : pc - 1;
    Dwfl_Module *mod = s && s->dwfl ? dwfl_addrmodule(s->dwfl, (Dwarf_Addr)look) : NULL;
    if (!mod) {
        frame_dladdr(pc, look, indent, frame, out);
        return;
    }
    Dwarf_Addr start = 0;
    const char *modname = base_name(dwfl_module_info(mod, NULL, &start, NULL, NULL, NULL, NULL, NULL));
    GElf_Off off = 0;
    GElf_Sym sym;
    const char *symname = dwfl_module_addrinfo(mod, (GElf_Addr)look, &off, &sym, NULL, NULL, NULL);
    char where[300];
    if (!symname) {
        /* No symbol (a stripped library's static function): the offset in
         * the module, for addr2line or gdb on a machine with its debug
         * symbols. */
        snprintf(where, sizeof where, "%s+0x%llx", modname ? modname : "?",
                 (unsigned long long)((Dwarf_Addr)pc - start));
        modname = where;
    }

    /* The source line of the address, and the functions inlined there. */
    const char *file = NULL;
    int line = 0;
    Dwarf_Addr bias = 0;
    Dwarf_Die cu_store;
    Dwarf_Die *cu = cu_of(mod, (Dwarf_Addr)look, &bias, &cu_store);
    Dwarf_Line *dl = cu ? dwarf_getsrc_die(cu, (Dwarf_Addr)look - bias) : NULL;
    if (dl) {
        file = dwarf_linesrc(dl, NULL, NULL);
        dwarf_lineno(dl, &line);
    }
    Dwarf_Die *scopes = NULL;
    int nscopes = cu ? dwarf_getscopes(cu, (Dwarf_Addr)look - bias, &scopes) : 0;
    for (int i = 0; i < nscopes; i++) {
        int tag = dwarf_tag(&scopes[i]);
        if (tag == DW_TAG_subprogram) break;
        if (tag != DW_TAG_inlined_subroutine) continue;
        /* The inlined function, at the current line; the next one out is
         * at this one's call site. */
        frame_line(out, indent, frame, pc, dwarf_diename(&scopes[i]), 0, 0, 1, file, line, modname);
        file = call_file(cu, &scopes[i], &line);
    }
    free(scopes);
    frame_line(out, indent, frame, pc, symname, (uintptr_t)off, symname != NULL, 0, file, line, modname);
}
