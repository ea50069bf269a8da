/* The smallest tmx program: a context sends a tagged message to itself and
 * receives it with a wildcard, waiting on request handles. */
#include <stdio.h>
#include <string.h>

#include <tmx.h>

static int fail(const char *what, tmx_status_t st)
{
    fprintf(stderr, "%s: %s\n", what, tmx_strerror(st));
    return 1;
}

int main(void)
{
    unsigned char addr[TMX_ADDRESS_MAX];
    size_t len = sizeof(addr);
    char out[32] = "hello, tmx", in[32] = "";
    tmx_context_h ctx;
    tmx_peer_t me;
    tmx_request_h rreq;
    tmx_completion_t c;
    tmx_status_t st;

    if ((st = tmx_context_create(NULL, &ctx)) != TMX_OK)
        return fail("context", st);
    if ((st = tmx_address(ctx, addr, &len)) != TMX_OK || (st = tmx_peer_add(ctx, addr, len, &me)) != TMX_OK)
        return fail("address", st);
    if ((st = tmx_trecv(ctx, TMX_ANY_SOURCE, in, sizeof(in), 0, TMX_TAG_ANY, NULL, &rreq)) != TMX_OK)
        return fail("trecv", st);
    if ((st = tmx_tsend(ctx, me, out, strlen(out) + 1, 42, NULL, NULL)) != TMX_OK)
        return fail("tsend", st);
    if ((st = tmx_request_wait(rreq, -1, &c)) != TMX_OK)
        return fail("wait", st);
    printf("received \"%s\" (%zu bytes, tag %llu) from peer %u\n", in, c.length,
           (unsigned long long)c.tag, c.source);
    tmx_request_free(rreq);
    tmx_context_destroy(ctx);
    return strcmp(in, out) != 0;
}
