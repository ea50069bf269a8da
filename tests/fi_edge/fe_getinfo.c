/*
 * fi_getinfo with hints the provider cannot meet (each must be refused
 * with -FI_ENODATA, not answered with an info that differs), and with
 * FI_SOURCE, node and service strings.
 */
#include "fe_common.h"

#include <arpa/inet.h>
#include <netinet/in.h>

static struct fi_info *base(void)
{
    struct fi_info *h = fi_allocinfo();
    h->fabric_attr->prov_name = strdup("tmx");
    h->caps = FI_TAGGED | FI_MSG;
    return h;
}

static void refused(const char *what, struct fi_info *h)
{
    struct fi_info *info = NULL;
    int r = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info);
    CHECK(r == -FI_ENODATA, "%-44s -> %d (%s)%s", what, r, fi_strerror(-r),
          r == 0 ? " an info was returned" : "");
    if (r == 0)
        fi_freeinfo(info);
    fi_freeinfo(h);
}

static void accepted(const char *what, struct fi_info *h, struct fi_info **out)
{
    struct fi_info *info = NULL;
    int r = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info);
    CHECK(r == 0, "%-44s -> %d (%s)", what, r, fi_strerror(-r));
    fi_freeinfo(h);
    if (out)
        *out = r == 0 ? info : NULL;
    else if (r == 0)
        fi_freeinfo(info);
}

static void refusals(void)
{
    struct fi_info *h;

#define REF(what, stmt) do { h = base(); stmt; refused(what, h); } while (0)
    REF("caps FI_RMA", h->caps |= FI_RMA);
    REF("caps FI_ATOMIC", h->caps |= FI_ATOMIC);
    REF("caps FI_HMEM", h->caps |= FI_HMEM);
    REF("caps FI_TRIGGER", h->caps |= FI_TRIGGER);
    REF("caps FI_NAMED_RX_CTX", h->caps |= FI_NAMED_RX_CTX);
    REF("caps FI_SOURCE_ERR", h->caps |= FI_SOURCE_ERR);
    REF("caps FI_RMA_EVENT", h->caps |= FI_RMA_EVENT);
    REF("caps FI_COLLECTIVE", h->caps |= FI_COLLECTIVE);
    REF("caps FI_VARIABLE_MSG", h->caps |= FI_VARIABLE_MSG);
    REF("domain caps FI_SHARED_AV", h->domain_attr->caps |= FI_SHARED_AV);
    REF("ep type FI_EP_MSG", h->ep_attr->type = FI_EP_MSG);
    REF("ep type FI_EP_DGRAM", h->ep_attr->type = FI_EP_DGRAM);
    REF("ep type 77", h->ep_attr->type = 77);
    REF("data progress FI_PROGRESS_AUTO", h->domain_attr->data_progress = FI_PROGRESS_AUTO);
    REF("control progress FI_PROGRESS_AUTO", h->domain_attr->control_progress = FI_PROGRESS_AUTO);
    REF("progress 77", h->domain_attr->data_progress = 77);
    REF("threading 77", h->domain_attr->threading = 77);
    REF("av_type 77", h->domain_attr->av_type = 77);
    REF("resource_mgmt 77", h->domain_attr->resource_mgmt = 77);
    REF("addr_format FI_SOCKADDR_IN6", h->addr_format = FI_SOCKADDR_IN6);
    REF("addr_format FI_SOCKADDR_IB", h->addr_format = FI_SOCKADDR_IB);
    REF("addr_format FI_ADDR_PSMX2", h->addr_format = FI_ADDR_PSMX2);
    REF("addr_format 999", h->addr_format = 999);
    /* Not refused, on purpose: a tag format wider than the 63 bits of an
     * endpoint with both FI_MSG and FI_TAGGED (clients ask for 64 and
     * read the answer, 0x5555...: refusing would turn them away), and
     * mr_key_size or mr_iov_limit (no registration is needed: mr_mode 0) */
    REF("max_msg_size 2^41", h->ep_attr->max_msg_size = 1ULL << 41);
    REF("ep protocol FI_PROTO_SOCK_TCP", h->ep_attr->protocol = FI_PROTO_SOCK_TCP);
    REF("ep auth_key_size 16", h->ep_attr->auth_key_size = 16);
    REF("domain auth_key_size 16", h->domain_attr->auth_key_size = 16);
    REF("msg_prefix_size 8", h->ep_attr->msg_prefix_size = 8);
    REF("tx iov_limit 2", h->tx_attr->iov_limit = 2);
    REF("tx inject_size 8192", h->tx_attr->inject_size = 8192);
    REF("tx size 1M", h->tx_attr->size = 1 << 20);
    REF("tx msg_order FI_ORDER_RAW", h->tx_attr->msg_order = FI_ORDER_RAW);
    REF("tx comp_order FI_ORDER_STRICT", h->tx_attr->comp_order = FI_ORDER_STRICT);
    REF("tx op_flags FI_MULTICAST", h->tx_attr->op_flags = FI_MULTICAST);
    REF("rx iov_limit 4", h->rx_attr->iov_limit = 4);
    REF("rx total_buffered_recv", h->rx_attr->total_buffered_recv = 4096);
    REF("rx comp_order FI_ORDER_DATA", h->rx_attr->comp_order = FI_ORDER_DATA);
    REF("cq_data_size 16", h->domain_attr->cq_data_size = 16);
    REF("cq_cnt 1M", h->domain_attr->cq_cnt = 1 << 20);
    REF("ep_cnt 1M", h->domain_attr->ep_cnt = 1 << 20);
    REF("max_ep_tx_ctx 2", h->domain_attr->max_ep_tx_ctx = 2);
    REF("max_ep_srx_ctx 1", h->domain_attr->max_ep_srx_ctx = 1);
    REF("tx_ctx_cnt FI_SHARED_CONTEXT", h->ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT);
    REF("domain name foo", h->domain_attr->name = strdup("foo"));
    REF("fabric name foo", h->fabric_attr->name = strdup("foo"));
    REF("prov name verbs", (free(h->fabric_attr->prov_name), h->fabric_attr->prov_name = strdup("verbs")));
    REF("FI_MULTI_RECV|FI_DIRECTED_RECV", h->caps |= FI_MULTI_RECV | FI_DIRECTED_RECV);
#undef REF
}

