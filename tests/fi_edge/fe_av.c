/*
 * Address vectors: garbage addresses, a name that looks like a tmx
 * address but is not one, the same address twice, fi_av_remove then a
 * send to the removed fi_addr, removal then insertion again, fi_av_lookup
 * with a short buffer, fi_av_straddr, FI_AV_TABLE and FI_AV_MAP, FI_ADDR_STR.
 */
#include "fe_common.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#define CAPS (FI_TAGGED | FI_MSG | FI_DIRECTED_RECV | FI_SOURCE)
#define T 3000

/* "TMXA", version 2, zeros: 16 bytes, folded as the provider folds names.
 * It passes the provider's check (a TMXA blob of 8 bytes or more) but tmx
 * refuses it (version). */
static void bogus_name(unsigned char *name)
{
    memset(name, 0, FI_NAME_MAX);
    const unsigned char n[] = {7, 'T', 'M', 'X', 'A', 2, 0, 11};
    memcpy(name, n, sizeof(n));
}

static void garbage(void)
{
    fe_t f;
    fe_ep_t a, b;
    unsigned char g[3 * FI_NAME_MAX];
    fi_addr_t fa[3] = {1, 1, 1};
    int errs[3] = {-1, -1, -1};
    size_t len = FI_NAME_MAX;
    int r;

    fe_open(&f, fe_hints(CAPS, FI_THREAD_SAFE), FI_AV_TABLE);
    fe_ep_open(&f, &a, FI_CQ_FORMAT_TAGGED, 0);
    fe_ep_open(&f, &b, FI_CQ_FORMAT_TAGGED, 0);
    for (size_t i = 0; i < sizeof(g); i++)
        g[i] = (unsigned char)(i * 37 + 11);
    g[0] = 200; /* a length byte past the name */
    MUST(fi_getname(&a.ep->fid, g + FI_NAME_MAX, &len));
    g[2 * FI_NAME_MAX] = 0;
    r = fi_av_insert(f.av, g, 3, fa, FI_SYNC_ERR, errs);
    CHECK(r == 1 && fa[0] == FI_ADDR_NOTAVAIL && fa[1] == 0 && fa[2] == FI_ADDR_NOTAVAIL,
          "garbage, name, garbage: %d inserted, fi_addr %llx %llx %llx", r, (unsigned long long)fa[0],
          (unsigned long long)fa[1], (unsigned long long)fa[2]);
    CHECK(errs[0] != 0 && errs[1] == 0 && errs[2] != 0, "FI_SYNC_ERR: %d %d %d", errs[0], errs[1], errs[2]);
    CHECK_RET(fi_av_insert(f.av, g, 1, fa, 0x4000, NULL), -FI_EBADFLAGS);
    CHECK_RET(fi_av_insertsvc(f.av, "127.0.0.1", "1", fa, 0, NULL) < 0, 1);
    fe_ep_close(&a);
    fe_ep_close(&b);
    fe_close(&f);
}

/* A rejected name must not spoil later insertions. */
static void poison_bound(void)
{
    fe_t f;
    fe_ep_t a, b;
    unsigned char bad[FI_NAME_MAX];
    fi_addr_t fa = 0;
    struct fi_cq_tagged_entry e;
    char rb[8];
    int r;

    fe_open(&f, fe_hints(CAPS, FI_THREAD_SAFE), FI_AV_TABLE);
    fe_ep_open(&f, &a, FI_CQ_FORMAT_TAGGED, 0);
    fe_ep_open(&f, &b, FI_CQ_FORMAT_TAGGED, 0);
    bogus_name(bad);
    r = fi_av_insert(f.av, bad, 1, &fa, 0, NULL);
    CHECK(r == 0 && fa == FI_ADDR_NOTAVAIL, "bogus TMXA name: %d (%s), fi_addr %llx", r,
          r < 0 ? fi_strerror(-r) : "", (unsigned long long)fa);
    {
        char name[FI_NAME_MAX];
        size_t len = sizeof(name);
        MUST(fi_getname(&b.ep->fid, name, &len));
        r = fi_av_insert(f.av, name, 1, &b.addr, 0, NULL);
        CHECK(r == 1, "a valid name after the bogus one: %d (%s)", r, r < 0 ? fi_strerror(-r) : "");
    }
    if (r == 1) {
        CHECK_RET(fi_trecv(b.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 1, 0, (void *)1), 0);
        CHECK_RET(fi_tsend(a.ep, "p", 1, NULL, b.addr, 1, (void *)2), 0);
        r = (int)fe_cq_wait(b.cq, &e, NULL, T);
        CHECK(r == 1, "message to it: %d", r);
    }
    fe_drain(a.cq, b.cq, 30);
    fe_ep_close(&a);
    fe_ep_close(&b);
    fe_close(&f);
}

