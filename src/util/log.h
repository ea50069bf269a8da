/* Logging. One line per event on stderr, with level, pid and the place it
 * was detected. The level comes from the TMX_LOG_LEVEL setting. */
#ifndef TMX_UTIL_LOG_H
#define TMX_UTIL_LOG_H

#include <stdint.h>

typedef enum util_log_level {
    UTIL_LOG_ERROR = 0,
    UTIL_LOG_WARN = 1,
    UTIL_LOG_INFO = 2,
    UTIL_LOG_DEBUG = 3
} util_log_level_t;

extern int util_log_level;

void util_log_set_level(const char *name);

void util_log_emit(util_log_level_t level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define util_log(level, ...)                                           \
    do {                                                               \
        if ((int)(level) <= util_log_level)                            \
            util_log_emit((level), __FILE__, __LINE__, __VA_ARGS__);   \
    } while (0)

#define util_error(...) util_log(UTIL_LOG_ERROR, __VA_ARGS__)
#define util_warn(...) util_log(UTIL_LOG_WARN, __VA_ARGS__)
#define util_info(...) util_log(UTIL_LOG_INFO, __VA_ARGS__)
#define util_debug(...) util_log(UTIL_LOG_DEBUG, __VA_ARGS__)

/* For what a peer can make happen at will (bad packets, refused
 * accesses): counts one more in *n and says whether to log it, the
 * first and then every 2^k-th, so that a flood leaves a few lines that
 * give the count. */
static inline int util_log_sparse(uint64_t *n)
{
    uint64_t v = ++*n;

    return (v & (v - 1)) == 0;
}

#endif
