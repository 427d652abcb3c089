/* One job per output directory (include/weft/dirlock.h,
 * docs/formats/dirlock.md): DIR/.weft.lock made with link(2) from a complete
 * temporary file, a heartbeat thread that refreshes its modification time,
 * and the takeover of a lock whose holder died.
 *
 * Takeover without a race: the stale lock (inode X) is renamed to a name of
 * this job's own, and only if the renamed file is still inode X (nobody
 * replaced it in between) is it removed and link(2) tried again; otherwise
 * the file is put back and the next round reads the new holder. */
#include "weft/dirlock.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "weft/fileio.h"
#include "weft/log.h"
#include "weft/rng.h"

#define DIRLOCK_FORMAT "weft-dirlock"
#define DIRLOCK_VERSION 1

struct wf_dirlock {
    char *dir, *path;
    int fd;                /* our lock file, kept open for the heartbeat */
    double heartbeat;      /* seconds between refreshes */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
};

/* What a lock file says, as parsed. */
typedef struct {
    char host[256];
    long long pid;
    double started;
    char command[128];
    int parsed;            /* 0: the file is not a lock weft wrote */
} holder;

static double unix_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void this_host(char *buf, size_t n) {
    if (gethostname(buf, n) != 0) snprintf(buf, n, "unknown");
    buf[n - 1] = '\0';
}

static void fmt_time(double t, char *buf, size_t n) {
    time_t s = (time_t)t;
    struct tm tm;
    if (t <= 0 || !gmtime_r(&s, &tm) || strftime(buf, n, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0)
        snprintf(buf, n, "an unknown time");
}

static void describe(const holder *h, char *buf, size_t n) {
    char when[64];
    fmt_time(h->started, when, sizeof when);
    if (!h->parsed) snprintf(buf, n, "an unreadable lock file");
    else snprintf(buf, n, "host %s, pid %lld, started %s, %s", h->host, h->pid, when,
                  h->command[0] ? h->command : "an unnamed command");
}

static void parse_holder(const char *text, holder *h) {
    memset(h, 0, sizeof *h);
    json_t *j = json_loads(text, 0, NULL);
    if (!j) return;
    const char *fmt = json_string_value(json_object_get(j, "format"));
    const char *host = json_string_value(json_object_get(j, "host"));
    json_t *pid = json_object_get(j, "pid");
    json_t *ver = json_object_get(j, "version");
    /* Another format or version: not parsed, so judged by its heartbeat
     * like another host's lock (docs/formats/dirlock.md). */
    if (fmt && strcmp(fmt, DIRLOCK_FORMAT) == 0 && json_is_integer(ver) &&
        json_integer_value(ver) == DIRLOCK_VERSION && host && json_is_integer(pid)) {
        snprintf(h->host, sizeof h->host, "%s", host);
        h->pid = (long long)json_integer_value(pid);
        h->started = json_number_value(json_object_get(j, "started"));
        const char *cmd = json_string_value(json_object_get(j, "command"));
        snprintf(h->command, sizeof h->command, "%s", cmd ? cmd : "");
        h->parsed = 1;
    }
    json_decref(j);
}

/* Reads the lock at `path`: its holder, modification time and inode.
 * 1 if read, 0 if there is none (ENOENT), -1 on another error. */
static int read_lock(const char *path, holder *h, double *mtime, ino_t *ino) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : -1;
    struct stat st;
    char text[2048];
    ssize_t n = -1;
    if (fstat(fd, &st) == 0) n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n < 0) return -1;
    text[n] = '\0';
    parse_holder(text, h);
    *mtime = (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec * 1e-9;
    *ino = st.st_ino;
    return 1;
}

/* Whether process `pid` of this host has ended: it no longer exists
 * (kill(pid, 0) fails with ESRCH), or it exists only as an entry its parent
 * has not reaped yet. kill() succeeds on such a zombie, so on Linux the
 * state letter of /proc/PID/stat decides: 'Z' (zombie) or 'X' (dead) is an
 * ended process, whose pid cannot be reused until it is reaped. Where /proc
 * cannot be read (another system, a hidepid mount) kill() alone decides.
 * *what says which of the two it was. */
