/*
 * The provider's addresses, wait objects and counters through libfabric's
 * API: the addresses a user can name (FI_SOCKADDR_IN, FI_ADDR_STR)
 * resolved by the name sockets, the source address fi_getinfo reports, CQ
 * wait fds with fi_trywait, EQs written by the application, counters of
 * operations that want no CQ entry, and poll sets.
 * Run with FI_PROVIDER_PATH naming the build's fabric/ and FI_PROVIDER=tmx.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "unit.h"
#include <arpa/inet.h>
#include <endian.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#define VER FI_VERSION(1, 17)
#define WAIT_MS 20000

/* One endpoint with everything it needs, in a fabric and domain of its own. */
typedef struct side {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
} side_t;

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct fi_info *hints_new(uint32_t fmt, enum fi_threading threading)
{
    struct fi_info *h = fi_allocinfo();

    h->fabric_attr->prov_name = strdup("tmx");
    h->ep_attr->type = FI_EP_RDM;
    h->caps = FI_TAGGED | FI_MSG;
    h->addr_format = fmt;
    h->domain_attr->threading = threading;
    return h;
}

/* A UDP port nobody uses right now. */
static char *free_port(char *buf)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);

    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    sprintf(buf, "%u", ntohs(sa.sin_port));
    return buf;
}

static void side_open(side_t *s, const char *node, const char *service, uint64_t flags,
                      struct fi_info *h, enum fi_wait_obj wait)
{
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = wait};
    struct fi_av_attr aa = {.type = FI_AV_TABLE};

    assert_int_equal(fi_getinfo(VER, node, service, flags, h, &s->info), 0);
    fi_freeinfo(h);
    assert_int_equal(fi_fabric(s->info->fabric_attr, &s->fabric, NULL), 0);
    assert_int_equal(fi_domain(s->fabric, s->info, &s->domain, NULL), 0);
    assert_int_equal(fi_av_open(s->domain, &aa, &s->av, NULL), 0);
    assert_int_equal(fi_cq_open(s->domain, &ca, &s->cq, NULL), 0);
    assert_int_equal(fi_endpoint(s->domain, s->info, &s->ep, NULL), 0);
    assert_int_equal(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV), 0);
    assert_int_equal(fi_ep_bind(s->ep, &s->av->fid, 0), 0);
    assert_int_equal(fi_enable(s->ep), 0);
}

static void side_close(side_t *s)
{
    assert_int_equal(fi_close(&s->ep->fid), 0);
    assert_int_equal(fi_close(&s->cq->fid), 0);
    assert_int_equal(fi_close(&s->av->fid), 0);
    assert_int_equal(fi_close(&s->domain->fid), 0);
    assert_int_equal(fi_close(&s->fabric->fid), 0);
    fi_freeinfo(s->info);
}

/* Polls both CQs until one completion arrived on each. */
static void both_complete(side_t *a, side_t *b)
{
    struct fi_cq_tagged_entry e;
    int got_a = 0, got_b = 0;
    int64_t end = now_ms() + WAIT_MS;

    while ((!got_a || !got_b) && now_ms() < end) {
        got_a += fi_cq_read(a->cq, &e, 1) == 1;
        got_b += fi_cq_read(b->cq, &e, 1) == 1;
    }
    assert_int_equal(got_a, 1);
    assert_int_equal(got_b, 1);
}

/* a sends 6 bytes to b's entry to, tag tag; b receives them. */
static void send_to(side_t *a, fi_addr_t to, side_t *b, uint64_t tag)
{
    char in[8] = {0};
    int sctx, rctx;

    assert_int_equal(fi_trecv(b->ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, tag, 0, &rctx), 0);
    assert_int_equal(fi_tsend(a->ep, "hello", 6, NULL, to, tag, &sctx), 0);
    both_complete(a, b);
    assert_string_equal(in, "hello");
}

