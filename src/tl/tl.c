#include "tl/tl.h"

#include <string.h>

#include "util/log.h"

static const tl_ops_t *const tl_all[] = {&tl_self_ops};

const tl_ops_t *tl_find(const char *name)
{
    for (size_t i = 0; i < sizeof(tl_all) / sizeof(tl_all[0]); i++) {
        if (strcmp(tl_all[i]->name, name) == 0)
            return tl_all[i];
    }
    return NULL;
}

tmx_status_t tl_no_get(tl_ep_t *ep, void *dst, size_t len, uint64_t raddr, uint64_t rkey,
                       tl_get_op_t *op)
{
    util_error("transport %s cannot read remote memory", ep->iface->ops->name);
    return TMX_ERR_UNSUPPORTED;
}