static int pid_has_ended(long long pid, const char **what) {
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
        *what = "no longer exists";
        return 1;
    }
    char path[64], text[512];
    snprintf(path, sizeof path, "/proc/%lld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return 0;
    text[n] = '\0';
    /* "PID (COMM) S ...": COMM may hold spaces and parentheses, so the
     * state is the letter after the last ')'; COMM is short (16 bytes,
     * 64 at most), so the buffer always reaches it. */
    const char *close_paren = strrchr(text, ')');
    if (!close_paren || close_paren[1] != ' ') return 0;
    char state = close_paren[2];
    if (state == 'Z' || state == 'X') {
        *what = "has exited (a zombie its parent has not reaped)";
        return 1;
    }
    return 0;
}

/* Whether the lock's holder is gone; *why says how that was decided. */
static int is_stale(const holder *h, double mtime, double stale_s, char *why, size_t n) {
    char host[256];
    this_host(host, sizeof host);
    double age = unix_now() - mtime;
    if (h->parsed && strcmp(h->host, host) == 0) {
        const char *what = NULL;
        if (h->pid > 0 && pid_has_ended(h->pid, &what)) {
            snprintf(why, n, "its process %lld %s on this host", h->pid, what);
            return 1;
        }
        return 0;
    }
    if (age > stale_s) {
        snprintf(why, n, "its heartbeat is %.0f s old (more than %.0f s)", age, stale_s);
        return 1;
    }
    return 0;
}

