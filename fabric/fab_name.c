/*
 * Addresses a libfabric user can name. A tmx address is opaque and chosen
 * by tmx, so an endpoint opened with FI_SOCKADDR_IN or FI_ADDR_STR also
 * owns a small UDP socket, its name socket, bound where the user asked
 * (fi_getinfo's node and service with FI_SOURCE, or info->src_addr): that
 * IPv4 address and port is the endpoint's libfabric name. fi_av_insert of
 * such a name asks the socket there for the tmx address behind it (QUERY,
 * answered by ANSWER with the blob of tmx_address) and adds that as the
 * tmx peer, so the data path never sees the name socket.
 *
 * A name socket is answered by whoever drives progress in its process:
 * CQ reads (at most once per FAB_NS_SERVE_US while polling), sleeps on a
 * CQ or wait fd (the socket is in the wait set), and every resolution
 * under way in the process, so two endpoints that insert each other at
 * once, in one process or two, both get their answers.
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
#include <sys/socket.h>
#include <unistd.h>

#include "fab.h"

#define NS_MAGIC 0x4e584d54u /* "TMXN" */
#define NS_VERSION 1
#define NS_QUERY 1
#define NS_ANSWER 2
#define NS_RETRY_MS 50       /* a query lost or not yet answered is sent again */
#define NS_SLICE_MS 5        /* how often a resolution serves this process */

/* The name socket's datagrams, little endian. */
typedef struct ns_hdr {
    uint32_t magic;   /* NS_MAGIC */
    uint8_t version;  /* NS_VERSION */
    uint8_t op;       /* NS_QUERY or NS_ANSWER */
    uint16_t len;     /* ANSWER: bytes of tmx address that follow; QUERY: 0 */
    uint64_t nonce;   /* chosen by the querier, echoed by the answer */
} ns_hdr_t;

static_assert(sizeof(ns_hdr_t) == 16, "name socket header is 16 bytes");

/* Every endpoint with a name socket in this process. */
static pthread_mutex_t ns_lock = PTHREAD_MUTEX_INITIALIZER;
static fab_ep_t *ns_eps;

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
 * for a source, loopback for no node otherwise. */
int fab_resolve_node(const char *node, const char *service, int passive, struct sockaddr_in *sa)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *res;
    int rc;

    if (passive)
        hints.ai_flags = AI_PASSIVE;
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    if (node == NULL && service == NULL)
        return 0;
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

static void ns_register(fab_ep_t *ep)
{
    pthread_mutex_lock(&ns_lock);
    ep->ns_next = ns_eps;
    ns_eps = ep;
    pthread_mutex_unlock(&ns_lock);
}

static void ns_unregister(fab_ep_t *ep)
{
    pthread_mutex_lock(&ns_lock);
    for (fab_ep_t **p = &ns_eps; *p != NULL; p = &(*p)->ns_next) {
        if (*p == ep) {
            *p = ep->ns_next;
            break;
        }
    }
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
    ns_register(ep);
    return 0;
}

void fab_ns_close(fab_ep_t *ep)
{
    if (ep->ns_fd < 0)
        return;
    ns_unregister(ep);
    close(ep->ns_fd);
    ep->ns_fd = -1;
}

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

/* Answers every query waiting on the endpoint's name socket; anything
 * else that arrives there is dropped. Safe from any thread. */
void fab_ns_serve(fab_ep_t *ep)
{
    ns_hdr_t q;
    struct sockaddr_in from;
    socklen_t flen = sizeof(from);
    ssize_t n;

    if (ep->ns_fd < 0)
        return;
    ep->ns_served_us = fab_now_us();
    while ((n = recvfrom(ep->ns_fd, &q, sizeof(q), MSG_DONTWAIT, (struct sockaddr *)&from,
                         &flen)) >= 0) {
        if (n == sizeof(q) && le32toh(q.magic) == NS_MAGIC && q.version == NS_VERSION &&
            q.op == NS_QUERY && from.sin_family == AF_INET)
            ns_answer(ep, &q, &from);
        flen = sizeof(from);
    }
}

static void ns_serve_all(void)
{
    pthread_mutex_lock(&ns_lock);
    for (fab_ep_t *ep = ns_eps; ep != NULL; ep = ep->ns_next)
        fab_ns_serve(ep);
    pthread_mutex_unlock(&ns_lock);
}

/* ------------------------------------------------------------ resolving */

static int ns_query(int fd, const struct sockaddr_in *to, uint64_t nonce)
{
    ns_hdr_t q = {htole32(NS_MAGIC), NS_VERSION, NS_QUERY, 0, nonce};

    return sendto(fd, &q, sizeof(q), MSG_DONTWAIT, (const struct sockaddr *)to, sizeof(*to)) ==
                   sizeof(q) ? 0 : -errno;
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

static int ns_wait_answer(int fd, const struct sockaddr_in *to, void *blob, size_t *len)
{
    unsigned char buf[sizeof(ns_hdr_t) + TMX_ADDRESS_MAX + 1];
    uint64_t nonce = (uint64_t)fab_now_us() ^ ((uint64_t)getpid() << 40) ^ (uintptr_t)buf;
    int64_t end = fab_now_us() + (int64_t)FAB_NS_TIMEOUT_MS * 1000, next = 0;
    struct pollfd pfd = {fd, POLLIN, 0};

    while (fab_now_us() < end) {
        if (fab_now_us() >= next) {
            ns_query(fd, to, nonce);
            next = fab_now_us() + NS_RETRY_MS * 1000;
        }
        ns_serve_all();
        if (poll(&pfd, 1, NS_SLICE_MS) <= 0)
            continue;
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (ns_take_answer(buf, n, nonce, blob, len))
            return 0;
    }
    return -FI_ETIMEDOUT;
}

int fab_ns_resolve(const struct sockaddr_in *to, void *blob, size_t *len)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int ret;

    if (fd < 0) {
        FAB_WARN(FI_LOG_AV, "name resolution: no socket: %s\n", strerror(errno));
        return -FI_EOTHER;
    }
    ret = ns_wait_answer(fd, to, blob, len);
    close(fd);
    if (ret != 0)
        FAB_WARN(FI_LOG_AV, "no tmx endpoint answered at %s:%u within %d ms\n",
                 inet_ntoa(to->sin_addr), ntohs(to->sin_port), FAB_NS_TIMEOUT_MS);
    return ret;
}

int fab_ns_getname(fab_ep_t *ep, void *addr, size_t *addrlen)
{
    char str[64];
    size_t need = sizeof(ep->ns_sa), room = *addrlen;
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