/* The same name inserted before an endpoint is bound. */
static void poison_unbound(void)
{
    fe_t f;
    fe_ep_t a;
    unsigned char bad[FI_NAME_MAX];
    fi_addr_t fa = 0;
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    int r;

    fe_open(&f, fe_hints(CAPS, FI_THREAD_SAFE), FI_AV_TABLE);
    bogus_name(bad);
    r = fi_av_insert(f.av, bad, 1, &fa, 0, NULL);
    CHECK(r == 0, "bogus TMXA name into an AV with no endpoint: %d, fi_addr %llx", r,
          (unsigned long long)fa);
    if (r == 1)
        CHECK_RET(fi_av_remove(f.av, &fa, 1, 0), 0);
    MUST(fi_endpoint(f.domain, f.info, &a.ep, NULL));
    MUST(fi_cq_open(f.domain, &ca, &a.cq, NULL));
    MUST(fi_ep_bind(a.ep, &a.cq->fid, FI_TRANSMIT | FI_RECV));
    r = fi_ep_bind(a.ep, &f.av->fid, 0);
    CHECK(r == 0, "fi_ep_bind of that AV (entry removed): %d (%s)", r, fi_strerror(-r));
    if (r == 0) {
        MUST(fi_enable(a.ep));
        fe_ep_insert(&f, &a);
        CHECK_RET(fi_tinject(a.ep, "x", 1, a.addr, 1), 0);
    }
    fe_ep_close(&a);
    fe_close(&f);
}

/* An address inserted twice, removed twice, and inserted again: in an
 * FI_AV_MAP it gets its fi_addr back, and messages and directed receives
 * work through it; in an FI_AV_TABLE it gets the next index (fi_av(3)),
 * and its messages keep the first insertion's source (fi_tmx(7)). */
