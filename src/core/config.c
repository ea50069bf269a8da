#include "core/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tmx.h"
#include "util/log.h"

#define TMX_API __attribute__((visibility("default")))

typedef struct config_entry {
    const char *name;
    const char *def;
    const char *help;
} config_entry_t;

static const config_entry_t config_table[] = {
    {"TMX_LOG_LEVEL", "warn", "log level: error, warn, info or debug (debug names each protocol chosen)"},
    {"TMX_TRANSPORTS", "self,shm", "comma-separated transports a context opens (self, shm)"},
    {"TMX_SHM_CMA", "auto", "shm rendezvous reads: auto (process_vm_readv, copy if refused) or off (always copy)"},
};

const char *config_get(const char *name)
{
    for (size_t i = 0; i < sizeof(config_table) / sizeof(config_table[0]); i++) {
        if (strcmp(config_table[i].name, name) == 0) {
            const char *v = getenv(name);
            return v != NULL ? v : config_table[i].def;
        }
    }
    util_error("unknown setting %s", name);
    return NULL;
}

TMX_API void tmx_config_print(void *stream)
{
    FILE *f = stream;

    fprintf(f, "%-20s %-12s %-12s %s\n", "setting", "value", "default", "meaning");
    for (size_t i = 0; i < sizeof(config_table) / sizeof(config_table[0]); i++) {
        const config_entry_t *e = &config_table[i];
        fprintf(f, "%-20s %-12s %-12s %s\n", e->name, config_get(e->name), e->def, e->help);
    }
}