static void acceptances(void)
{
    struct fi_info *h, *i;

    h = base();
    h->mode = FI_CONTEXT | FI_CONTEXT2 | FI_MSG_PREFIX | FI_RX_CQ_DATA;
    accepted("mode bits the app supports", h, &i);
    if (i) {
        CHECK(i->mode == 0 || !(i->mode & FI_MSG_PREFIX) || i->ep_attr->msg_prefix_size > 0,
              "mode 0x%llx", (unsigned long long)i->mode);
        fi_freeinfo(i);
    }
    h = base();
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                              FI_MR_ENDPOINT | FI_MR_RAW;
    accepted("mr_mode with every bit", h, NULL);
    h = base();
    h->domain_attr->threading = FI_THREAD_DOMAIN;
    accepted("threading FI_THREAD_DOMAIN", h, &i);
    if (i) {
        CHECK(i->domain_attr->threading == FI_THREAD_DOMAIN, "threading %d", i->domain_attr->threading);
        fi_freeinfo(i);
    }
    h = base();
    h->domain_attr->av_type = FI_AV_TABLE;
    accepted("av_type FI_AV_TABLE", h, &i);
    if (i) {
        CHECK(i->domain_attr->av_type == FI_AV_TABLE, "av_type %d", i->domain_attr->av_type);
        fi_freeinfo(i);
    }
    h = base();
    h->tx_attr->op_flags = FI_MATCH_COMPLETE;
    accepted("tx op_flags FI_MATCH_COMPLETE (done per send)", h, &i);
    if (i) {
        CHECK(i->tx_attr->op_flags & FI_MATCH_COMPLETE, "tx op_flags 0x%llx",
              (unsigned long long)i->tx_attr->op_flags);
        fi_freeinfo(i);
    }
    h = base();
    h->caps = FI_TAGGED;
    h->ep_attr->mem_tag_format = ~0ULL;
    accepted("FI_TAGGED alone with a 64-bit tag format", h, NULL);
    h = base();
    h->caps = FI_DIRECTED_RECV;
    accepted("caps FI_DIRECTED_RECV alone", h, &i);
    if (i) {
        CHECK(i->caps & (FI_TAGGED | FI_MSG), "caps with FI_DIRECTED_RECV alone: 0x%llx: a primary cap",
              (unsigned long long)i->caps);
        fi_freeinfo(i);
    }
    h = base();
    h->caps = FI_TAGGED;
    accepted("caps FI_TAGGED", h, &i);
    if (i) {
        CHECK(!(i->caps & FI_MSG), "FI_TAGGED asked: caps 0x%llx", (unsigned long long)i->caps);
        CHECK(i->ep_attr->mem_tag_format == 0xaaaaaaaaaaaaaaaaULL, "tag format %llx",
              (unsigned long long)i->ep_attr->mem_tag_format);
        fi_freeinfo(i);
    }
    /* a NULL hints */
    {
        struct fi_info *all = NULL;
        int r = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, NULL, &all);
        CHECK(r == 0, "NULL hints -> %d", r);
        fi_freeinfo(all);
    }
}