static void test_getinfo_source(void **state)
{
    struct fi_info *fi, *h;
    char port[16];
    struct sockaddr_in *sa;

    /* nothing named: a tmx name, the empty one ("wherever tmx puts it") */
    assert_int_equal(fi_getinfo(VER, NULL, NULL, 0, h = hints_new(0, 0), &fi), 0);
    fi_freeinfo(h);
    assert_int_equal(fi->addr_format, FI_FORMAT_UNSPEC);
    assert_int_equal(fi->src_addrlen, FI_NAME_MAX);
    assert_non_null(fi->src_addr);
    fi_freeinfo(fi);
    /* a service to bind: an IPv4 source with that port */
    assert_int_equal(fi_getinfo(VER, NULL, free_port(port), FI_SOURCE, h = hints_new(0, 0), &fi), 0);
    fi_freeinfo(h);
    assert_int_equal(fi->addr_format, FI_SOCKADDR_IN);
    assert_int_equal(fi->src_addrlen, sizeof(*sa));
    sa = fi->src_addr;
    assert_int_equal(ntohs(sa->sin_port), atoi(port));
    assert_null(fi->dest_addr);
    fi_freeinfo(fi);
    /* a node and service to reach: the destination, and a wildcard source */
    assert_int_equal(fi_getinfo(VER, "127.0.0.1", "4242", 0, h = hints_new(0, 0), &fi), 0);
    fi_freeinfo(h);
    sa = fi->dest_addr;
    assert_int_equal(ntohs(sa->sin_port), 4242);
    assert_int_equal(sa->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
    assert_non_null(fi->src_addr);
    fi_freeinfo(fi);
    /* strings when asked for */
    assert_int_equal(fi_getinfo(VER, "127.0.0.1", "4242", 0, h = hints_new(FI_ADDR_STR, 0), &fi), 0);
    fi_freeinfo(h);
    assert_string_equal(fi->dest_addr, "fi_sockaddr_in://127.0.0.1:4242");
    fi_freeinfo(fi);
}

/* The default mode of fabtests: the client names the server's node and
 * service, the server learns the client's name in a message. */
static void test_inband_sockaddr(void **state)
{
    side_t srv, cli;
    char port[16], name[64];
    size_t len = sizeof(name);
    fi_addr_t to_srv, to_cli;

    side_open(&srv, NULL, free_port(port), FI_SOURCE, hints_new(0, 0), FI_WAIT_NONE);
    side_open(&cli, "127.0.0.1", port, 0, hints_new(0, 0), FI_WAIT_NONE);
    assert_int_equal(cli.info->addr_format, FI_SOCKADDR_IN);
    assert_int_equal(fi_av_insert(cli.av, cli.info->dest_addr, 1, &to_srv, 0, NULL), 1);
    send_to(&cli, to_srv, &srv, 1);
    assert_int_equal(fi_getname(&cli.ep->fid, name, &len), 0);
    assert_int_equal(len, sizeof(struct sockaddr_in));
    assert_int_equal(fi_av_insert(srv.av, name, 1, &to_cli, 0, NULL), 1);
    send_to(&srv, to_cli, &cli, 2);
    len = sizeof(name);
    assert_int_equal(fi_av_lookup(srv.av, to_cli, name, &len), 0);
    assert_int_equal(len, sizeof(struct sockaddr_in));
    side_close(&cli);
    side_close(&srv);
}

/* fi_av_insertsvc takes node and service as fi_getinfo does (or an
 * FI_ADDR_STR node with no service), in an AV of either IPv4 format; a
 * name nobody answers at is not inserted. */
static void test_insertsvc(void **state)
{
    side_t srv, cli, str;
    char port[16], other[16], node[64];
    fi_addr_t to_srv = 0, none = 0;
    int err = 0;

    side_open(&srv, NULL, free_port(port), FI_SOURCE, hints_new(0, 0), FI_WAIT_NONE);
    side_open(&cli, NULL, NULL, 0, hints_new(FI_SOCKADDR_IN, 0), FI_WAIT_NONE);
    assert_int_equal(fi_av_insertsvc(cli.av, "127.0.0.1", port, &to_srv, 0, NULL), 1);
    send_to(&cli, to_srv, &srv, 1);
    assert_int_equal(fi_av_insertsvc(cli.av, "127.0.0.1", free_port(other), &none, FI_SYNC_ERR,
                                     &err), 0);
    assert_true(none == FI_ADDR_NOTAVAIL);
    assert_int_equal(err, FI_ECONNREFUSED);
    assert_int_equal(fi_av_insertsvc(cli.av, "no-such-host.invalid", "1", &none, 0, NULL), 0);
    assert_true(none == FI_ADDR_NOTAVAIL);
    side_open(&str, NULL, NULL, 0, hints_new(FI_ADDR_STR, 0), FI_WAIT_NONE);
    snprintf(node, sizeof(node), "fi_sockaddr_in://127.0.0.1:%s", port);
    assert_int_equal(fi_av_insertsvc(str.av, node, NULL, &to_srv, 0, NULL), 1);
    send_to(&str, to_srv, &srv, 2);
    side_close(&str);
    side_close(&cli);
    side_close(&srv);
}

/* fi_loopback's way: the source fi_getinfo reports names the endpoint
 * opened with it, and inserting it reaches the endpoint itself. */
static void test_loopback_source(void **state)
{
    side_t s;
    char port[16];
    fi_addr_t self;
    char in[8] = {0};
    int sctx, rctx;

    side_open(&s, "127.0.0.1", free_port(port), FI_SOURCE, hints_new(0, 0), FI_WAIT_NONE);
    assert_non_null(s.info->src_addr);
    assert_int_equal(fi_av_insert(s.av, s.info->src_addr, 1, &self, 0, NULL), 1);
    assert_int_equal(fi_trecv(s.ep, in, sizeof(in), NULL, self, 4, 0, &rctx), 0);
    assert_int_equal(fi_tsend(s.ep, "self", 5, NULL, self, 4, &sctx), 0);
    struct fi_cq_tagged_entry e[2];
    int got = 0;
    int64_t end = now_ms() + WAIT_MS;
    while (got < 2 && now_ms() < end) {
        ssize_t n = fi_cq_read(s.cq, &e[got], 2 - got);
        got += n > 0 ? (int)n : 0;
    }
    assert_int_equal(got, 2);
    assert_string_equal(in, "self");
    side_close(&s);
}

static void test_addr_str(void **state)
{
    side_t a, b;
    char name[128], str[128];
    size_t len = sizeof(name), slen = sizeof(str);
    fi_addr_t to_b;

    side_open(&a, NULL, NULL, 0, hints_new(FI_ADDR_STR, 0), FI_WAIT_NONE);
    side_open(&b, NULL, NULL, 0, hints_new(FI_ADDR_STR, 0), FI_WAIT_NONE);
    assert_int_equal(fi_getname(&b.ep->fid, name, &len), 0);
    assert_int_equal(len, strlen(name) + 1);
    assert_memory_equal(name, "fi_sockaddr_in://", 17);
    assert_int_equal(fi_av_insert(a.av, name, 1, &to_b, 0, NULL), 1);
    send_to(&a, to_b, &b, 3);
    fi_av_straddr(a.av, name, str, &slen);
    assert_string_equal(str, name);
    /* junk is refused, with no entry made */
    assert_int_equal(fi_av_insert(a.av, "fi_sockaddr_in://1.2.3:x", 1, &to_b, 0, NULL), 0);
    assert_int_equal(to_b, FI_ADDR_NOTAVAIL);
    side_close(&a);
    side_close(&b);
}

/* A peer that asked us for our address and exited: its name is still
 * inserted, from what its query announced (no one is left to answer). */
static void test_announced_peer_gone(void **state)
{
    side_t srv, cli;
    char port[16], name[64];
    int pipefd[2], status;
    fi_addr_t a;
    int64_t t0;
    pid_t pid;

    side_open(&srv, NULL, free_port(port), FI_SOURCE, hints_new(0, 0), FI_WAIT_NONE);
    assert_int_equal(pipe(pipefd), 0);
    if ((pid = fork()) == 0) {
        size_t len = sizeof(name);
        alarm(30);
        side_open(&cli, "127.0.0.1", port, 0, hints_new(0, 0), FI_WAIT_NONE);
        if (fi_av_insert(cli.av, cli.info->dest_addr, 1, &a, 0, NULL) != 1 ||
            fi_getname(&cli.ep->fid, name, &len) != 0 || write(pipefd[1], name, len) != (ssize_t)len)
            _exit(2);
        _exit(0);
    }
    assert_int_equal(read(pipefd[0], name, sizeof(struct sockaddr_in)), sizeof(struct sockaddr_in));
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(WEXITSTATUS(status), 0);
    t0 = now_ms();
    assert_int_equal(fi_av_insert(srv.av, name, 1, &a, 0, NULL), 1);
    assert_true(now_ms() - t0 < 1000);
    close(pipefd[0]), close(pipefd[1]);
    side_close(&srv);
}

/* The name socket's wire format, as a peer that is not the provider
 * writes it (fab_name.c): a 16-byte header, then for a query an 8-byte
 * announcement and the announced tmx address. */
typedef struct ns_wire {
    uint32_t magic;
    uint8_t version, op;
    uint16_t len;
    uint64_t nonce;
} ns_wire_t;

enum { NS_WIRE_MAGIC = 0x4e584d54, NS_WIRE_QUERY = 1, NS_WIRE_ANSWER = 2 };

static void ns_send_query(int fd, const struct sockaddr_in *to, uint32_t ip, uint16_t port,
                          const void *blob, size_t blen)
{
    unsigned char out[512];
    ns_wire_t q = {htole32(NS_WIRE_MAGIC), 1, NS_WIRE_QUERY, htole16((uint16_t)blen), 7};
    uint32_t an[2] = {ip, (uint32_t)port}; /* ip, port (network order), reserved zero */

    memcpy(out, &q, sizeof(q));
    memcpy(out + sizeof(q), an, sizeof(an));
    if (blen > 0)
        memcpy(out + sizeof(q) + sizeof(an), blob, blen);
    assert_int_equal(sendto(fd, out, sizeof(q) + sizeof(an) + blen, 0, (const struct sockaddr *)to,
                            sizeof(*to)),
                     (ssize_t)(sizeof(q) + sizeof(an) + blen));
}

/* Waits for a datagram on fd, up to WAIT_MS; returns its length. */
static ssize_t recv_wait(int fd, void *buf, size_t len)
{
    struct pollfd pfd = {fd, POLLIN, 0};

    assert_int_equal(poll(&pfd, 1, WAIT_MS), 1);
    return recv(fd, buf, len, 0);
}

typedef struct insert_job {
    side_t *side;
    struct sockaddr_in name;
    fi_addr_t addr;
    int ret;
} insert_job_t;

static void *insert_thread(void *arg)
{
    insert_job_t *j = arg;

    j->ret = fi_av_insert(j->side->av, &j->name, 1, &j->addr, 0, NULL);
    return NULL;
}

/* An insertion of a name whose owner does not answer (busy, then gone)
 * while, during the wait, the owner asks us and announces itself: the
 * insertion takes what it announced once its port is refused, instead of
 * waiting out the limit and failing (an fi_rdm client that resolved the
 * server, sent and exited before its name thread could answer). */
static void test_announced_during_insert(void **state)
{
    side_t srv, b;
    struct sockaddr_in srv_name, b_name, fake = {.sin_family = AF_INET};
    size_t len = sizeof(srv_name);
    unsigned char buf[512];
    socklen_t flen = sizeof(fake);
    insert_job_t job = {.side = &srv};
    char port[16];
    pthread_t t;
    ssize_t n;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);

    side_open(&srv, NULL, free_port(port), FI_SOURCE, hints_new(0, 0), FI_WAIT_NONE);
    side_open(&b, NULL, free_port(port), FI_SOURCE, hints_new(0, 0), FI_WAIT_NONE);
    assert_int_equal(fi_getname(&srv.ep->fid, &srv_name, &len), 0);
    len = sizeof(b_name);
    assert_int_equal(fi_getname(&b.ep->fid, &b_name, &len), 0);
    /* the silent owner of a name: a socket that never answers */
    fake.sin_addr = srv_name.sin_addr;
    assert_int_equal(bind(fd, (struct sockaddr *)&fake, sizeof(fake)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&fake, &flen), 0);
    job.name = fake;
    assert_int_equal(pthread_create(&t, NULL, insert_thread, &job), 0);
    n = recv_wait(fd, buf, sizeof(buf)); /* srv asks it, and waits */
    assert_true(n >= (ssize_t)sizeof(ns_wire_t));
    /* it learns a tmx address (b's, asking b anonymously) and announces it to srv */
    ns_send_query(fd, &b_name, 0, 0, NULL, 0);
    do
        n = recv_wait(fd, buf, sizeof(buf));
    while (n >= 6 && buf[5] != NS_WIRE_ANSWER);
    assert_true(n > (ssize_t)sizeof(ns_wire_t));
    ns_send_query(fd, &srv_name, fake.sin_addr.s_addr, fake.sin_port, buf + sizeof(ns_wire_t),
                  (size_t)n - sizeof(ns_wire_t));
    do
        n = recv_wait(fd, buf, sizeof(buf));
    while (n >= 6 && buf[5] != NS_WIRE_ANSWER);
    close(fd); /* and it is gone: its port is refused from now on */
    pthread_join(t, NULL);
    assert_int_equal(job.ret, 1);
    send_to(&srv, job.addr, &b, 4); /* the name leads to b */
    side_close(&srv);
    side_close(&b);
}

