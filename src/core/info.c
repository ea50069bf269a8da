/* What tmx-info prints: the version, each transport as a context opened
 * with it alone finds it (usable or why not, its limits, the protocol
 * used at each message size), then the settings. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "core/config.h"
#include "core/core.h"
#include "util/log.h"

#define TMX_API __attribute__((visibility("default")))

static void info_transports(FILE *f)
{
    fprintf(f, "transports (a context opened with each alone):\n");
    for (int i = 0; tl_names[i] != NULL; i++) {
        tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_BOOT | TMX_CONTEXT_FIELD_TRANSPORTS,
                                  .boot = TMX_BOOT_NONE,
                                  .transports = tl_names[i]};
        tmx_context_h ctx;
        tmx_status_t st = tmx_context_create(&p, &ctx);

        if (st != TMX_OK) {
            fprintf(f, "  %-6s not usable here: %s\n", tl_names[i], tmx_strerror(st));
            continue;
        }
        fprintf(f, "  %-6s usable; packets up to %zu B\n", tl_names[i], ctx->ifaces[0]->max_packet);
        proto_tl_print(f, ctx->ifaces[0]->above);
        tmx_context_destroy(ctx);
    }
}

TMX_API tmx_status_t tmx_info_print(void *stream)
{
    FILE *f = stream;
    unsigned v = tmx_version();
    config_t c;
    tmx_status_t st;

    fprintf(f, "tmx %u.%u.%u\n", v >> 16, (v >> 8) & 0xff, v & 0xff);
    fprintf(f, "matching: exact, any-source, any-tag and any-any in O(1); other ignore masks scan\n");
    /* a context would fail on the same error, logging it again for each transport */
    if ((st = config_load(&c, NULL)) != TMX_OK)
        fprintf(f, "the settings do not parse (see the error above): no transport opened\n");
    else
        info_transports(f);
    config_print(f);
    return st;
}

TMX_API int tmx_host_sweep(const char *jobid)
{
    uint64_t key = 0;
    size_t i;

    for (i = 0; jobid != NULL && i < 16 && isxdigit((unsigned char)jobid[i]); i++)
        key = key << 4 | (uint64_t)(isdigit((unsigned char)jobid[i]) ? jobid[i] - '0'
                                                                      : (tolower((unsigned char)jobid[i]) - 'a' + 10));
    if (jobid != NULL && (i != 16 || jobid[i] != '\0' || key == 0)) {
        util_error("tmx_host_sweep: job '%s': expected 16 hex digits, not all zero", jobid);
        return TMX_ERR_INVALID;
    }
    return tl_sweep(key);
}
