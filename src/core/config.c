#include "core/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/log.h"

#define TMX_API __attribute__((visibility("default")))

typedef enum cfg_type {
    CFG_UINT,       /* decimal, in [lo, hi], into a uint32_t or uint64_t */
    CFG_ENUM,       /* one of words (any case), its index into an int */
    CFG_TLS,        /* transport names (tl_names), comma separated, up to the field's size */
    CFG_IPV4,       /* "auto" or a dotted IPv4 address */
    CFG_FAULTS,     /* name=rate[,...] with rates in [0, 1] */
    CFG_STOP,       /* empty, or claim:N, publish:N, help:N or fbox:N with N > 0 */
    CFG_PROTO       /* the protocol table's rules (proto_table.h) */
} cfg_type_t;

typedef struct cfg_entry {
    const char *name;
    cfg_type_t type;
    const char *def;
    uint64_t lo, hi;                /* CFG_UINT */
    const char *const *words;       /* CFG_ENUM, NULL-terminated */
    size_t off, size;               /* the field in config_t */
    const char *help;
} cfg_entry_t;

#define CFG_FIELD(m) offsetof(config_t, m), sizeof(((config_t *)0)->m)

static const char *const log_words[] = {"error", "warn", "info", "debug", NULL};
static const char *const cma_words[] = {"off", "auto", NULL};
static const char *const bool_words[] = {"0", "1", NULL};
static const char *const auto_words[] = {"0", "auto", NULL};

