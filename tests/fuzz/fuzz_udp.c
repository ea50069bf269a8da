/*
 * Fuzz target: datagrams arriving at the udp transport. The harness
 * fixes the checksum (and, for inputs whose first byte is odd, the version,
 * length, reply port, job key, destination and its node index) so that the fuzzer reaches the sequence, ACK, SACK,
 * reassembly and read paths instead of stopping at the CRC; inputs with
 * bit 1 of the first byte set go in as a buffer GRO may have coalesced,
 * cut by its first header. Packets that
 * reach the layer above go to a callback that only counts them.
 */
#include <arpa/inet.h>
#include <stdint.h>
#include <string.h>

#include "core/config.h"
#include "tl/udp/udp.h"
#include "util/crc32c.h"

static size_t delivered;

static void fuzz_recv(void *arg, uint64_t src, const void *data, size_t len)
{
    delivered += len;
}

static void fuzz_fail(void *arg, uint64_t uuid, int clean)
{
}

static tmx_status_t fuzz_mem_check(void *arg, uint64_t addr, uint64_t len, uint64_t rkey)
{
    return TMX_ERR_NOT_FOUND;
}

/* Written data is refused, as for a key we never handed out. */
static tmx_status_t fuzz_put_data(void *arg, uint64_t src_uuid, uint64_t addr, uint64_t rkey,
                                  const void *data, size_t len)
{
    return TMX_ERR_NOT_FOUND;
}

static udp_iface_t *fuzz_iface(void)
{
    static tl_iface_t *iface;
    static config_t cfg;
    tl_iface_params_t p = {0x1234, 0x77, fuzz_recv, fuzz_fail, fuzz_mem_check, NULL, NULL, 0, &cfg.tl, NULL,
                           NULL, fuzz_put_data, NULL, 0, NULL, 0, NULL};

    if (iface == NULL)
        config_defaults(&cfg);
    if (iface == NULL && tl_udp_ops.iface_open(&p, &iface) != TMX_OK)
        __builtin_trap();
    return (udp_iface_t *)iface;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    udp_iface_t *ui = fuzz_iface();
    unsigned char buf[UDP_MAX_DGRAM];
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr = {htonl(INADDR_LOOPBACK)}};
    udp_hdr_t h;
    uint32_t csum;

    if (size < 1 || size - 1 > sizeof(buf))
        return 0;
    memcpy(buf, data + 1, size - 1);
    size--;
    if (size >= sizeof(h)) {
        memcpy(&h, buf, sizeof(h));
        if (data[0] & 1) {
            h.job_key = htole64(ui->job_key);
            h.dst_id = htole64(ui->uuid);
            h.version = UDP_WIRE_VERSION;
            h.len = htole16((uint16_t)(size - sizeof(h)));
            h.port = htons(9);
            h.dst_index = htons(ui->sock.index);
            h.pad = 0;
        }
        h.csum = 0;
        memcpy(buf, &h, sizeof(h));
        csum = util_crc32c(0, buf, size);
        h.csum = htole32(csum);
        memcpy(buf, &h, sizeof(h));
    }
    ui->rx_now_us = udp_now_us();
    if (data[0] & 2) /* as a buffer that GRO may have coalesced */
        udp_buf_input(ui, buf, size, udp_gro_guess(buf, size), &from);
    else
        udp_dgram_input(ui, buf, size, &from);
    tl_udp_ops.progress(&ui->super);
    return 0;
}
