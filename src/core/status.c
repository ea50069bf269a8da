#include "tmx.h"

#define TMX_API __attribute__((visibility("default")))

TMX_API const char *tmx_strerror(tmx_status_t status)
{
    switch (status) {
    case TMX_OK: return "success";
    case TMX_INPROGRESS: return "operation in progress";
    case TMX_ERR_INVALID: return "invalid argument";
    case TMX_ERR_NOMEM: return "out of memory";
    case TMX_ERR_TRUNCATED: return "message truncated";
    case TMX_ERR_CANCELED: return "operation canceled";
    case TMX_ERR_NO_MESSAGE: return "no matching message";
    case TMX_ERR_AGAIN: return "resources busy, try again";
    case TMX_ERR_UNREACHABLE: return "peer unreachable";
    case TMX_ERR_PEER_FAILED: return "peer failed";
    case TMX_ERR_UNSUPPORTED: return "operation not supported";
    case TMX_ERR_BUSY: return "object busy";
    case TMX_ERR_NO_SPACE: return "buffer too small";
    case TMX_ERR_TIMEOUT: return "timed out";
    case TMX_ERR_IO: return "input/output error";
    case TMX_ERR_PROTO: return "protocol error";
    case TMX_ERR_NOT_FOUND: return "not found";
    case TMX_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

TMX_API unsigned tmx_version(void)
{
    return TMX_VERSION;
}