/* A query whose announced tmx address is longer than any tmx address
 * (TMX_ADDRESS_MAX, 256 bytes) is not a query: it is dropped, unanswered
 * and unlearned (kept, its 257 bytes overran the 256 the name thread
 * holds), while a well-formed query still gets its answer. */
static void test_query_oversized_announcement(void **state)
{
    side_t srv;
    struct sockaddr_in srv_name, me = {.sin_family = AF_INET};
    size_t len = sizeof(srv_name);
    unsigned char blob[257], buf[512];
    struct pollfd pfd;
    char port[16];
    ssize_t n;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);

    side_open(&srv, NULL, free_port(port), FI_SOURCE, hints_new(0, 0), FI_WAIT_NONE);
    assert_int_equal(fi_getname(&srv.ep->fid, &srv_name, &len), 0);
    me.sin_addr = srv_name.sin_addr;
    assert_int_equal(bind(fd, (struct sockaddr *)&me, sizeof(me)), 0);
    memset(blob, 0x5a, sizeof(blob));
    ns_send_query(fd, &srv_name, srv_name.sin_addr.s_addr, htons(9), blob, sizeof(blob));
    pfd = (struct pollfd){fd, POLLIN, 0};
    assert_int_equal(poll(&pfd, 1, 500), 0);
    ns_send_query(fd, &srv_name, 0, 0, NULL, 0);
    n = recv_wait(fd, buf, sizeof(buf));
    assert_true(n > (ssize_t)sizeof(ns_wire_t) && buf[5] == NS_WIRE_ANSWER);
    close(fd);
    side_close(&srv);
}