static const cfg_entry_t cfg_table[] = {
    {"TMX_LOG_LEVEL", CFG_ENUM, "warn", 0, 0, log_words, CFG_FIELD(log_level),
     "log level (debug names each protocol chosen)"},
    {"TMX_TRANSPORTS", CFG_TLS, "self,shm,udp", 0, 0, NULL, CFG_FIELD(transports),
     "transports a context opens, in order of preference (self, shm, udp)"},
    {"TMX_UNEXPECTED_MAX", CFG_UINT, "67108864", 0, 1ull << 48, NULL, CFG_FIELD(unexpected_max),
     "bytes that unexpected messages (received before their receive was posted) may hold; 8 MiB "
     "and an eighth (at most half) below it senders are told to send rendezvous, at it shm and udp "
     "senders wait until receives take some (0: no bound)"},
    {"TMX_OFFLOAD", CFG_ENUM, "0", 0, 0, bool_words, CFG_FIELD(offload),
     "1 runs the offload engine: a thread of the context's own that advances its traffic (eager "
     "deliveries, rendezvous reads and FIN, acknowledgements) while the application computes "
     "without calling tmx; contexts then lock as in TMX_THREAD_MULTIPLE (docs/offload.md)"},
    {"TMX_OFFLOAD_POLL_US", CFG_UINT, "10", 1, 100000, NULL, CFG_FIELD(offload_poll_us),
     "offload engine: how often, in microseconds, it first looks whether the application has "
     "stopped calling tmx (it leaves the traffic to the application while that calls; the period "
     "then doubles while the application polls, up to 20 ms or this value)"},
    {"TMX_OFFLOAD_TAGS", CFG_UINT, "64", 1, 65535, NULL, CFG_FIELD(offload_tags),
     "offload engine: receives its matching list holds (max_num_tags); the rest are matched by "
     "software"},
    {"TMX_OFFLOAD_MIN", CFG_UINT, "65536", 0, 1ull << 40, NULL, CFG_FIELD(offload_min),
     "offload engine: receives of this many bytes or more go to its matching list (0: all); "
     "smaller ones complete within the eager path and stay with software"},
    {"TMX_OFFLOAD_OFFER", CFG_ENUM, "0", 0, 0, bool_words, CFG_FIELD(offload_offer),
     "offload engine: 1 offers a large receive that names its sender to that sender as it is "
     "posted (RTR, shm), and whichever of the two is idle copies the message: the sender writes it "
     "into the receive, or the receiver reads it; a receiver that computes from the post to its wait "
     "then moves no byte. Every process of the job needs it; it counts the tagged packets to and "
     "from each peer (docs/offload.md)"},
    {"TMX_OFFLOAD_OPS", CFG_UINT, "256", 1, 1u << 20, NULL, CFG_FIELD(offload_ops),
     "offload engine: operations on its list (add, delete, sync) queued at most (max_ops)"},
    {"TMX_REG_CACHE", CFG_UINT, "0", 0, 1u << 20, NULL, CFG_FIELD(reg_cache),
     "registrations the process keeps across messages, each dropped as soon as its memory is freed "
     "or unmapped, so that a buffer whose memory went is refused to peers (docs/registration.md); "
     "0: off (shm and udp need no registration)"},
    {"TMX_PROTO", CFG_PROTO, "", 0, 0, NULL, CFG_FIELD(proto),
     "replaces the protocol table of the transports it names (tmx-info prints the tables); e.g. "
     "shm:eager@0,get@4k,coop@1m;udp:copy@0 (protocols: eager, get, coop, copy; sizes from which "
     "each applies, with k, m or g)"},
    {"TMX_SHM_CMA", CFG_ENUM, "auto", 0, 0, cma_words, CFG_FIELD(tl.shm.cma),
     "shm rendezvous reads: auto (process_vm_readv, copy if refused) or off (always copy)"},
    {"TMX_SHM_FBOX", CFG_ENUM, "1", 0, 0, bool_words, CFG_FIELD(tl.shm.fbox),
     "shm: 1 to send packets of up to 512 bytes through a fast box per sender and receiver (the "
     "ring when it is full or taken), 0 always through the receiver's ring"},
    {"TMX_SHM_TEST_STOP", CFG_STOP, "", 0, 0, NULL, CFG_FIELD(tl.shm.stop_at),
     "tests only: claim:N or publish:N stops this process (SIGSTOP) right after claiming, or right "
     "before publishing, its N-th shm cell; help:N right after taking the N-th chunk it writes for "
     "a shared copy; fbox:N right before publishing its N-th fast-box entry"},
    {"TMX_UDP_ADDR", CFG_IPV4, "auto", 0, 0, NULL, CFG_FIELD(tl.udp.addr),
     "udp: IPv4 address to bind (auto: first up, non-loopback interface)"},
    {"TMX_UDP_MTU", CFG_UINT, "0", 0, 65535, NULL, CFG_FIELD(tl.udp.mtu),
     "udp: data datagram MTU in bytes (0: the interface's; at least 540, a smaller value is "
     "raised to it)"},
    {"TMX_UDP_WINDOW", CFG_UINT, "4096", 16, 1u << 20, NULL, CFG_FIELD(tl.udp.window),
     "udp: segments in flight per peer and channel (rounded down to a power of two, and raised to hold the largest packet: 256 at 1500-byte datagrams)"},
    {"TMX_UDP_CONNECT_MAX", CFG_UINT, "256", 0, 65536, NULL, CFG_FIELD(tl.udp.connect_max),
     "udp: remote addresses (nodes, with a port per node) that get a socket connected to them for "
     "sends (the kernel keeps the route); 0 for none"},
    {"TMX_UDP_OFFLOAD", CFG_ENUM, "1", 0, 0, bool_words, CFG_FIELD(tl.udp.offload),
     "udp: 1 to use UDP GSO and GRO where the kernel has them, 0 never (sendmmsg and recvmmsg "
     "only)"},
    {"TMX_UDP_SHARED_PORT", CFG_ENUM, "auto", 0, 0, auto_words, CFG_FIELD(tl.udp.shared_port),
     "udp: auto for one port per node, shared by a job's processes there (kernel steering by node "
     "index); 0 for a port per process, as when the port cannot be shared"},
    {"TMX_UDP_LANES", CFG_UINT, "4", 0, 16, NULL, CFG_FIELD(tl.udp.lanes),
     "udp: lanes per pair of nodes for bulk data (packets of several datagrams): that many UDP "
     "flows from one node to another, shared by the job's processes there, whatever their number "
     "(with one port per node); 0 for none (bulk data leaves from each process's own socket)"},
    {"TMX_UDP_ACK_DELAY_US", CFG_UINT, "50", 0, 1000000, NULL, CFG_FIELD(tl.udp.ack_delay_us),
     "udp: delayed ACK, microseconds"},
    {"TMX_UDP_RTO_MS", CFG_UINT, "100", 1, 60000, NULL, CFG_FIELD(tl.udp.rto_ms),
     "udp: first retransmit timeout, milliseconds (doubles up to 1 s)"},
    {"TMX_UDP_PEER_TIMEOUT_MS", CFG_UINT, "300000", 10, 3600000, NULL,
     CFG_FIELD(tl.udp.peer_timeout_ms),
     "udp: silence after which a peer is declared failed though its host never refused its port "
     "(a host gone); a busy peer is silent, not dead, so keep it long"},
    {"TMX_UDP_FAULTS", CFG_FAULTS, "", 0, 0, NULL, CFG_FIELD(tl.udp.faults),
     "udp: injected faults, e.g. drop=0.05,dup=0.01,reorder=0.05,corrupt=0.001"},
};

