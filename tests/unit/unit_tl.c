/* See unit_tl.h. */
#include "unit_tl.h"

#include "core/config.h"

tmx_status_t unit_tl_settings(tl_settings_t *out)
{
    config_t cfg;
    tmx_status_t st = config_load(&cfg, NULL);

    if (st == TMX_OK)
        *out = cfg.tl;
    return st;
}
