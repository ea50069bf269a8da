/*
 * Fuzz target: packets from the wire (the proto parser behind every
 * transport) and address blobs (tmx_peer_add). The first input byte picks
 * the parser. Any input must be dropped or accepted cleanly: no crash, no
 * leak, no hang; the context must stay usable.
 */
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "proto/proto.h"
#include "tmx.h"

static tmx_peer_t self;

static tmx_context_h fuzz_ctx(void)
{
    static tmx_context_h ctx;
    unsigned char addr[TMX_ADDRESS_MAX];
    size_t len = sizeof(addr);
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_TRANSPORTS | TMX_CONTEXT_FIELD_BOOT,
                              .transports = "self",
                              .boot = TMX_BOOT_NONE};

    if (ctx != NULL)
        return ctx;
    if (tmx_context_create(&p, &ctx) != TMX_OK || tmx_address(ctx, addr, &len) != TMX_OK ||
        tmx_peer_add(ctx, addr, len, &self) != TMX_OK)
        __builtin_trap();
    return ctx;
}

/* Drains whatever the packet left behind so that state does not pile up
 * across inputs: unexpected messages are received and discarded. */
static void drain(tmx_context_h ctx)
{
    tmx_completion_t c[16];
    tmx_message_h msg;
    size_t n;

    while (tmx_tprobe(ctx, TMX_ANY_SOURCE, 0, TMX_TAG_ANY, TMX_PROBE_FLAG_CLAIM, NULL, &msg) == TMX_OK)
        tmx_message_discard(ctx, msg);
    for (int i = 0; i < 4; i++)
        tmx_cq_read(ctx, c, 16, &n);
}

/* The check after every input, in every build (not an assert that NDEBUG
 * removes): the context still carries a message to itself, whole. */
static void check_usable(tmx_context_h ctx)
{
    static const char msg[] = "the context survived the input";
    char got[sizeof(msg)] = {0};
    tmx_completion_t sc = {0}, rc = {0};
    tmx_request_h s = NULL, r = NULL;
    const uint64_t tag = 0x5eed5eed5eed5eedull;

    if (tmx_trecv(ctx, self, got, sizeof(got), tag, 0, NULL, &r) != TMX_OK ||
        tmx_tsend(ctx, self, msg, sizeof(msg), tag, NULL, &s) != TMX_OK ||
        tmx_request_wait(r, 1000000, &rc) != TMX_OK || tmx_request_wait(s, 1000000, &sc) != TMX_OK ||
        rc.status != TMX_OK || sc.status != TMX_OK || rc.length != sizeof(msg) || memcmp(got, msg, sizeof(msg)) != 0) {
        fprintf(stderr, "fuzz_wire: after this input a message to self no longer arrives whole\n");
        abort();
    }
    tmx_request_free(r);
    tmx_request_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tmx_context_h ctx = fuzz_ctx();
    tmx_peer_t peer;
    char buf[64];
    tmx_request_h r;

    if (size == 0)
        return 0;
    if (data[0] & 1) {
        tmx_peer_add(ctx, data + 1, size - 1, &peer);
    } else if ((data[0] & 4) && size > 2) {
        /* The same bytes streaming in three pieces, as shm hands up a
         * span (cut where the last byte says; bit 3 of the first breaks
         * it off before its end), with a receive waiting half the time,
         * so that the payload goes piece by piece into it or into an
         * unexpected message. */
        size_t n = size - 1, cut = n > 64 ? 64 + data[size - 1] % (n - 63) : n / 2;
        size_t half = (n - cut) * (data[size - 1] >> 4) / 16;
        void *sink;
        r = NULL;
        if (data[0] & 16)
            tmx_trecv(ctx, TMX_ANY_SOURCE, buf, sizeof(buf), 0, TMX_TAG_ANY, NULL, &r);
        if ((sink = proto_stream_begin(&ctx->proto, ctx->uuid, data + 1, cut, n)) != NULL) {
            proto_stream_more(&ctx->proto, sink, data + 1 + cut, half);
            if (!(data[0] & 8))
                proto_stream_more(&ctx->proto, sink, data + 1 + cut + half, n - cut - half);
            /* broken off: as the transport says it (bit 5: gone; bit 6: as
             * if whole, which proto must find short) */
            proto_stream_end(&ctx->proto, sink,
                             !(data[0] & 8) || (data[0] & 64) ? TL_STREAM_WHOLE
                             : data[0] & 32 ? TL_STREAM_GONE : TL_STREAM_BROKEN);
        }
        if (r != NULL && tmx_request_test(r, NULL) == TMX_INPROGRESS)
            tmx_request_cancel(r);
        if (r != NULL)
            tmx_request_free(r);
    } else if (data[0] & 2) {
        /* Half the time a receive is waiting, so the expected path runs too. */
        tmx_trecv(ctx, TMX_ANY_SOURCE, buf, sizeof(buf), 0, TMX_TAG_ANY, NULL, &r);
        proto_recv_cb(&ctx->proto, ctx->uuid, data + 1, size - 1);
        if (tmx_request_test(r, NULL) == TMX_INPROGRESS)
            tmx_request_cancel(r);
        tmx_request_free(r);
    } else {
        proto_recv_cb(&ctx->proto, ctx->uuid, data + 1, size - 1);
    }
    drain(ctx);
    check_usable(ctx);
    return 0;
}