/* One fi_av_insert of three IPv4 names, the middle ones naming ports
 * nobody listens on: the live name is inserted and usable, the others
 * fail each with its own error (FI_SYNC_ERR) and FI_ADDR_NOTAVAIL, and
 * the call waits for the refused ports once, not once per name, and not
 * the whole answer limit (10 s each before). */
static void test_insert_refused_names(void **state)
{
    side_t srv, b;
    struct sockaddr_in names[4];
    size_t len = sizeof(names[0]);
    fi_addr_t out[4];
    int errs[4] = {0};
    char port[16];
    int64_t t0;

    side_open(&srv, NULL, free_port(port), FI_SOURCE, hints_new(0, 0), FI_WAIT_NONE);
    side_open(&b, NULL, free_port(port), FI_SOURCE, hints_new(0, 0), FI_WAIT_NONE);
    assert_int_equal(fi_getname(&b.ep->fid, &names[0], &len), 0);
    for (int i = 1; i < 3; i++) {
        names[i] = names[0];
        names[i].sin_port = htons((uint16_t)atoi(free_port(port)));
    }
    names[3] = names[0];
    t0 = now_ms();
    assert_int_equal(fi_av_insert(srv.av, names, 4, out, FI_SYNC_ERR, errs), 2);
    assert_true(now_ms() - t0 < 2 * 2000);
    assert_int_equal(errs[0], 0);
    assert_int_equal(errs[1], FI_ECONNREFUSED);
    assert_int_equal(errs[2], FI_ECONNREFUSED);
    assert_int_equal(errs[3], 0);
    assert_true(out[1] == FI_ADDR_NOTAVAIL && out[2] == FI_ADDR_NOTAVAIL);
    assert_true(out[0] == out[3]);
    send_to(&srv, out[0], &b, 5);
    side_close(&srv);
    side_close(&b);
}

