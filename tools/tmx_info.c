/* tmx-info: version, transports and every setting. */
#include <stdio.h>
#include <string.h>

#include "tl/tl.h"
#include "tmx.h"

static void print_transports(void)
{
    tmx_context_h ctx;
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_BOOT | TMX_CONTEXT_FIELD_TRANSPORTS,
                              .boot = TMX_BOOT_NONE};

    printf("transports:\n");
    for (int i = 0; tl_names[i] != NULL; i++) {
        tmx_status_t st;
        p.transports = tl_names[i];
        st = tmx_context_create(&p, &ctx);
        printf("  %-8s %s\n", tl_names[i], st == TMX_OK ? "usable" : tmx_strerror(st));
        if (st == TMX_OK)
            tmx_context_destroy(ctx);
    }
}

int main(int argc, char **argv)
{
    unsigned v = tmx_version();

    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        printf("usage: tmx-info\nprints the version, the transports and every TMX_* setting\n");
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "tmx-info: unexpected argument '%s'\n", argv[1]);
        return 2;
    }
    printf("tmx %u.%u.%u (header %d.%d.%d)\n", v >> 16, (v >> 8) & 0xff, v & 0xff,
           TMX_VERSION_MAJOR, TMX_VERSION_MINOR, TMX_VERSION_PATCH);
    printf("matching: exact, any-source, any-tag and any-any in O(1); other ignore masks scan\n");
    print_transports();
    printf("settings:\n");
    tmx_config_print(stdout);
    return 0;
}
