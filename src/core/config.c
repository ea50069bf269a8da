#include "core/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tmx.h"
#include "util/log.h"

#define TMX_API __attribute__((visibility("default")))

typedef struct config_entry {
    const char *name;
    const char *def;
    const char *help;
} config_entry_t;

static const config_entry_t config_table[] = {
    {"TMX_LOG_LEVEL", "warn", "log level: error, warn, info or debug (debug names each protocol chosen)"},
    {"TMX_TRANSPORTS", "self,shm,udp", "transports a context opens, in order of preference (self, shm, udp)"},
    {"TMX_UNEXPECTED_MAX", "67108864", "bytes that unexpected messages (received before their receive was posted) may hold; at the bound shm and udp senders wait until receives take some (0: no bound)"},
    {"TMX_SHM_CMA", "auto", "shm rendezvous reads: auto (process_vm_readv, copy if refused) or off (always copy)"},
    {"TMX_SHM_SPLIT_MIN", "131072", "shm reads of at least this many bytes are shared copies: the owner writes the first half while the reader reads the rest, when it polls in time (CMA only); 0: never"},
    {"TMX_SHM_TEST_STOP", "", "tests only: claim:N or publish:N stops this process (SIGSTOP) right after claiming, or right before publishing, its N-th shm cell; help:N right after taking the N-th chunk it writes for a shared copy"},
    {"TMX_UDP_ADDR", "auto", "udp: IPv4 address to bind (auto: first up, non-loopback interface)"},
    {"TMX_UDP_MTU", "0", "udp: data datagram MTU in bytes (0: the interface's)"},
    {"TMX_UDP_WINDOW", "4096", "udp: segments in flight per peer and channel"},
    {"TMX_UDP_CONNECT_MAX", "256", "udp: peers that get a socket of their own for sends, connected to them (the kernel keeps the route); 0 for none"},
    {"TMX_UDP_OFFLOAD", "1", "udp: 1 to use UDP GSO and GRO where the kernel has them, 0 never (sendmmsg and recvmmsg only)"},
    {"TMX_UDP_ACK_DELAY_US", "50", "udp: delayed ACK, microseconds"},
    {"TMX_UDP_RTO_MS", "100", "udp: first retransmit timeout, milliseconds (doubles up to 1 s)"},
    {"TMX_UDP_PEER_TIMEOUT_MS", "300000", "udp: silence after which a peer is declared failed though its host never refused its port (a host gone); a busy peer is silent, not dead, so keep it long"},
    {"TMX_UDP_FAULTS", "", "udp: injected faults, e.g. drop=0.05,dup=0.01,reorder=0.05,corrupt=0.001"},
};

const char *config_default(const char *name)
{
    for (size_t i = 0; i < sizeof(config_table) / sizeof(config_table[0]); i++) {
        if (strcmp(config_table[i].name, name) == 0)
            return config_table[i].def;
    }
    return NULL;
}

const char *config_get(const char *name)
{
    for (size_t i = 0; i < sizeof(config_table) / sizeof(config_table[0]); i++) {
        if (strcmp(config_table[i].name, name) == 0) {
            const char *v = getenv(name);
            return v != NULL ? v : config_table[i].def;
        }
    }
    util_error("unknown setting %s", name);
    return NULL;
}

TMX_API void tmx_config_print(void *stream)
{
    FILE *f = stream;

    fprintf(f, "%-20s %-12s %-12s %s\n", "setting", "value", "default", "meaning");
    for (size_t i = 0; i < sizeof(config_table) / sizeof(config_table[0]); i++) {
        const config_entry_t *e = &config_table[i];
        fprintf(f, "%-20s %-12s %-12s %s\n", e->name, config_get(e->name), e->def, e->help);
    }
}

unsigned long long config_u64(const char *name, unsigned long long lo, unsigned long long hi)
{
    const char *v = config_get(name);
    char *end;
    unsigned long long x = strtoull(v, &end, 10);

    if (*v == '\0' || *end != '\0' || x < lo || x > hi) {
        util_warn("%s=%s is not a number in [%llu, %llu]; using the default", name, v, lo, hi);
        x = strtoull(config_default(name), NULL, 10);
    }
    return x;
}