typedef struct slow_insert {
    side_t *s;
    struct sockaddr_in name;
    int ret;
} slow_insert_t;

static void *insert_slowly(void *arg)
{
    slow_insert_t *si = arg;
    fi_addr_t out;

    si->ret = fi_av_insert(si->s->av, &si->name, 1, &out, 0, NULL);
    return NULL;
}

/* An FI_THREAD_SAFE domain: while one thread's fi_av_insert waits for
 * an IPv4 name's owner (here a refused port: about 2 s), the other
 * threads' sends and CQ reads in the domain go on. */
static void test_insert_wait_unlocked(void **state)
{
    side_t a, b;
    slow_insert_t si;
    struct sockaddr_in nb;
    size_t len = sizeof(nb);
    fi_addr_t to_b;
    pthread_t t;
    char port[16];
    int64_t t0;

    side_open(&a, NULL, free_port(port), FI_SOURCE, hints_new(0, FI_THREAD_SAFE), FI_WAIT_NONE);
    side_open(&b, NULL, free_port(port), FI_SOURCE, hints_new(0, FI_THREAD_SAFE), FI_WAIT_NONE);
    assert_int_equal(fi_getname(&b.ep->fid, &nb, &len), 0);
    assert_int_equal(fi_av_insert(a.av, &nb, 1, &to_b, 0, NULL), 1);
    si.s = &a;
    si.name = nb;
    si.name.sin_port = htons((uint16_t)atoi(free_port(port)));
    t0 = now_ms();
    assert_int_equal(pthread_create(&t, NULL, insert_slowly, &si), 0);
    usleep(200000);
    send_to(&a, to_b, &b, 7);
    assert_true(now_ms() - t0 < 1000);
    pthread_join(t, NULL);
    assert_int_equal(si.ret, 0);
    assert_true(now_ms() - t0 >= 1000); /* the insert did wait meanwhile */
    side_close(&a);
    side_close(&b);
}

