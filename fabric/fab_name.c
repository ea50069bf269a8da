/*
 * Addresses a libfabric user can name. A tmx address is opaque and chosen
 * by tmx, so an endpoint opened with FI_SOCKADDR_IN or FI_ADDR_STR also
 * owns a small UDP socket, its name socket, bound where the user asked
 * (fi_getinfo's node and service with FI_SOURCE, or info->src_addr): that
 * IPv4 address and port is the endpoint's libfabric name. fi_av_insert of
 * such a name asks the socket there for the tmx address behind it (QUERY,
 * answered by ANSWER with the blob of tmx_address) and adds that as the
 * tmx peer, so the data path never sees the name socket. A query also
 * announces the querier's own name and tmx address, which the endpoint
 * asked remembers: inserting the querier's name later works even when the
 * querier has gone (its owner is still asked first: see fab_ns_resolve).
 *
 * Queries are answered by a thread of the provider, started with the
 * first name socket of the process and asleep in poll() when none comes:
 * an application blocked outside libfabric (in its own socket exchange,
 * say, while its peer inserts its address) still answers, as a kernel
 * answers for a listening TCP socket. The thread sends cached bytes only;
 * it never calls tmx.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <endian.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fab.h"

#define NS_MAGIC 0x4e584d54u /* "TMXN" */
#define NS_VERSION 1
#define NS_QUERY 1
#define NS_ANSWER 2
#define NS_RETRY_MS 50       /* a query lost or not yet answered is sent again */
#define NS_ANNOUNCED_WAIT_MS 500 /* an announced name's owner gets this long to answer */
#define NS_SLICE_MS 10       /* a resolution's sleeps between looks at the clock */
#define NS_BATCH 64          /* names one fi_av_insert resolves at once */

/* The name socket's datagrams, little endian. */
typedef struct ns_hdr {
    uint32_t magic;   /* NS_MAGIC */
    uint8_t version;  /* NS_VERSION */
    uint8_t op;       /* NS_QUERY or NS_ANSWER */
    uint16_t len;     /* ANSWER: bytes of tmx address that follow; QUERY: 0 */
    uint64_t nonce;   /* chosen by the querier, echoed by the answer */
} ns_hdr_t;

static_assert(sizeof(ns_hdr_t) == 16, "name socket header is 16 bytes");

#define NS_POLL_MAX 256      /* name sockets one poll() watches; more wait in turn */

/* Every endpoint with a name socket in this process, and the thread that
 * answers them (woken through ns_wake when the list changes). */
static pthread_mutex_t ns_lock = PTHREAD_MUTEX_INITIALIZER;
static fab_ep_t *ns_eps;
static pthread_t ns_thread;
static int ns_running, ns_stop;
static int ns_wake = -1;
/* A closed socket stays bound while a poll() holds it: closing waits
 * until the thread no longer polls a set made before the close. */
static pthread_cond_t ns_cond = PTHREAD_COND_INITIALIZER;
static uint64_t ns_gen;      /* bumped by each unregistration */
static uint64_t ns_poll_gen; /* ns_gen when the set being polled was made */
static int ns_polling;

/* ------------------------------------------------------ address formats */

int fab_fmt_ok(uint32_t fmt)
{
    return fmt == FI_FORMAT_UNSPEC || fmt == FI_SOCKADDR_IN || fmt == FI_ADDR_STR;
}

/* "fi_sockaddr_in://a.b.c.d:port", libfabric's spelling. */
int fab_sa_to_str(const struct sockaddr_in *sa, char *buf, size_t len)
{
    char ip[INET_ADDRSTRLEN];

    inet_ntop(AF_INET, &sa->sin_addr, ip, sizeof(ip));
    return snprintf(buf, len, "fi_sockaddr_in://%s:%u", ip, ntohs(sa->sin_port));
}