#define CFG_N (sizeof(cfg_table) / sizeof(cfg_table[0]))

/* Set by tmxrun (docs/tmxrun.md) for each rank it starts; a process that
 * finds TMX_KVS joins the job. boot/kvs.c checks their syntax. */
static const struct {
    const char *name, *help;
} launcher_table[] = {
    {"TMX_KVS", "the job's key-value service: unix:@NAME, unix:PATH or tcp:HOST:PORT"},
    {"TMX_RANK", "this process's rank, 0 to TMX_SIZE - 1"},
    {"TMX_SIZE", "the number of ranks of the job"},
    {"TMX_JOBID", "the job's identity, 16 hex digits (also the key of its udp datagrams)"},
    {"PMIX_NAMESPACE", "set by a PMIx launcher (Open MPI's mpirun, Slurm's srun --mpi=pmix): "
                       "without TMX_KVS, a context joins that job through PMIx"},
    {"PMIX_RANK", "set by a PMIx launcher: this process's rank in PMIX_NAMESPACE"},
};

#define LAUNCHER_N (sizeof(launcher_table) / sizeof(launcher_table[0]))

/* ------------------------------------------------------------- parsing */

static int parse_u64(const char *v, uint64_t *out)
{
    char *end;

    if (*v < '0' || *v > '9')
        return 0;
    errno = 0;
    *out = strtoull(v, &end, 10);
    return errno == 0 && *end == '\0';
}

static int parse_enum(const cfg_entry_t *e, const char *v, int *out)
{
    for (int i = 0; e->words[i] != NULL; i++) {
        if (strcasecmp(v, e->words[i]) == 0) {
            *out = i;
            return 1;
        }
    }
    return 0;
}

static int parse_rate(const char *t, const char *name, double *out)
{
    size_t n = strlen(name);
    char *end;
    double v;

    if (strncmp(t, name, n) != 0 || t[n] != '=')
        return 0;
    errno = 0;
    v = strtod(t + n + 1, &end);
    if (errno != 0 || end == t + n + 1 || *end != '\0' || !(v >= 0.0 && v <= 1.0))
        return 0;
    *out = v;
    return 1;
}

static int parse_faults(const char *v, tl_udp_faults_t *f)
{
    char buf[256], *save = NULL;

    memset(f, 0, sizeof(*f));
    if (strlen(v) >= sizeof(buf))
        return 0;
    strcpy(buf, v);
    for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        if (!parse_rate(t, "drop", &f->drop) && !parse_rate(t, "dup", &f->dup) &&
            !parse_rate(t, "reorder", &f->reorder) && !parse_rate(t, "corrupt", &f->corrupt))
            return 0;
    }
    return 1;
}

static int parse_stop(const char *v, tl_shm_settings_t *s)
{
    static const char *const at[] = {"", "claim:", "publish:", "help:", "fbox:"};

    s->stop_at = TL_SHM_STOP_NONE;
    s->stop_n = 0;
    if (*v == '\0')
        return 1;
    for (int i = TL_SHM_STOP_CLAIM; i <= TL_SHM_STOP_FBOX; i++) {
        size_t n = strlen(at[i]);
        if (strncmp(v, at[i], n) == 0 && parse_u64(v + n, &s->stop_n) && s->stop_n > 0) {
            s->stop_at = i;
            return 1;
        }
    }
    return 0;
}

/* At least one name, each a transport's: what open_transports (context.c)
 * opens, so that a list it would refuse is refused here, where
 * tmx_config_get and tmx-info see it too. */
