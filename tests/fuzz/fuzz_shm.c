/*
 * Fuzz target: what a sender on the same host can write into a shm
 * segment. Each input is a script run against a fresh receiver: honest
 * sends of any length (through the fast box, a cell or a span), cells
 * published with any kind, length and sender slot, and fast-box headers
 * written by hand, with progress in between. The receiver must drop what
 * does not parse and never read or write outside its segment; packets
 * that reach the layer above (gathered, or streamed in pieces) go to
 * callbacks that only count them.
 */
#include <stdint.h>
#include <string.h>

#include "core/config.h"
#include "tl/shm/shm.h"

static size_t delivered;

static void fuzz_recv(void *arg, uint64_t src, const void *data, size_t len)
{
    const volatile unsigned char *d = data;

    if (len != 0)
        delivered += d[0] + d[len - 1]; /* every byte it was given must be readable */
    delivered += len;
}

static void *fuzz_begin(void *arg, uint64_t src, const void *first, size_t first_len, size_t total)
{
    fuzz_recv(arg, src, first, first_len);
    return (void *)1;
}

static void fuzz_more(void *arg, void *sink, const void *piece, size_t len)
{
    fuzz_recv(arg, 0, piece, len);
}

static void fuzz_end(void *arg, void *sink, int how)
{
}

static const tl_stream_cb_t fuzz_stream = {fuzz_begin, fuzz_more, fuzz_end};

static void fuzz_fail(void *arg, uint64_t uuid, int clean)
{
}

static tmx_status_t fuzz_mem_check(void *arg, uint64_t addr, uint64_t len, uint64_t rkey)
{
    return TMX_ERR_NOT_FOUND;
}

static tl_iface_t *open_iface(uint64_t uuid, int stream)
{
    static config_t cfg;
    tl_iface_params_t p = {uuid, 0x77, fuzz_recv, fuzz_fail, fuzz_mem_check, NULL, NULL, 0, &cfg.tl, NULL,
                           stream ? &fuzz_stream : NULL, NULL, NULL, 0, NULL, 0, NULL};
    tl_iface_t *iface;

    config_defaults(&cfg);
    if (tl_shm_ops.iface_open(&p, &iface) != TMX_OK)
        __builtin_trap();
    return iface;
}

/* Takes n bytes of the script, or fewer at its end. */
static size_t take(const uint8_t **d, size_t *left, void *out, size_t n)
{
    if (n > *left)
        n = *left;
    memcpy(out, *d, n);
    *d += n;
    *left -= n;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned char buf[SHM_MAX_PACKET];
    tl_iface_t *rx, *tx;
    tl_ep_t *tep;
    shm_ep_t *ep;
    unsigned char addr[256];
    size_t alen = sizeof(addr);

    if (size < 1)
        return 0;
    rx = open_iface(0xb0b, data[0] & 1);
    tx = open_iface(0xa11ce, 0);
    if (tl_shm_ops.address(rx, addr, &alen) != TMX_OK ||
        tl_shm_ops.ep_create(tx, addr, alen, 1, 0xb0b, &tep) != TMX_OK)
        __builtin_trap();
    ep = (shm_ep_t *)tep;
    data++;
    size--;
    for (int steps = 0; size > 0 && steps < 64; steps++) {
        uint8_t op = 0;
        uint16_t len = 0;
        take(&data, &size, &op, 1);
        take(&data, &size, &len, 2);
        switch (op & 3) {
        case 0: { /* an honest send */
            size_t n = 1 + (size_t)len * 7 % SHM_MAX_PACKET;
            struct iovec iov = {buf, n};
            memset(buf, op, n);
            take(&data, &size, buf, n < 64 ? n : 64);
            tl_shm_ops.send(tep, &iov, 1);
            break;
        }
        case 1: { /* a cell of any kind, length and slot */
            uint64_t pos;
            shm_cell_t *cell = shm_cell_claim(ep, &pos);
            uint8_t slot = 0;
            if (cell == NULL)
                break;
            take(&data, &size, &slot, 1);
            take(&data, &size, cell->payload, 64);
            if (shm_cell_publish(ep, cell, pos, (uint32_t)(op >> 2) & 7, len & SHM_LEN_MASK) == TMX_OK &&
                (slot & 0x80))
                shm_cell_set_slot(cell, slot & 1 ? SHM_N_SENDERS + slot : slot); /* after its publish, as a racing peer */
            break;
        }
        case 2: { /* a fast-box header by hand, at the sender's next position or near it */
            uint64_t h = 0;
            if (ep->fbox == SHM_FBOX_NONE)
                break;
            take(&data, &size, &h, 8);
            if (op & 4)
                h = (h & ~(0xffffffffull << 16)) | SHM_FBOX_POS(ep->fb_write);
            __atomic_store_n((uint64_t *)(void *)(shm_fbox_data(ep->seg, ep->fbox) +
                                                  ((ep->fb_write + (op >> 3 & 7) * 8) & (SHM_FBOX_SIZE - 1))),
                             h, __ATOMIC_SEQ_CST);
            break;
        }
        default:
            for (int i = 0; i < 1 + (len & 7); i++)
                tl_shm_ops.progress(rx);
        }
    }
    for (int i = 0; i < 8; i++)
        tl_shm_ops.progress(rx);
    tl_iface_mute(tx);
    tl_shm_ops.ep_destroy(tep);
    tl_shm_ops.iface_close(tx);
    for (int i = 0; i < 4; i++)
        tl_shm_ops.progress(rx);
    tl_iface_mute(rx);
    tl_shm_ops.iface_close(rx);
    return 0;
}