static void nodes(void)
{
    struct fi_info *h, *i = NULL;
    int r;

    h = base();
    r = fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", "33345", FI_SOURCE, h, &i);
    CHECK(r == 0, "FI_SOURCE 127.0.0.1:33345 -> %d", r);
    if (r == 0) {
        struct sockaddr_in *sa = i->src_addr;
        CHECK(i->addr_format == FI_SOCKADDR_IN && i->src_addrlen == sizeof(*sa) &&
                  sa->sin_port == htons(33345) && sa->sin_addr.s_addr == htonl(INADDR_LOOPBACK),
              "src_addr of FI_SOURCE node/service");
        CHECK(i->dest_addr == NULL, "no dest_addr with FI_SOURCE");
        fi_freeinfo(i);
    }
    i = NULL;
    r = fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", "33345", 0, h, &i);
    CHECK(r == 0, "dest 127.0.0.1:33345 -> %d", r);
    if (r == 0) {
        struct sockaddr_in *sa = i->dest_addr;
        CHECK(sa && i->dest_addrlen == sizeof(*sa) && sa->sin_port == htons(33345), "dest_addr");
        fi_freeinfo(i);
    }
    r = fi_getinfo(FI_VERSION(1, 17), "no-such-host.invalid", "1", 0, h, &i);
    CHECK(r == -FI_ENODATA, "unresolvable node -> %d (%s)", r, fi_strerror(-r));
    r = fi_getinfo(FI_VERSION(1, 17), NULL, "not-a-port-name", FI_SOURCE, h, &i);
    CHECK(r < 0, "service not-a-port-name -> %d (%s)", r, fi_strerror(-r));
    if (r == 0)
        fi_freeinfo(i);
    r = fi_getinfo(FI_VERSION(1, 17), "::1", "1", 0, h, &i);
    CHECK(r == -FI_ENODATA, "IPv6 node -> %d (%s)", r, fi_strerror(-r));
    if (r == 0)
        fi_freeinfo(i);
    /* fi_getinfo(3): an FI_ADDR_STR address as the node, no service */
    i = NULL;
    r = fi_getinfo(FI_VERSION(1, 17), "fi_sockaddr_in://127.0.0.1:33346", NULL, 0, h, &i);
    CHECK(r == 0, "FI_ADDR_STR node -> %d (%s)", r, fi_strerror(-r));
    if (r == 0) {
        struct sockaddr_in *sa = i->dest_addr;
        CHECK(i->addr_format == FI_SOCKADDR_IN && sa && i->dest_addrlen == sizeof(*sa) &&
                  sa->sin_port == htons(33346) && sa->sin_addr.s_addr == htonl(INADDR_LOOPBACK),
              "dest_addr of an FI_ADDR_STR node");
        fi_freeinfo(i);
    }
    i = NULL;
    r = fi_getinfo(FI_VERSION(1, 17), "fi_sockaddr_in://127.0.0.1:33347", NULL, FI_SOURCE, h, &i);
    CHECK(r == 0, "FI_ADDR_STR node with FI_SOURCE -> %d (%s)", r, fi_strerror(-r));
    if (r == 0) {
        struct sockaddr_in *sa = i->src_addr;
        CHECK(sa && i->src_addrlen == sizeof(*sa) && sa->sin_port == htons(33347) &&
                  sa->sin_addr.s_addr == htonl(INADDR_LOOPBACK),
              "src_addr of an FI_ADDR_STR node with FI_SOURCE");
        fi_freeinfo(i);
    }
    h->addr_format = FI_ADDR_STR;
    i = NULL;
    r = fi_getinfo(FI_VERSION(1, 17), "fi_sockaddr_in://127.0.0.1:33348", NULL, 0, h, &i);
    CHECK(r == 0 && i->dest_addr && strcmp(i->dest_addr, "fi_sockaddr_in://127.0.0.1:33348") == 0,
          "FI_ADDR_STR node answered in FI_ADDR_STR -> %d: %s", r,
          r == 0 && i->dest_addr ? (char *)i->dest_addr : "(none)");
    if (r == 0)
        fi_freeinfo(i);
    h->addr_format = FI_FORMAT_UNSPEC;
    /* a string address of the wrong form in the hints */
    h->addr_format = FI_ADDR_STR;
    h->src_addr = strdup("garbage");
    h->src_addrlen = 8;
    i = NULL;
    r = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &i);
    CHECK(r == -FI_ENODATA || r == -FI_EINVAL || r == 0, "FI_ADDR_STR src garbage -> %d", r);
    if (r == 0)
        fi_freeinfo(i);
    /* a sockaddr_in src of a short length */
    fi_freeinfo(h);
    h = base();
    h->addr_format = FI_SOCKADDR_IN;
    h->src_addr = calloc(1, 4);
    h->src_addrlen = 4;
    i = NULL;
    r = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &i);
    CHECK(r != 0 || i->src_addrlen == sizeof(struct sockaddr_in), "4-byte sockaddr src -> %d", r);
    if (r == 0)
        fi_freeinfo(i);
    fi_freeinfo(h);
}