static void *heartbeat_main(void *arg) {
    wf_dirlock *l = arg;
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double next = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + l->heartbeat;
        ts.tv_sec = (time_t)next;
        ts.tv_nsec = (long)((next - (double)ts.tv_sec) * 1e9);
        int rc = 0;
        while (!l->stop && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&l->cv, &l->mu, &ts);
        if (l->stop) break;
        /* Our own inode: after a takeover by another job this touches the
         * file it removed, never the new holder's. */
        futimens(l->fd, NULL);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Writes this job's lock content into a new file `tmp`, fsynced. */
static wf_status write_tmp(const char *tmp, const wf_dirlock_opts *o, double started) {
    char host[256];
    this_host(host, sizeof host);
    json_t *j = json_pack("{s:s, s:i, s:s, s:I, s:f, s:s}", "format", DIRLOCK_FORMAT, "version", DIRLOCK_VERSION,
                          "host", host, "pid", (json_int_t)getpid(), "started", started, "command",
                          o && o->command ? o->command : "weft");
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!text) return wf_error(WF_ERR_NOMEM, "out of memory writing a lock file");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    wf_status s = WF_OK;
    if (fd < 0) {
        s = wf_error(WF_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    } else {
        size_t len = strlen(text);
        if (write(fd, text, len) != (ssize_t)len || write(fd, "\n", 1) != 1 || fsync(fd) != 0)
            s = wf_error(WF_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
        close(fd);
        if (s != WF_OK) unlink(tmp);
    }
    free(text);
    return s;
}

/* One attempt to move a stale lock (inode `ino`) out of the way. 1 if it
 * was removed, 0 if another job replaced it meanwhile (put back). */
static int remove_stale(const char *path, ino_t ino) {
    char grave[4200];
    snprintf(grave, sizeof grave, "%s.stale.%ld.%llx", path, (long)getpid(),
             (unsigned long long)wf_rng_at((uint64_t)getpid(), (uint64_t)(unix_now() * 1e6), 0));
    if (rename(path, grave) != 0) return 0;
    struct stat st;
    if (stat(grave, &st) == 0 && st.st_ino == ino) {
        unlink(grave);
        return 1;
    }
    /* Someone took it over between our read and the rename: theirs goes
     * back (link fails only if yet another job made one meanwhile). */
    if (link(grave, path) != 0) WF_WARN("%s: a lock taken over at the same moment by two jobs was dropped", path);
    unlink(grave);
    return 0;
}

wf_status wf_dirlock_acquire(wf_dirlock **out, const char *dir, const wf_dirlock_opts *o) {
    *out = NULL;
    const char *what = o && o->what ? o->what : "directory";
    double stale_s = o && o->stale_seconds > 0 ? o->stale_seconds : 600.0;
    double beat = o && o->heartbeat_seconds > 0 ? o->heartbeat_seconds : stale_s / 10.0;
    if (!wf_path_is_dir(dir)) return wf_error(WF_ERR_NOTFOUND, "%s: the %s does not exist", dir, what);
    wf_dirlock *l = calloc(1, sizeof *l);
    if (!l) return wf_error(WF_ERR_NOMEM, "out of memory");
    l->fd = -1;
    l->heartbeat = beat;
    l->dir = strdup(dir);
    l->path = path_join(dir, WF_DIRLOCK_FILE);
    char tmp[4200];
    if (!l->dir || !l->path) {
        wf_dirlock_release(l);
        return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    snprintf(tmp, sizeof tmp, "%s.new.%ld", l->path, (long)getpid());
    unlink(tmp); /* a leftover of this pid's own earlier life */
    wf_status s = write_tmp(tmp, o, unix_now());
    for (int round = 0; s == WF_OK; round++) {
        if (link(tmp, l->path) == 0) break;
        if (errno != EEXIST) {
            s = wf_error(WF_ERR_IO, "%s: cannot create the lock: %s", l->path, strerror(errno));
            break;
        }
        holder h;
        double mtime;
        ino_t ino;
        int r = read_lock(l->path, &h, &mtime, &ino);
        if (r == 0) continue; /* released meanwhile: try again */
        char who[512], why[256];
        describe(&h, who, sizeof who);
        if (r < 0) {
            s = wf_error(WF_ERR_IO, "%s: cannot read the lock: %s", l->path, strerror(errno));
        } else if (round >= 8) {
            s = wf_error(WF_ERR_INVALID, "%s: the lock keeps changing hands (last: %s); try again", l->path, who);
        } else if (!is_stale(&h, mtime, stale_s, why, sizeof why)) {
            s = wf_error(WF_ERR_INVALID,
                         "%s: the %s is in use by another job (%s; lock %s). Wait for it to end or stop it; a lock "
                         "left by a job that died is taken over by itself",
                         dir, what, who, l->path);
        } else if (remove_stale(l->path, ino)) {
            WF_WARN("%s: took over the lock of a job that is gone (%s): %s", dir, who, why);
        }
    }
    if (s == WF_OK) {
        l->fd = open(l->path, O_RDONLY | O_CLOEXEC);
        if (l->fd < 0) s = wf_error(WF_ERR_IO, "%s: cannot open the lock: %s", l->path, strerror(errno));
    }
    unlink(tmp);
    if (s == WF_OK) s = wf_fsync_dir(dir);
    if (s == WF_OK) {
        pthread_mutex_init(&l->mu, NULL);
        pthread_cond_init(&l->cv, NULL);
        if (pthread_create(&l->thread, NULL, heartbeat_main, l) != 0)
            s = wf_error(WF_ERR_INTERNAL, "cannot start the lock's heartbeat thread");
        else
            l->thread_started = 1;
        if (s != WF_OK) {
            pthread_cond_destroy(&l->cv);
            pthread_mutex_destroy(&l->mu);
        }
    }
    if (s != WF_OK) {
        wf_dirlock_release(l); /* records no error: the message stays s's */
        return s;
    }
    *out = l;
    return WF_OK;
}

/* Makes the removal durable; a failure here loses nothing (the next job
 * would take the lock over as stale), so it records no error message. */
static void fsync_dir_quietly(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    (void)fsync(fd);
    close(fd);
}

void wf_dirlock_release(wf_dirlock *l) {
    if (!l) return;
    if (l->thread_started) {
        pthread_mutex_lock(&l->mu);
        l->stop = 1;
        pthread_cond_signal(&l->cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->thread, NULL);
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
    }
    if (l->fd >= 0) {
        struct stat mine, now;
        if (fstat(l->fd, &mine) == 0 && stat(l->path, &now) == 0 && mine.st_ino == now.st_ino &&
            mine.st_dev == now.st_dev) {
            unlink(l->path);
            fsync_dir_quietly(l->dir);
        }
        close(l->fd);
    }
    free(l->path);
    free(l->dir);
    free(l);
}

int wf_dirlock_describe(const char *dir, char *buf, size_t size) {
    char *path = path_join(dir, WF_DIRLOCK_FILE);
    if (!path) return -1;
    holder h;
    double mtime;
    ino_t ino;
    int r = read_lock(path, &h, &mtime, &ino);
    free(path);
    if (r != 1) return -1;
    describe(&h, buf, size);
    return 0;
}
