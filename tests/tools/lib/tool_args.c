/* key=value options of the tests/tools drivers (tool_args.h). */
#include "tool_args.h"

#include <stdlib.h>
#include <string.h>

const char *tool_arg_str(int argc, char **argv, const char *key, const char *def) {
    size_t k = strlen(key);
    for (int i = 0; i < argc; i++)
        if (strncmp(argv[i], key, k) == 0 && argv[i][k] == '=') return argv[i] + k + 1;
    return def;
}

double tool_arg_num(int argc, char **argv, const char *key, double def) {
    const char *v = tool_arg_str(argc, argv, key, NULL);
    return v ? atof(v) : def;
}