static void twice_remove_av(enum fi_av_type type)
{
    fe_t f;
    fe_ep_t a, b;
    char name[FI_NAME_MAX], out[FI_NAME_MAX + 8];
    size_t len = sizeof(name);
    fi_addr_t x1, x2, x3;
    int r;

    fe_open(&f, fe_hints(CAPS, FI_THREAD_SAFE), type);
    fe_ep_open(&f, &a, FI_CQ_FORMAT_TAGGED, 0);
    fe_ep_open(&f, &b, FI_CQ_FORMAT_TAGGED, 0);
    fe_ep_insert(&f, &a);
    MUST(fi_getname(&b.ep->fid, name, &len));
    CHECK_RET(fi_av_insert(f.av, name, 1, &x1, 0, NULL), 1);
    CHECK_RET(fi_av_insert(f.av, name, 1, &x2, 0, NULL), 1);
    CHECK(x1 == x2, "same name twice: %llu %llu", (unsigned long long)x1, (unsigned long long)x2);
    /* lookup with a short buffer: cut, and 0 (fi_av(3): the address "will
     * be truncated", addrlen says the size it needs) */
    len = 10;
    memset(out, 0xa5, sizeof(out));
    CHECK_RET(fi_av_lookup(f.av, x1, out, &len), 0);
    CHECK(len == FI_NAME_MAX, "lookup short buffer: addrlen %zu", len);
    CHECK(memcmp(out, name, 10) == 0 && (unsigned char)out[10] == 0xa5, "lookup short buffer: not cut at 10");
    len = sizeof(out);
    CHECK_RET(fi_av_lookup(f.av, x1, out, &len), 0);
    CHECK(len == FI_NAME_MAX && memcmp(out, name, FI_NAME_MAX) == 0, "lookup");
    len = 0;
    CHECK_RET(fi_av_lookup(f.av, x1, NULL, &len), 0);
    CHECK(len == FI_NAME_MAX, "lookup for the size: addrlen %zu", len);
    len = sizeof(out);
    CHECK_RET(fi_av_lookup(f.av, 999, out, &len) < 0, 1);
    CHECK_RET(fi_av_lookup(f.av, FI_ADDR_NOTAVAIL, out, &len) < 0, 1);
    /* straddr */
    {
        char s[300], t[8];
        size_t sl = sizeof(s), tl = sizeof(t);
        const char *p = fi_av_straddr(f.av, name, s, &sl);
        CHECK(p == s && strlen(s) + 1 == sl && strncmp(s, "tmx://", 6) == 0, "straddr %s len %zu", s, sl);
        p = fi_av_straddr(f.av, name, t, &tl);
        CHECK(tl == sl && t[7] == 0, "straddr short: len %zu (full %zu)", tl, sl);
    }
    /* flags are reserved (fi_av(3)): refused, and nothing removed */
    CHECK_RET(fi_av_remove(f.av, &x1, 1, FI_MORE), -FI_EINVAL);
    /* remove once: still there */
    CHECK_RET(fi_av_remove(f.av, &x1, 1, 0), 0);
    CHECK_RET(fi_tinject(a.ep, "1", 1, x1, 5), 0);
    CHECK_RET(fi_av_remove(f.av, &x1, 1, 0), 0);
    CHECK_RET(fi_av_remove(f.av, &x1, 1, 0) < 0, 1);
    CHECK_RET(fi_tinject(a.ep, "2", 1, x1, 5) < 0, 1);
    CHECK_RET(fi_tsend(a.ep, "2", 1, NULL, x1, 5, NULL) < 0, 1);
    CHECK_RET(fi_send(a.ep, "2", 1, NULL, x1, NULL) < 0, 1);
    CHECK_RET(fi_trecv(a.ep, out, 1, NULL, x1, 5, 0, NULL) < 0, 1);
    len = sizeof(out);
    CHECK_RET(fi_av_lookup(f.av, x1, out, &len) < 0, 1);
    /* insert again after removal: messages from it must carry the new
     * fi_addr, and a receive directed at the new fi_addr must match */
    r = fi_av_insert(f.av, name, 1, &x3, 0, NULL);
    CHECK(r == 1 && x3 == (type == FI_AV_MAP ? x1 : x1 + 1), "insert again after removal: %d, fi_addr %llu (was %llu)",
          r, (unsigned long long)x3, (unsigned long long)x1);
    if (r == 1 && type == FI_AV_MAP) {
        struct fi_cq_tagged_entry e;
        fi_addr_t src = 0;
        char rb[4];
        ssize_t n;
        CHECK_RET(fe_drain(b.cq, NULL, 50) >= 0, 1); /* the message "1" */
        /* b -> a: the source a sees */
        len = sizeof(name);
        CHECK_RET(fi_trecv(a.ep, rb, sizeof(rb), NULL, FI_ADDR_UNSPEC, 6, 0, (void *)1), 0);
        CHECK_RET(fi_tsend(b.ep, "s", 1, NULL, a.addr, 6, (void *)2), 0);
        n = fe_cq_wait(a.cq, &e, &src, T);
        CHECK(n == 1 && src == x3, "source of a message from the re-inserted peer: %llu (want %llu)",
              (unsigned long long)src, (unsigned long long)x3);
        CHECK_RET(fi_trecv(a.ep, rb, sizeof(rb), NULL, x3, 7, 0, (void *)3), 0);
        CHECK_RET(fi_tsend(b.ep, "d", 1, NULL, a.addr, 7, (void *)4), 0);
        n = fe_cq_wait(a.cq, &e, &src, T);
        CHECK(n == 1 && e.op_context == (void *)3, "receive directed at the re-inserted fi_addr: %zd", n);
        if (n != 1)
            fi_cancel(&a.ep->fid, (void *)3);
    }
    fe_drain(a.cq, b.cq, 30);
    fe_ep_close(&a);
    fe_ep_close(&b);
    fe_close(&f);
}