/* The info answered must be one the provider accepts back, and fi_endpoint
 * with a modified copy that asks for more must fail. */
static void info_roundtrip(void)
{
    struct fi_info *h = base(), *i = NULL, *d;
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_ep *ep;
    int r;

    MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &i));
    MUST(fi_fabric(i->fabric_attr, &fab, NULL));
    MUST(fi_domain(fab, i, &dom, NULL));
    d = fi_dupinfo(i);
    d->caps |= FI_RMA;
    r = fi_endpoint(dom, d, &ep, NULL);
    CHECK(r < 0, "fi_endpoint with FI_RMA -> %d", r);
    if (r == 0)
        fi_close(&ep->fid);
    d->caps = i->caps;
    d->ep_attr->type = FI_EP_MSG;
    r = fi_endpoint(dom, d, &ep, NULL);
    CHECK(r < 0, "fi_endpoint with FI_EP_MSG -> %d", r);
    if (r == 0)
        fi_close(&ep->fid);
    d->ep_attr->type = FI_EP_RDM;
    d->tx_attr->inject_size = 1 << 20;
    r = fi_endpoint(dom, d, &ep, NULL);
    CHECK(r < 0, "fi_endpoint with inject_size 1M -> %d", r);
    if (r == 0)
        fi_close(&ep->fid);
    fi_freeinfo(d);
    MUST(fi_close(&dom->fid));
    MUST(fi_close(&fab->fid));
    fi_freeinfo(i);
    fi_freeinfo(h);
}

/* mr_mode as each API version reads it (fi_domain(3), fi_mr(3)): before
 * 1.5 it is an enum whose 0, FI_MR_UNSPEC, only a request holds, so the
 * answer names FI_MR_SCALABLE (what no bits mean since) or the FI_MR_BASIC
 * asked for; from 1.5 no bits, but an FI_MR_BASIC asked for is not
 * cleared. Each answer opens an endpoint. */
