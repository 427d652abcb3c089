/* Options of the test drivers in tests/tools/ that run under mpirun:
 * `key=value` words anywhere in argv (no dashes, so launchers leave them
 * alone). Shared by dist_check and ckpt_async_dist. */
#ifndef WEFT_TESTS_TOOL_ARGS_H
#define WEFT_TESTS_TOOL_ARGS_H

/* The value of the first `key=value` word, or def. */
const char *tool_arg_str(int argc, char **argv, const char *key, const char *def);
/* The same, read as a number (atof), or def. */
double tool_arg_num(int argc, char **argv, const char *key, double def);

#endif