int fab_str_to_sa(const char *s, struct sockaddr_in *sa)
{
    static const char pre[] = "fi_sockaddr_in://";
    char ip[INET_ADDRSTRLEN];
    const char *colon;
    char *end;
    unsigned long port;

    if (strncmp(s, pre, sizeof(pre) - 1) != 0)
        return -FI_EINVAL;
    s += sizeof(pre) - 1;
    colon = strrchr(s, ':');
    if (colon == NULL || (size_t)(colon - s) >= sizeof(ip))
        return -FI_EINVAL;
    memcpy(ip, s, (size_t)(colon - s));
    ip[colon - s] = '\0';
    port = strtoul(colon + 1, &end, 10);
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    if (*end != '\0' || port > 65535 || inet_pton(AF_INET, ip, &sa->sin_addr) != 1)
        return -FI_EINVAL;
    return 0;
}

/* node and service as an IPv4 address: passive (a wildcard for no node)
 * for a source, loopback for no node otherwise. A node in FI_ADDR_STR form
 * with no service is that address (fi_getinfo(3)). */
int fab_resolve_node(const char *node, const char *service, int passive, struct sockaddr_in *sa)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *res;
    struct sockaddr_in str_sa;
    int rc;

    if (passive)
        hints.ai_flags = AI_PASSIVE;
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    if (node == NULL && service == NULL)
        return 0;
    if (node != NULL && service == NULL && fab_str_to_sa(node, &str_sa) == 0) {
        *sa = str_sa;
        return 0;
    }
    if ((rc = getaddrinfo(node, service ? service : "0", &hints, &res)) != 0) {
        FI_INFO(&fab_prov, FI_LOG_CORE, "%s:%s does not resolve to IPv4: %s\n",
                node ? node : "", service ? service : "", gai_strerror(rc));
        return -FI_ENODATA;
    }
    memcpy(sa, res->ai_addr, sizeof(*sa));
    freeaddrinfo(res);
    return 0;
}

/* ---------------------------------------------------------- name socket */

/* A wildcard bind is reported with an address peers can reach: the first
 * up IPv4 interface that is not loopback, as tmx's udp transport picks. */
static void reachable_ip(struct in_addr *ip)
{
    struct ifaddrs *ifs, *i;

    ip->s_addr = htonl(INADDR_LOOPBACK);
    if (getifaddrs(&ifs) != 0)
        return;
    for (i = ifs; i != NULL; i = i->ifa_next) {
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
            !(i->ifa_flags & IFF_LOOPBACK)) {
            *ip = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
            break;
        }
    }
    freeifaddrs(ifs);
}

static void ns_serve(fab_ep_t *ep);
static void ns_forget_all(void);

static void ns_kick(void)
{
    uint64_t one = 1;

    if (ns_wake >= 0 && write(ns_wake, &one, sizeof(one)) < 0)
        FAB_WARN(FI_LOG_EP_CTRL, "name thread wake-up: %s\n", strerror(errno));
}

/* One poll over the wake-up fd and the name sockets, then every socket
 * is served; the lock is not held while asleep. */
static void ns_round(void)
{
    struct pollfd pfd[NS_POLL_MAX + 1] = {{ns_wake, POLLIN, 0}};
    uint64_t v;
    nfds_t n = 1;

    pthread_mutex_lock(&ns_lock);
    for (fab_ep_t *ep = ns_eps; ep != NULL && n <= NS_POLL_MAX; ep = ep->ns_next)
        pfd[n++] = (struct pollfd){ep->ns_fd, POLLIN, 0};
    ns_poll_gen = ns_gen;
    ns_polling = 1;
    pthread_mutex_unlock(&ns_lock);
    if (poll(pfd, n, n > NS_POLL_MAX ? 10 : -1) < 0 && errno != EINTR)
        usleep(1000);
    if (pfd[0].revents && read(ns_wake, &v, sizeof(v)) < 0)
        usleep(1000);
    pthread_mutex_lock(&ns_lock);
    ns_polling = 0;
    pthread_cond_broadcast(&ns_cond);
    for (fab_ep_t *ep = ns_eps; ep != NULL; ep = ep->ns_next)
        ns_serve(ep);
    pthread_mutex_unlock(&ns_lock);
}