static int parse_tls(const char *v, char *out, size_t size)
{
    char buf[128], *save = NULL;
    int n = 0;

    if (strlen(v) >= size || strlen(v) >= sizeof(buf))
        return 0;
    strcpy(buf, v);
    for (char *t = strtok_r(buf, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save), n++) {
        int k = 0;
        while (tl_names[k] != NULL && strcmp(tl_names[k], t) != 0)
            k++;
        if (tl_names[k] == NULL)
            return 0;
    }
    if (n == 0)
        return 0;
    strcpy(out, v);
    return 1;
}

static int parse_ipv4(const char *v, char *out, size_t size)
{
    struct in_addr a;

    if (strlen(v) >= size || (strcmp(v, "auto") != 0 && inet_pton(AF_INET, v, &a) != 1))
        return 0;
    strcpy(out, v);
    return 1;
}

static int parse_proto(const char *v, proto_spec_t *spec)
{
    const char *why = NULL;

    if (proto_spec_parse(v, spec, &why))
        return 1;
    util_error("TMX_PROTO='%s': %s", v, why);
    return 0;
}

/* What a setting accepts, for the error and for tmx-info. */
static const char *cfg_accepts(const cfg_entry_t *e, char *buf, size_t size)
{
    size_t used = 0;

    switch (e->type) {
    case CFG_UINT:
        snprintf(buf, size, "an integer in [%" PRIu64 ", %" PRIu64 "]", e->lo, e->hi);
        break;
    case CFG_ENUM:
        buf[0] = '\0';
        for (int i = 0; e->words[i] != NULL && used < size; i++)
            used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? "|" : "one of ", e->words[i]);
        break;
    case CFG_TLS:
        for (int i = 0; tl_names[i] != NULL && used < size; i++)
            used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "a comma list of ", tl_names[i]);
        if (used < size)
            snprintf(buf + used, size - used, " (at most %zu characters)", e->size - 1);
        break;
    case CFG_IPV4:
        snprintf(buf, size, "auto or a dotted IPv4 address");
        break;
    case CFG_FAULTS:
        snprintf(buf, size, "drop|dup|reorder|corrupt=RATE[,...], RATE in [0, 1]");
        break;
    case CFG_STOP:
        snprintf(buf, size, "empty, claim:N, publish:N, help:N or fbox:N with N > 0");
        break;
    case CFG_PROTO:
        snprintf(buf, size, "empty or TRANSPORT:PROTOCOL@SIZE[,...][;...]");
        break;
    }
    return buf;
}

static int cfg_parse(const cfg_entry_t *e, const char *v, config_t *c)
{
    void *field = (char *)c + e->off;
    uint64_t x;

    switch (e->type) {
    case CFG_UINT:
        if (!parse_u64(v, &x) || x < e->lo || x > e->hi)
            return 0;
        if (e->size == sizeof(uint32_t))
            *(uint32_t *)field = (uint32_t)x;
        else
            *(uint64_t *)field = x;
        return 1;
    case CFG_ENUM:
        return parse_enum(e, v, field);
    case CFG_TLS:
        return parse_tls(v, field, e->size);
    case CFG_IPV4:
        return parse_ipv4(v, field, e->size);
    case CFG_FAULTS:
        return parse_faults(v, field);
    case CFG_STOP:
        return parse_stop(v, &c->tl.shm);
    case CFG_PROTO:
        return parse_proto(v, field);
    }
    return 0;
}

/* The override of name: the last "NAME=VALUE" naming it, or NULL. */
static const char *cfg_override(const char *const *overrides, const char *name)
{
    size_t n = strlen(name);
    const char *v = NULL;

    for (size_t i = 0; overrides != NULL && overrides[i] != NULL; i++) {
        if (strncmp(overrides[i], name, n) == 0 && overrides[i][n] == '=')
            v = overrides[i] + n + 1;
    }
    return v;
}

static tmx_status_t cfg_check_overrides(const char *const *overrides)
{
    for (size_t i = 0; overrides != NULL && overrides[i] != NULL; i++) {
        const char *eq = strchr(overrides[i], '=');
        size_t k;
        for (k = 0; eq != NULL && k < CFG_N; k++) {
            if (strlen(cfg_table[k].name) == (size_t)(eq - overrides[i]) &&
                strncmp(cfg_table[k].name, overrides[i], (size_t)(eq - overrides[i])) == 0)
                break;
        }
        if (eq == NULL || k == CFG_N) {
            util_error("setting '%s' %s (tmx-info lists the settings)", overrides[i],
                       eq == NULL ? "is not NAME=VALUE" : "names no setting");
            return TMX_ERR_INVALID;
        }
    }
    return TMX_OK;
}