static void mr_modes(void)
{
    static const struct {
        int major, minor, ask, want;
    } c[] = {
        {1, 0, FI_MR_UNSPEC, FI_MR_SCALABLE}, {1, 4, FI_MR_UNSPEC, FI_MR_SCALABLE},
        {1, 4, FI_MR_BASIC, FI_MR_BASIC},     {1, 4, FI_MR_SCALABLE, FI_MR_SCALABLE},
        {1, 5, 0, 0},                         {1, 17, FI_MR_LOCAL | FI_MR_ALLOCATED, 0},
        {1, 17, FI_MR_BASIC, FI_MR_BASIC},
    };

    for (size_t k = 0; k < sizeof(c) / sizeof(c[0]); k++) {
        struct fi_info *h = base(), *i = NULL;
        struct fid_fabric *fab;
        struct fid_domain *dom;
        struct fid_ep *ep;
        int r;

        h->domain_attr->mr_mode = c[k].ask;
        r = fi_getinfo(FI_VERSION(c[k].major, c[k].minor), NULL, NULL, 0, h, &i);
        CHECK(r == 0 && i->domain_attr->mr_mode == c[k].want,
              "API %d.%d, mr_mode 0x%x asked: %d, answered 0x%x, want 0x%x", c[k].major, c[k].minor,
              c[k].ask, r, r == 0 ? i->domain_attr->mr_mode : -1, c[k].want);
        fi_freeinfo(h);
        if (r != 0)
            continue;
        MUST(fi_fabric(i->fabric_attr, &fab, NULL));
        MUST(fi_domain(fab, i, &dom, NULL));
        MUST(fi_endpoint(dom, i, &ep, NULL));
        MUST(fi_close(&ep->fid));
        MUST(fi_close(&dom->fid));
        MUST(fi_close(&fab->fid));
        fi_freeinfo(i);
    }
}

/* A tmx name cannot be chosen (fi_tmx(7)): fi_endpoint takes no source,
 * or the empty name fi_getinfo answers, and refuses any other name (an
 * endpoint opened there would have another name, not the one asked). */
static void tmx_source(void)
{
    struct fi_info *h = base(), *i = NULL, *d;
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_ep *ep, *ep2;
    unsigned char name[FI_NAME_MAX];
    size_t len = sizeof(name);
    int r;

    MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &i));
    fi_freeinfo(h);
    MUST(fi_fabric(i->fabric_attr, &fab, NULL));
    MUST(fi_domain(fab, i, &dom, NULL));
    MUST(fi_endpoint(dom, i, &ep, NULL)); /* the empty name */
    MUST(fi_getname(&ep->fid, name, &len));
    d = fi_dupinfo(i);
    free(d->src_addr);
    d->src_addr = NULL;
    d->src_addrlen = 0;
    r = fi_endpoint(dom, d, &ep2, NULL);
    CHECK(r == 0, "fi_endpoint with no source -> %d", r);
    if (r == 0)
        fi_close(&ep2->fid);
    d->src_addr = malloc(len);
    memcpy(d->src_addr, name, len);
    d->src_addrlen = len;
    r = fi_endpoint(dom, d, &ep2, NULL);
    CHECK(r == -FI_EINVAL, "fi_endpoint at another endpoint's tmx name -> %d (%s)", r, fi_strerror(-r));
    if (r == 0)
        fi_close(&ep2->fid);
    fi_freeinfo(d);
    MUST(fi_close(&ep->fid));
    MUST(fi_close(&dom->fid));
    MUST(fi_close(&fab->fid));
    fi_freeinfo(i);
}

int main(int argc, char **argv)
{
    static const fe_case_t cases[] = {
        {"refusals", refusals},
        {"acceptances", acceptances},
        {"nodes", nodes},
        {"info_roundtrip", info_roundtrip},
        {"mr_modes", mr_modes},
        {"tmx_source", tmx_source},
    };
    return fe_run(cases, sizeof(cases) / sizeof(cases[0]), argc, argv, 60);
}