static void *ns_main(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&ns_stop, __ATOMIC_ACQUIRE))
        ns_round();
    return NULL;
}

/* Called with ns_lock held. */
static int ns_start(void)
{
    if (ns_running)
        return 0;
    if (ns_wake < 0 && (ns_wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
        goto err_log;
    ns_stop = 0;
    if ((errno = pthread_create(&ns_thread, NULL, ns_main, NULL)) != 0)
        goto err_log;
    ns_running = 1;
    return 0;

err_log:
    FAB_WARN(FI_LOG_EP_CTRL, "cannot start the name thread: %s\n", strerror(errno));
    return -FI_EOTHER;
}

void fab_ns_fini(void)
{
    pthread_mutex_lock(&ns_lock);
    int running = ns_running;
    __atomic_store_n(&ns_stop, 1, __ATOMIC_RELEASE);
    ns_kick();
    ns_running = 0;
    pthread_mutex_unlock(&ns_lock);
    if (running)
        pthread_join(ns_thread, NULL);
    if (ns_wake >= 0)
        close(ns_wake);
    ns_wake = -1;
    ns_forget_all();
}

static int ns_register(fab_ep_t *ep)
{
    int ret;

    pthread_mutex_lock(&ns_lock);
    if ((ret = ns_start()) == 0) {
        ep->ns_next = ns_eps;
        ns_eps = ep;
        ns_kick();
    }
    pthread_mutex_unlock(&ns_lock);
    return ret;
}

/* Once this returns, the thread no longer touches the endpoint nor polls
 * its socket, so closing it unbinds its port at once. */
static void ns_unregister(fab_ep_t *ep)
{
    uint64_t gen;

    pthread_mutex_lock(&ns_lock);
    for (fab_ep_t **p = &ns_eps; *p != NULL; p = &(*p)->ns_next) {
        if (*p == ep) {
            *p = ep->ns_next;
            break;
        }
    }
    gen = ++ns_gen;
    ns_kick();
    while (ns_running && ns_polling && ns_poll_gen < gen)
        pthread_cond_wait(&ns_cond, &ns_lock);
    pthread_mutex_unlock(&ns_lock);
}

static int ns_bind(fab_ep_t *ep, const struct sockaddr_in *want)
{
    struct sockaddr_in sa = *want;
    socklen_t slen = sizeof(sa);

    ep->ns_fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (ep->ns_fd < 0)
        goto err_log;
    if (bind(ep->ns_fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        getsockname(ep->ns_fd, (struct sockaddr *)&sa, &slen) != 0)
        goto err_close;
    if (sa.sin_addr.s_addr == htonl(INADDR_ANY))
        reachable_ip(&sa.sin_addr);
    ep->ns_sa = sa;
    return 0;

err_close:
    close(ep->ns_fd);
    ep->ns_fd = -1;
err_log:
    FAB_WARN(FI_LOG_EP_CTRL, "cannot bind the endpoint's name to %s:%u: %s\n",
             inet_ntoa(want->sin_addr), ntohs(want->sin_port), strerror(errno));
    return errno == EADDRINUSE ? -FI_EADDRINUSE : -FI_EADDRNOTAVAIL;
}

/* The source the info names, in its format; a wildcard when none. */
static int ns_source(const struct fi_info *info, struct sockaddr_in *sa)
{
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    if (info->src_addr == NULL)
        return 0;
    if (info->addr_format == FI_ADDR_STR)
        return fab_str_to_sa(info->src_addr, sa);
    if (info->src_addrlen < sizeof(*sa) ||
        ((const struct sockaddr_in *)info->src_addr)->sin_family != AF_INET)
        return -FI_EINVAL;
    memcpy(sa, info->src_addr, sizeof(*sa));
    return 0;
}

int fab_ns_open(fab_ep_t *ep, const struct fi_info *info)
{
    struct sockaddr_in want;
    size_t len = sizeof(ep->ns_blob);
    tmx_status_t st;
    int ret;

    ep->ns_fd = -1;
    if (info->addr_format != FI_SOCKADDR_IN && info->addr_format != FI_ADDR_STR)
        return 0;
    if ((ret = ns_source(info, &want)) != 0) {
        FAB_WARN(FI_LOG_EP_CTRL, "src_addr is not an IPv4 address of the info's format\n");
        return ret;
    }
    if ((st = tmx_address(ep->tmx, ep->ns_blob, &len)) != TMX_OK)
        return -fab_errno(st);
    ep->ns_blob_len = len;
    if ((ret = ns_bind(ep, &want)) != 0)
        return ret;
    if ((ret = ns_register(ep)) != 0) {
        close(ep->ns_fd);
        ep->ns_fd = -1;
    }
    return ret;
}

void fab_ns_close(fab_ep_t *ep)
{
    if (ep->ns_fd < 0)
        return;
    ns_unregister(ep);
    close(ep->ns_fd);
    ep->ns_fd = -1;
}

/* ------------------------------------------------------- announcements */

/* A query announces the querier: the IPv4 name of an endpoint of its AV
 * and that endpoint's tmx address. The endpoint asked keeps it, so that
 * inserting the querier's name later needs no answer from it: it may
 * have finished and gone by then (a client that only sends, a test whose
 * client exits first). A newer announcement of a name replaces an older. */
typedef struct ns_announce {
    uint32_t ip;      /* the querier's IPv4 name, network order; 0: anonymous */
    uint16_t port;    /* network order */
    uint16_t reserved; /* zero */
} ns_announce_t;

static_assert(sizeof(ns_announce_t) == 8, "announcement is 8 bytes");

typedef struct ns_known {
    struct ns_known *next;
    struct sockaddr_in sa;
    size_t len;
    unsigned char blob[TMX_ADDRESS_MAX];
} ns_known_t;

static ns_known_t *ns_known; /* guarded by ns_lock */

/* Called with ns_lock held. */
static void ns_learn(const struct sockaddr_in *sa, const void *blob, size_t len)
{
    ns_known_t *k;

    for (k = ns_known; k != NULL; k = k->next) {
        if (k->sa.sin_addr.s_addr == sa->sin_addr.s_addr && k->sa.sin_port == sa->sin_port)
            break;
    }
    if (k == NULL) {
        if ((k = calloc(1, sizeof(*k))) == NULL)
            return; /* a resolution will ask instead */
        k->sa = *sa;
        k->next = ns_known;
        ns_known = k;
    }
    memcpy(k->blob, blob, len);
    k->len = len;
}

static int ns_lookup(const struct sockaddr_in *sa, void *blob, size_t *len)
{
    int found = 0;

    pthread_mutex_lock(&ns_lock);
    for (ns_known_t *k = ns_known; k != NULL && !found; k = k->next) {
        if (k->sa.sin_addr.s_addr == sa->sin_addr.s_addr && k->sa.sin_port == sa->sin_port) {
            memcpy(blob, k->blob, k->len);
            *len = k->len;
            found = 1;
        }
    }
    pthread_mutex_unlock(&ns_lock);
    return found;
}

static void ns_forget_all(void)
{
    while (ns_known != NULL) {
        ns_known_t *k = ns_known;
        ns_known = k->next;
        free(k);
    }
}

/* ------------------------------------------------------------ answering */

static void ns_answer(fab_ep_t *ep, const ns_hdr_t *q, const struct sockaddr_in *from)
{
    unsigned char out[sizeof(ns_hdr_t) + TMX_ADDRESS_MAX];
    ns_hdr_t a = {htole32(NS_MAGIC), NS_VERSION, NS_ANSWER, htole16((uint16_t)ep->ns_blob_len),
                  q->nonce};

    memcpy(out, &a, sizeof(a));
    memcpy(out + sizeof(a), ep->ns_blob, ep->ns_blob_len);
    sendto(ep->ns_fd, out, sizeof(a) + ep->ns_blob_len, MSG_DONTWAIT, (const struct sockaddr *)from,
           sizeof(*from));
}

/* A query that parses: header, announcement, announced address of at
 * most TMX_ADDRESS_MAX bytes (what ns_learn keeps; the receive buffer
 * holds one byte more, so a longer one is seen whole, and refused). */
static int ns_query_ok(const unsigned char *buf, ssize_t n, ns_hdr_t *q, ns_announce_t *an)
{
    if (n < (ssize_t)(sizeof(*q) + sizeof(*an)))
        return 0;
    memcpy(q, buf, sizeof(*q));
    memcpy(an, buf + sizeof(*q), sizeof(*an));
    return le32toh(q->magic) == NS_MAGIC && q->version == NS_VERSION && q->op == NS_QUERY &&
           le16toh(q->len) == (size_t)n - sizeof(*q) - sizeof(*an) &&
           le16toh(q->len) <= TMX_ADDRESS_MAX && an->reserved == 0;
}

/* Answers every query waiting on the endpoint's name socket and learns
 * what it announces; anything else that arrives there is dropped. Called
 * with ns_lock held. */
static void ns_serve(fab_ep_t *ep)
{
    unsigned char buf[sizeof(ns_hdr_t) + sizeof(ns_announce_t) + TMX_ADDRESS_MAX + 1];
    ns_hdr_t q;
    ns_announce_t an;
    struct sockaddr_in from;
    socklen_t flen = sizeof(from);
    ssize_t n;

    while ((n = recvfrom(ep->ns_fd, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from,
                         &flen)) >= 0) {
        flen = sizeof(from);
        if (!ns_query_ok(buf, n, &q, &an) || from.sin_family != AF_INET)
            continue;
        if (an.ip != 0 && an.port != 0 && q.len != 0) {
            struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = an.port,
                                     .sin_addr.s_addr = an.ip};
            ns_learn(&sa, buf + sizeof(q) + sizeof(an), le16toh(q.len));
        }
        ns_answer(ep, &q, &from);
    }
}

/* ------------------------------------------------------------ resolving */

int fab_ns_self_of(const fab_ep_t *ep, fab_ns_self_t *self)
{
    if (ep->ns_fd < 0)
        return 0;
    self->sa = ep->ns_sa;
    self->len = ep->ns_blob_len;
    memcpy(self->blob, ep->ns_blob, ep->ns_blob_len);
    return 1;
}

/* One query, announcing self (an endpoint with a name socket) or no one. */
static void ns_query(int fd, const struct sockaddr_in *to, uint64_t nonce, const fab_ns_self_t *self)
{
    unsigned char out[sizeof(ns_hdr_t) + sizeof(ns_announce_t) + TMX_ADDRESS_MAX];
    size_t blen = self ? self->len : 0;
    ns_hdr_t q = {htole32(NS_MAGIC), NS_VERSION, NS_QUERY, htole16((uint16_t)blen), nonce};
    ns_announce_t an = {0, 0, 0};

    if (self != NULL)
        an = (ns_announce_t){self->sa.sin_addr.s_addr, self->sa.sin_port, 0};
    memcpy(out, &q, sizeof(q));
    memcpy(out + sizeof(q), &an, sizeof(an));
    if (blen)
        memcpy(out + sizeof(q) + sizeof(an), self->blob, blen);
    sendto(fd, out, sizeof(q) + sizeof(an) + blen, MSG_DONTWAIT, (const struct sockaddr *)to,
           sizeof(*to));
}

/* Queries for every named endpoint of the AV, so that each is announced;
 * one anonymous query when none has a name. */
static void ns_query_all(int fd, const struct sockaddr_in *to, uint64_t nonce,
                         const fab_ns_self_t *selves, int n_selves)
{
    for (int k = 0; k < n_selves; k++)
        ns_query(fd, to, nonce, &selves[k]);
    if (n_selves == 0)
        ns_query(fd, to, nonce, NULL);
}

/* 1 when buf holds the answer to nonce, its blob copied out. */
static int ns_take_answer(const unsigned char *buf, ssize_t n, uint64_t nonce, void *blob,
                          size_t *len)
{
    ns_hdr_t a;

    if (n < (ssize_t)sizeof(a))
        return 0;
    memcpy(&a, buf, sizeof(a));
    if (le32toh(a.magic) != NS_MAGIC || a.version != NS_VERSION || a.op != NS_ANSWER ||
        a.nonce != nonce || le16toh(a.len) != (size_t)n - sizeof(a) || le16toh(a.len) > TMX_ADDRESS_MAX)
        return 0;
    *len = (size_t)n - sizeof(a);
    memcpy(blob, buf + sizeof(a), *len);
    return 1;
}

/* One name being resolved: its socket, connected to the name so that an
 * ICMP port unreachable comes back as ECONNREFUSED, and what its owner
 * announced, if anything (ns_known, looked for again at each query: it may
 * arrive while we wait, from an owner that asked us, got its answer and
 * exited before it answered us). */
typedef struct ns_res {
    fab_ns_name_t *name;
    int fd;
    uint64_t nonce;
    int64_t end;             /* when it gives up */
    int64_t refused_at;      /* first refusal, 0 while none came */
    int fb_have;             /* an announcement stands in */
    size_t fb_len;
    unsigned char fb_blob[TMX_ADDRESS_MAX];
} ns_res_t;

/* The answer, or what the owner announced, or why neither: the owner of a
 * name is asked first, since an announcement may be stale (an endpoint
 * closed and another bound its port); what it announced stands in when it
 * cannot answer: nothing listens there any more, or no answer came within
 * NS_ANNOUNCED_WAIT_MS of our knowing the announcement. */
static void ns_res_end(ns_res_t *r, int ret)
{
    fab_ns_name_t *nm = r->name;

    if (ret != 0 && (r->fb_have || (r->fb_have = ns_lookup(&nm->to, r->fb_blob, &r->fb_len)))) {
        memcpy(nm->blob, r->fb_blob, r->fb_len);
        nm->len = r->fb_len;
        ret = 0;
    } else if (ret == 0) {
        pthread_mutex_lock(&ns_lock);
        ns_learn(&nm->to, nm->blob, nm->len);
        pthread_mutex_unlock(&ns_lock);
    } else if (ret == -FI_ECONNREFUSED) {
        FAB_WARN(FI_LOG_AV, "no tmx endpoint at %s:%u: its port is refused\n",
                 inet_ntoa(nm->to.sin_addr), ntohs(nm->to.sin_port));
    } else {
        FAB_WARN(FI_LOG_AV, "no tmx endpoint answered at %s:%u within %d ms\n",
                 inet_ntoa(nm->to.sin_addr), ntohs(nm->to.sin_port), FAB_NS_TIMEOUT_MS);
    }
    nm->ret = ret;
    close(r->fd);
    r->fd = -1;
}

/* What came on r's socket: the answer, a refusal, or nothing of ours. */
static void ns_res_read(ns_res_t *r, int64_t now)
{
    unsigned char buf[sizeof(ns_hdr_t) + TMX_ADDRESS_MAX + 1];

    for (int i = 0; i < 8 && r->fd >= 0; i++) {
        ssize_t n = recv(r->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0 && errno == ECONNREFUSED) {
            /* perhaps not bound yet, its owner starting: it gets
             * FAB_NS_REFUSED_MS from the first refusal */
            if (!r->fb_have)
                r->fb_have = ns_lookup(&r->name->to, r->fb_blob, &r->fb_len);
            if (r->refused_at == 0)
                r->refused_at = now;
            if (r->fb_have || now - r->refused_at >= (int64_t)FAB_NS_REFUSED_MS * 1000)
                ns_res_end(r, -FI_ECONNREFUSED);
            continue;
        }
        if (n < 0)
            return;
        if (ns_take_answer(buf, n, r->nonce, r->name->blob, &r->name->len))
            ns_res_end(r, 0);
    }
}

/* Resolves n names (at most NS_BATCH) at once, their waits overlapping. */
static void ns_resolve_batch(fab_ns_name_t *names, size_t n, const fab_ns_self_t *selves,
                             int n_selves)
{
    ns_res_t res[NS_BATCH];
    struct pollfd pfd[NS_BATCH];
    int64_t next = 0;
    size_t live = 0;

    for (size_t i = 0; i < n; i++) {
        ns_res_t *r = &res[i];
        memset(r, 0, sizeof(*r));
        r->name = &names[i];
        r->nonce = (uint64_t)fab_now_us() ^ ((uint64_t)getpid() << 40) ^ (uintptr_t)r ^ i;
        r->end = fab_now_us() + (int64_t)FAB_NS_TIMEOUT_MS * 1000;
        if ((r->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0 ||
            connect(r->fd, (const struct sockaddr *)&names[i].to, sizeof(names[i].to)) != 0) {
            FAB_WARN(FI_LOG_AV, "name resolution: no socket to %s:%u: %s\n",
                     inet_ntoa(names[i].to.sin_addr), ntohs(names[i].to.sin_port),
                     strerror(errno));
            if (r->fd >= 0)
                close(r->fd);
            r->fd = -1;
            names[i].ret = -FI_EOTHER;
            continue;
        }
        live++;
    }
    while (live > 0) {
        int64_t now = fab_now_us();
        int query = now >= next;
        nfds_t np = 0;

        if (query)
            next = now + NS_RETRY_MS * 1000;
        for (size_t i = 0; i < n; i++) {
            ns_res_t *r = &res[i];
            if (r->fd < 0)
                continue;
            if (now >= r->end) {
                ns_res_end(r, -FI_ETIMEDOUT);
                continue;
            }
            if (query) {
                if (!r->fb_have && (r->fb_have = ns_lookup(&r->name->to, r->fb_blob, &r->fb_len)) &&
                    r->end > now + NS_ANNOUNCED_WAIT_MS * 1000)
                    r->end = now + NS_ANNOUNCED_WAIT_MS * 1000;
                ns_query_all(r->fd, &r->name->to, r->nonce, selves, n_selves);
            }
            pfd[np].fd = r->fd;
            pfd[np].events = POLLIN;
            pfd[np].revents = 0;
            np++;
        }
        if (np == 0)
            break;
        if (poll(pfd, np, NS_SLICE_MS) <= 0)
            continue;
        now = fab_now_us();
        for (size_t i = 0; i < n; i++) {
            if (res[i].fd >= 0)
                ns_res_read(&res[i], now);
        }
        live = 0;
        for (size_t i = 0; i < n; i++)
            live += res[i].fd >= 0;
    }
}

void fab_ns_resolve(fab_ns_name_t *names, size_t n, const fab_ns_self_t *selves, int n_selves)
{
    for (size_t i = 0; i < n; i += NS_BATCH)
        ns_resolve_batch(names + i, n - i < NS_BATCH ? n - i : NS_BATCH, selves, n_selves);
}

int fab_ns_getname(fab_ep_t *ep, void *addr, size_t *addrlen)
{
    char str[64];
    size_t need = sizeof(ep->ns_sa), room = addr != NULL ? *addrlen : 0;
    const void *src = &ep->ns_sa;

    if (ep->addr_format == FI_ADDR_STR) {
        need = (size_t)fab_sa_to_str(&ep->ns_sa, str, sizeof(str)) + 1;
        src = str;
    }
    *addrlen = need;
    if (room < need)
        return -FI_ETOOSMALL;
    memcpy(addr, src, need);
    return 0;
}