typedef struct delayed_send {
    side_t *from;
    fi_addr_t to;
    int ctx;
} delayed_send_t;

static void *send_later(void *arg)
{
    delayed_send_t *d = arg;
    struct fi_cq_tagged_entry e;
    int64_t end = now_ms() + WAIT_MS;

    usleep(200000);
    if (fi_tsend(d->from->ep, "late", 5, NULL, d->to, 9, &d->ctx) != 0)
        return (void *)1;
    while (fi_cq_read(d->from->cq, &e, 1) != 1 && now_ms() < end)
        ;
    return NULL;
}

/* An event loop's wait: fi_trywait, then poll() on the CQ's fd, which
 * becomes readable when a message completes a receive. */
static void wait_fd_case(enum fi_threading threading)
{
    side_t a, b;
    char name[FI_NAME_MAX], buf[8];
    size_t len = sizeof(name);
    struct fid *fids[1];
    struct fi_cq_tagged_entry e;
    struct pollfd pfd = {.events = POLLIN};
    delayed_send_t d;
    pthread_t t;
    int rctx;

    side_open(&a, NULL, NULL, 0, hints_new(0, FI_THREAD_SAFE), FI_WAIT_NONE);
    side_open(&b, NULL, NULL, 0, hints_new(0, threading), FI_WAIT_FD);
    assert_int_equal(fi_control(&b.cq->fid, FI_GETWAIT, &pfd.fd), 0);
    assert_int_equal(fi_getname(&b.ep->fid, name, &len), 0);
    assert_int_equal(fi_av_insert(a.av, name, 1, &d.to, 0, NULL), 1);
    d.from = &a;
    fids[0] = &b.cq->fid;
    assert_int_equal(fi_trecv(b.ep, buf, sizeof(buf), NULL, FI_ADDR_UNSPEC, 9, 0, &rctx), 0);
    assert_int_equal(fi_trywait(b.fabric, fids, 1), 0);
    assert_int_equal(poll(&pfd, 1, 50), 0); /* nothing yet */
    assert_int_equal(pthread_create(&t, NULL, send_later, &d), 0);
    assert_int_equal(poll(&pfd, 1, WAIT_MS), 1);
    assert_int_equal(fi_cq_read(b.cq, &e, 1), 1);
    assert_ptr_equal(e.op_context, &rctx);
    assert_string_equal(buf, "late");
    pthread_join(t, NULL);
    /* a completion waiting: no sleep allowed */
    assert_int_equal(fi_trecv(b.ep, buf, sizeof(buf), NULL, FI_ADDR_UNSPEC, 10, 0, &rctx), 0);
    assert_int_equal(fi_tinject(a.ep, "now", 4, d.to, 10), 0);
    int64_t end = now_ms() + WAIT_MS;
    while (fi_trywait(b.fabric, fids, 1) == 0 && now_ms() < end)
        poll(&pfd, 1, 100);
    assert_int_equal(fi_trywait(b.fabric, fids, 1), -FI_EAGAIN);
    assert_int_equal(fi_cq_read(b.cq, &e, 1), 1);
    side_close(&a);
    side_close(&b);
}

