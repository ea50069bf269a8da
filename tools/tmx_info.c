/* tmx-info: the version, the transports with their limits and protocols,
 * every setting and the launcher's variables. */
#include <stdio.h>
#include <string.h>

#include "tmx.h"

int main(int argc, char **argv)
{
    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        printf("usage: tmx-info\nprints the version, the transports, every TMX_* setting and the "
               "launcher's variables\n");
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "tmx-info: unexpected argument '%s'\n", argv[1]);
        return 2;
    }
    printf("tmx-info built against header %d.%d.%d\n", TMX_VERSION_MAJOR, TMX_VERSION_MINOR,
           TMX_VERSION_PATCH);
    /* 1 when a setting does not parse: what a context would refuse */
    return tmx_info_print(stdout) == TMX_OK ? 0 : 1;
}
