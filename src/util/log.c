#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int util_log_level = UTIL_LOG_WARN;

static const char *const log_names[] = {"error", "warn", "info", "debug"};

void util_log_set_level(const char *name)
{
    if (name == NULL || *name == '\0')
        return;
    for (int i = 0; i < (int)(sizeof(log_names) / sizeof(log_names[0])); i++) {
        if (strcasecmp(name, log_names[i]) == 0) {
            util_log_level = i;
            return;
        }
    }
    util_log_emit(UTIL_LOG_WARN, __FILE__, __LINE__,
                  "unknown log level '%s' (error, warn, info, debug); keeping '%s'", name,
                  log_names[util_log_level]);
}

void util_log_emit(util_log_level_t level, const char *file, int line, const char *fmt, ...)
{
    char msg[512];
    const char *base = strrchr(file, '/');
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "tmx[%d] %s %s:%d: %s\n", (int)getpid(), log_names[level],
            base ? base + 1 : file, line, msg);
}