static void test_wait_fd(void **state)
{
    wait_fd_case(FI_THREAD_SAFE);
}

static void test_wait_fd_thread_domain(void **state)
{
    wait_fd_case(FI_THREAD_DOMAIN);
}

static void test_eq_write(void **state)
{
    side_t s;
    struct fid_eq *eq;
    struct fi_eq_attr ea = {.wait_obj = FI_WAIT_FD};
    struct fi_eq_entry in = {.context = &s}, out;
    struct pollfd pfd = {.events = POLLIN};
    uint32_t ev = 0;
    struct fid *fids[1];
    int64_t t0;

    side_open(&s, NULL, NULL, 0, hints_new(0, 0), FI_WAIT_NONE);
    assert_int_equal(fi_eq_open(s.fabric, &ea, &eq, NULL), 0);
    assert_int_equal(fi_control(&eq->fid, FI_GETWAIT, &pfd.fd), 0);
    fids[0] = &eq->fid;
    assert_int_equal(fi_trywait(s.fabric, fids, 1), 0);
    assert_int_equal(fi_eq_read(eq, &ev, &out, sizeof(out), 0), -FI_EAGAIN);
    t0 = now_ms();
    assert_int_equal(fi_eq_sread(eq, &ev, &out, sizeof(out), 100, 0), -FI_EAGAIN);
    assert_true(now_ms() - t0 >= 90);
    assert_int_equal(fi_eq_write(eq, FI_NOTIFY, &in, sizeof(in), 0), sizeof(in));
    assert_int_equal(poll(&pfd, 1, 0), 1);
    assert_int_equal(fi_trywait(s.fabric, fids, 1), -FI_EAGAIN);
    assert_int_equal(fi_eq_read(eq, &ev, &out, sizeof(out), FI_PEEK), sizeof(out));
    assert_int_equal(fi_eq_sread(eq, &ev, &out, sizeof(out), -1, 0), sizeof(out));
    assert_int_equal(ev, FI_NOTIFY);
    assert_ptr_equal(out.context, &s);
    assert_int_equal(poll(&pfd, 1, 0), 0);
    assert_int_equal(fi_close(&eq->fid), 0);
    side_close(&s);
}