static void table_order(void)
{
    fe_t f;
    fe_ep_t e[4];
    char names[4 * FI_NAME_MAX];
    fi_addr_t fa[4];

    fe_open(&f, fe_hints(CAPS, FI_THREAD_SAFE), FI_AV_TABLE);
    for (int i = 0; i < 4; i++) {
        size_t len = FI_NAME_MAX;
        fe_ep_open(&f, &e[i], FI_CQ_FORMAT_TAGGED, 0);
        MUST(fi_getname(&e[i].ep->fid, names + i * FI_NAME_MAX, &len));
    }
    CHECK_RET(fi_av_insert(f.av, names, 4, fa, 0, NULL), 4);
    CHECK(fa[0] == 0 && fa[1] == 1 && fa[2] == 2 && fa[3] == 3, "FI_AV_TABLE indices %llu %llu %llu %llu",
          (unsigned long long)fa[0], (unsigned long long)fa[1], (unsigned long long)fa[2],
          (unsigned long long)fa[3]);
    /* fi_addr NULL is allowed for FI_AV_TABLE */
    CHECK_RET(fi_av_insert(f.av, names, 1, NULL, 0, NULL), 1);
    for (int i = 0; i < 4; i++)
        fe_ep_close(&e[i]);
    fe_close(&f);
}

static void str_format(void)
{
    struct fi_info *h = fe_hints(CAPS, FI_THREAD_SAFE), *info;
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_av *av;
    struct fi_av_attr aa = {.type = FI_AV_MAP};
    fi_addr_t fa = 0;
    int64_t t0;
    int r;

    h->addr_format = FI_ADDR_STR;
    MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info));
    MUST(fi_fabric(info->fabric_attr, &fab, NULL));
    MUST(fi_domain(fab, info, &dom, NULL));
    MUST(fi_av_open(dom, &aa, &av, NULL));
    t0 = fe_now_ms();
    r = fi_av_insert(av, "hello", 1, &fa, 0, NULL);
    CHECK(r == 0 && fa == FI_ADDR_NOTAVAIL && fe_now_ms() - t0 < 500, "string garbage: %d", r);
    r = fi_av_insert(av, "tmx://zz", 1, &fa, 0, NULL);
    CHECK(r == 0, "tmx://zz: %d", r);
    r = fi_av_insert(av, "tmx://", 1, &fa, 0, NULL);
    CHECK(r == 0, "tmx:// empty: %d", r);
    r = fi_av_insert(av, "fi_sockaddr_in://300.1.1.1:5", 1, &fa, 0, NULL);
    CHECK(r == 0, "bad IPv4: %d", r);
    t0 = fe_now_ms();
    r = fi_av_insert(av, "fi_sockaddr_in://127.0.0.1:9", 1, &fa, FI_SYNC_ERR, &r);
    CHECK(fa == FI_ADDR_NOTAVAIL && fe_now_ms() - t0 < 5000, "refused port: fi_addr %llx after %lld ms",
          (unsigned long long)fa, (long long)(fe_now_ms() - t0));
    MUST(fi_close(&av->fid));
    MUST(fi_close(&dom->fid));
    MUST(fi_close(&fab->fid));
    fi_freeinfo(info);
    fi_freeinfo(h);
}

static void twice_remove_map(void)
{
    twice_remove_av(FI_AV_MAP);
}

static void twice_remove_table(void)
{
    twice_remove_av(FI_AV_TABLE);
}

int main(int argc, char **argv)
{
    static const fe_case_t cases[] = {
        {"garbage", garbage},       {"poison_bound", poison_bound}, {"poison_unbound", poison_unbound},
        {"twice_remove_map", twice_remove_map}, {"twice_remove_table", twice_remove_table}, {"table_order", table_order}, {"str_format", str_format},
    };
    return fe_run(cases, sizeof(cases) / sizeof(cases[0]), argc, argv, 60);
}