tmx_status_t config_load(config_t *c, const char *const *overrides)
{
    char accepts[160];
    tmx_status_t st;

    if ((st = cfg_check_overrides(overrides)) != TMX_OK)
        return st;
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < CFG_N; i++) {
        const cfg_entry_t *e = &cfg_table[i];
        const char *v = cfg_override(overrides, e->name), *from = "in tmx_context_params_t.settings";
        if (v == NULL && (v = getenv(e->name)) != NULL)
            from = "in the environment";
        if (v == NULL)
            v = e->def, from = "by default";
        else if (e->off == offsetof(config_t, transports))
            c->transports_set = 1;
        if (!cfg_parse(e, v, c)) {
            util_error("%s='%s' (%s): expected %s", e->name, v, from, cfg_accepts(e, accepts, sizeof(accepts)));
            return TMX_ERR_INVALID;
        }
    }
    return TMX_OK;
}

void config_defaults(config_t *c)
{
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < CFG_N; i++) {
        if (!cfg_parse(&cfg_table[i], cfg_table[i].def, c))
            util_error("the default of %s does not parse", cfg_table[i].name);
    }
}

const char *config_launcher(const char *name)
{
    for (size_t i = 0; i < LAUNCHER_N; i++) {
        if (strcmp(launcher_table[i].name, name) == 0)
            return getenv(name);
    }
    util_error("%s is not one of the launcher's variables", name);
    return NULL;
}

/* ------------------------------------------------------------- printing */

static const char *cfg_value(const cfg_entry_t *e, const char *const *overrides)
{
    const char *v = cfg_override(overrides, e->name);

    if (v == NULL)
        v = getenv(e->name);
    return v != NULL ? v : e->def;
}

void config_print(FILE *f)
{
    char accepts[160];

    fprintf(f, "settings (environment or tmx_context_params_t.settings; a bad value fails tmx_context_create):\n");
    for (size_t i = 0; i < CFG_N; i++) {
        const cfg_entry_t *e = &cfg_table[i];
        fprintf(f, "  %s\n      value '%s', default '%s', accepts %s\n      %s\n", e->name,
                cfg_value(e, NULL), e->def, cfg_accepts(e, accepts, sizeof(accepts)), e->help);
    }
    fprintf(f, "launcher variables (set by tmxrun for each rank; a process with TMX_KVS joins the job):\n");
    for (size_t i = 0; i < LAUNCHER_N; i++) {
        const char *v = getenv(launcher_table[i].name);
        fprintf(f, "  %-20s %s\n      %s\n", launcher_table[i].name, v != NULL ? v : "(unset)",
                launcher_table[i].help);
    }
}

TMX_API void tmx_config_print(void *stream)
{
    config_print(stream);
}

TMX_API tmx_status_t tmx_config_get(const char *name, char *value, size_t len)
{
    char accepts[160];

    if (name == NULL || value == NULL || len == 0) {
        util_error("tmx_config_get: NULL name or no room for the value");
        return TMX_ERR_INVALID;
    }
    for (size_t i = 0; i < CFG_N; i++) {
        const cfg_entry_t *e = &cfg_table[i];
        const char *v;
        config_t c;
        if (strcmp(e->name, name) != 0)
            continue;
        if ((v = getenv(e->name)) == NULL)
            v = e->def;
        memset(&c, 0, sizeof(c));
        if (!cfg_parse(e, v, &c)) {
            util_error("%s='%s': expected %s", e->name, v, cfg_accepts(e, accepts, sizeof(accepts)));
            return TMX_ERR_INVALID;
        }
        if (strlen(v) >= len)
            return TMX_ERR_TRUNCATED;
        strcpy(value, v);
        return TMX_OK;
    }
    util_error("tmx_config_get: %s is no setting (tmx-info lists them)", name);
    return TMX_ERR_NOT_FOUND;
}