/* Sends that want no CQ entry (selective completion) are counted. */
static void test_counters(void **state)
{
    side_t a, b;
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fid_cntr *tx, *rx;
    struct fi_cntr_attr ca = {.events = FI_CNTR_EVENTS_COMP};
    struct fi_cq_attr qa = {.format = FI_CQ_FORMAT_TAGGED};
    struct fi_cq_tagged_entry e;
    char name[FI_NAME_MAX], buf[3][8];
    size_t len = sizeof(name);
    fi_addr_t to_b;
    struct fid_poll *ps;
    struct fi_poll_attr pa = {0};
    void *ctx[4];

    side_open(&b, NULL, NULL, 0, hints_new(0, 0), FI_WAIT_NONE);
    side_open(&a, NULL, NULL, 0, hints_new(0, 0), FI_WAIT_NONE);
    /* a second endpoint in a's domain, its sends counted and not reported */
    assert_int_equal(fi_endpoint(a.domain, a.info, &ep, NULL), 0);
    assert_int_equal(fi_cq_open(a.domain, &qa, &cq, NULL), 0);
    assert_int_equal(fi_cntr_open(a.domain, &ca, &tx, NULL), 0);
    assert_int_equal(fi_cntr_open(b.domain, &ca, &rx, &rx), 0);
    assert_int_equal(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION), 0);
    assert_int_equal(fi_ep_bind(ep, &tx->fid, FI_SEND), 0);
    assert_int_equal(fi_ep_bind(ep, &a.av->fid, 0), 0);
    assert_int_equal(fi_enable(ep), 0);
    assert_int_equal(fi_ep_bind(b.ep, &rx->fid, FI_RECV), 0);
    assert_int_equal(fi_poll_open(b.domain, &pa, &ps), 0);
    assert_int_equal(fi_poll_add(ps, &rx->fid, 0), 0);
    assert_int_equal(fi_poll(ps, ctx, 4), 0);
    assert_int_equal(fi_getname(&b.ep->fid, name, &len), 0);
    assert_int_equal(fi_av_insert(a.av, name, 1, &to_b, 0, NULL), 1);
    for (int i = 0; i < 3; i++)
        assert_int_equal(fi_trecv(b.ep, buf[i], 8, NULL, FI_ADDR_UNSPEC, 5, 0, NULL), 0);
    for (int i = 0; i < 3; i++) {
        struct iovec iov = {"count", 6};
        struct fi_msg_tagged m = {.msg_iov = &iov, .iov_count = 1, .addr = to_b, .tag = 5};
        assert_int_equal(fi_tsendmsg(ep, &m, 0), 0);
    }
    assert_int_equal(fi_cntr_wait(tx, 3, WAIT_MS), 0);
    assert_int_equal(fi_cntr_wait(rx, 3, WAIT_MS), 0);
    assert_int_equal(fi_cntr_readerr(tx), 0);
    assert_int_equal(fi_cq_read(cq, &e, 1), -FI_EAGAIN);
    assert_int_equal(fi_poll(ps, ctx, 4), 1);
    assert_ptr_equal(ctx[0], &rx);
    assert_int_equal(fi_poll(ps, ctx, 4), 0);
    assert_int_equal(fi_cntr_wait(rx, 4, 50), -FI_ETIMEDOUT);
    assert_int_equal(fi_poll_del(ps, &rx->fid, 0), 0);
    assert_int_equal(fi_close(&ps->fid), 0);
    assert_int_equal(fi_close(&ep->fid), 0);
    assert_int_equal(fi_close(&b.ep->fid), 0);
    assert_int_equal(fi_close(&tx->fid), 0);
    assert_int_equal(fi_close(&rx->fid), 0);
    assert_int_equal(fi_close(&cq->fid), 0);
    b.ep = NULL;
    assert_int_equal(fi_endpoint(b.domain, b.info, &b.ep, NULL), 0);
    side_close(&a);
    side_close(&b);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_getinfo_source),
        cmocka_unit_test(test_inband_sockaddr),
        cmocka_unit_test(test_insertsvc),
        cmocka_unit_test(test_loopback_source),
        cmocka_unit_test(test_addr_str),
        cmocka_unit_test(test_announced_peer_gone),
        cmocka_unit_test(test_announced_during_insert),
        cmocka_unit_test(test_insert_refused_names),
        cmocka_unit_test(test_insert_wait_unlocked),
        cmocka_unit_test(test_query_oversized_announcement),
        cmocka_unit_test(test_wait_fd),
        cmocka_unit_test(test_wait_fd_thread_domain),
        cmocka_unit_test(test_eq_write),
        cmocka_unit_test(test_counters),
    };

    return UNIT_MAIN(argc, argv, tests);
}
