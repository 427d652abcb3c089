/* log_lines: many ranks and threads writing lines at once, for
 * tests/py/test_log_lines.py, which checks that no line comes out broken
 * or mixed with another.
 *
 *   log_lines [rank=R] [lines=N] [threads=T] [maxlen=M] [log=FILE] [comm=1]
 *
 * Each of T threads writes N lines, cycling through three writers: wf_log
 * (WF_INFO, stderr, with the rank prefix), wf_log_line (stderr, no prefix)
 * and printf (stdout, line-buffered by wf_log_line_buffer_stdout, as weft's
 * main() does under a launcher). A line reads
 *
 *   KIND rank R thread T line I len L: PAYLOAD end
 *
 * with KIND log|plain|out and L payload letters that the test recomputes:
 * 'a' + (7R + 13T + 31I + j) mod 26 for j < L; L = (I * 997 + T * 131 +
 * R * 17) mod (M + 1), so lengths spread from 0 to M bytes (M <= 3000,
 * the default: under PIPE_BUF with the prefix). With comm=1 the rank is the communicator's
 * (under mpirun); otherwise `rank`. With log=FILE both stdout and stderr
 * go to FILE, opened O_APPEND as a shared log file would be. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/tool_args.h"
#include "weft/comm.h"
#include "weft/log.h"
#include "weft/thread.h"

typedef struct {
    int rank, lines, maxlen;
} job;

static wf_status writer(void *ctx, int tid, int n_threads) {
    (void)n_threads;
    const job *j = ctx;
    char payload[3100];
    for (int i = 0; i < j->lines; i++) {
        int len = (i * 997 + tid * 131 + j->rank * 17) % (j->maxlen + 1);
        for (int k = 0; k < len; k++) payload[k] = (char)('a' + (7 * j->rank + 13 * tid + 31 * i + k) % 26);
        payload[len] = '\0';
        switch (i % 3) {
        case 0:
            WF_INFO("log rank %d thread %d line %d len %d: %s end", j->rank, tid, i, len, payload);
            break;
        case 1:
            wf_log_line("plain rank %d thread %d line %d len %d: %s end", j->rank, tid, i, len, payload);
            break;
        default:
            printf("out rank %d thread %d line %d len %d: %s end\n", j->rank, tid, i, len, payload);
            break;
        }
    }
    return WF_OK;
}

int main(int argc, char **argv) {
    const char *log = tool_arg_str(argc, argv, "log", NULL);
    if (log) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) {
            perror(log);
            return 1;
        }
        close(fd);
    }
    wf_log_line_buffer_stdout();
    job j = {(int)tool_arg_num(argc, argv, "rank", 0), (int)tool_arg_num(argc, argv, "lines", 300),
             (int)tool_arg_num(argc, argv, "maxlen", 3000)};
    if (j.maxlen < 0 || j.maxlen > 3000) j.maxlen = 3000;
    int threads = (int)tool_arg_num(argc, argv, "threads", 2);
    wf_comm *c = NULL;
    if (tool_arg_num(argc, argv, "comm", 0) != 0) {
        if (wf_comm_create(&c, NULL) != WF_OK) {
            fprintf(stderr, "log_lines: %s\n", wf_error_msg());
            return 1;
        }
        j.rank = wf_comm_rank(c);
        /* every rank starts writing at once */
        if (wf_comm_barrier(c, "start") != WF_OK) return 1;
    } else {
        wf_log_set_rank(j.rank, 64);
    }
    wf_status s = wf_parallel_run(threads, writer, &j);
    fflush(stdout);
    if (c) {
        if (wf_comm_barrier(c, "end") != WF_OK) s = WF_ERR_INTERNAL;
        wf_comm_destroy(c);
    }
    return s == WF_OK ? 0 : 1;
}
