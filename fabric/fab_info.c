/*
 * fi_getinfo: what the provider offers, and the refusal of hints it cannot
 * meet. Each refusal is logged at info level with its reason, so
 * FI_LOG_LEVEL=info explains an empty answer.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "fab.h"

#define PRIMARY_CAPS (FI_TAGGED | FI_MSG)
#define DIR_CAPS (FI_SEND | FI_RECV)
#define COMM_CAPS (FI_LOCAL_COMM | FI_REMOTE_COMM)

static int refuse(const char *why)
{
    FI_INFO(&fab_prov, FI_LOG_CORE, "hints refused: %s\n", why);
    return -FI_ENODATA;
}

/* Secondary capabilities, reported whether asked for or not (as
 * libfabric's util providers do); FI_REMOTE_CQ_DATA, not a capability of
 * the current API, only when asked for or when nothing was. */
#define SECONDARY_CAPS (FI_SOURCE | COMM_CAPS)
#define TX_CAPS (FI_TAGGED | FI_MSG | FI_SEND)
#define RX_CAPS (FI_TAGGED | FI_MSG | FI_RECV | FI_DIRECTED_RECV | FI_SOURCE | FI_MULTI_RECV)

/* The capabilities to report for the requested ones: with none asked
 * for, all of ours; else the primary ones asked for (tagged and message
 * when only secondary ones were), both directions unless one was asked
 * for, and the secondary ones. */
/* CQs, endpoints, contexts and counters suggested per domain (a domain
 * holds as many as memory allows). */
#define FAB_OBJ_CNT 1024

static uint64_t caps_for(uint64_t want)
{
    uint64_t caps = want & (FAB_CAPS | FI_MULTI_RECV);

    if (want == 0)
        return FAB_CAPS | COMM_CAPS;
    if (!(caps & PRIMARY_CAPS))
        caps |= PRIMARY_CAPS;
    if (!(caps & DIR_CAPS))
        caps |= DIR_CAPS;
    return caps | SECONDARY_CAPS;
}

static int check_fabric(const struct fi_fabric_attr *fa)
{
    if (fa == NULL)
        return 0;
    if (fa->prov_name && strcasecmp(fa->prov_name, FAB_PROV_NAME) != 0)
        return refuse("another provider named");
    if (fa->name && strcmp(fa->name, FAB_FABRIC_NAME) != 0)
        return refuse("fabric name is not tmx");
    return 0;
}

/* With tmx's offload engine on (TMX_OFFLOAD=1), a thread of each context
 * advances its data transfers: data progress is automatic. */
int fab_offload_on(void)
{
    char v[8];

    return tmx_config_get("TMX_OFFLOAD", v, sizeof(v)) == TMX_OK && strcmp(v, "1") == 0;
}

static int check_progress(enum fi_progress p, int data)
{
    return p == FI_PROGRESS_UNSPEC || p == FI_PROGRESS_MANUAL ||
           (data && p == FI_PROGRESS_AUTO && fab_offload_on());
}

static int check_domain(const struct fi_domain_attr *da)
{
    if (da == NULL)
        return 0;
    if (da->name && strcmp(da->name, FAB_DOMAIN_NAME) != 0)
        return refuse("domain name is not tmx");
    if (!check_progress(da->control_progress, 0) || !check_progress(da->data_progress, 1))
        return refuse("manual progress only (automatic data progress with TMX_OFFLOAD=1)");
    if (da->caps & ~(uint64_t)COMM_CAPS)
        return refuse("domain capabilities beyond local and remote communication (FI_SHARED_AV?)");
    if (da->cq_data_size > FAB_CQ_DATA_SIZE)
        return refuse("cq_data_size above 8");
    if (da->max_ep_tx_ctx > 1 || da->max_ep_rx_ctx > 1 || da->max_ep_stx_ctx > 0 ||
        da->max_ep_srx_ctx > 0)
        return refuse("scalable or shared contexts");
    if ((unsigned)da->threading > FI_THREAD_ENDPOINT || (unsigned)da->av_type > FI_AV_TABLE ||
        (unsigned)da->resource_mgmt > FI_RM_ENABLED)
        return refuse("threading, av_type or resource_mgmt not a value libfabric defines");
    if (da->auth_key_size > 0 || da->auth_key != NULL)
        return refuse("authorization keys");
    if (da->cq_cnt > FAB_OBJ_CNT || da->ep_cnt > FAB_OBJ_CNT || da->tx_ctx_cnt > FAB_OBJ_CNT ||
        da->rx_ctx_cnt > FAB_OBJ_CNT || da->cntr_cnt > FAB_OBJ_CNT)
        return refuse("more CQs, endpoints, contexts or counters than it suggests");
    return 0;
}

static int check_ep(const struct fi_ep_attr *ea)
{
    if (ea == NULL)
        return 0;
    if (ea->type != FI_EP_UNSPEC && ea->type != FI_EP_RDM)
        return refuse("endpoint type other than FI_EP_RDM");
    if (ea->max_msg_size > FAB_MAX_MSG_SIZE)
        return refuse("max_msg_size too large");
    if (ea->tx_ctx_cnt > 1 || ea->rx_ctx_cnt > 1)
        return refuse("more than one tx or rx context");
    if (ea->msg_prefix_size > 0)
        return refuse("message prefixes");
    if (ea->protocol != FI_PROTO_UNSPEC)
        return refuse("a wire protocol of libfabric's list (tmx's own is not one)");
    if (ea->auth_key_size > 0 || ea->auth_key != NULL)
        return refuse("authorization keys");
    return 0;
}

static int check_tx(const struct fi_tx_attr *tx)
{
    if (tx == NULL)
        return 0;
    if (tx->caps & ~(FAB_CAPS | COMM_CAPS))
        return refuse("tx capabilities beyond tagged and message sends");
    if (tx->msg_order & ~(uint64_t)FI_ORDER_SAS)
        return refuse("tx ordering beyond FI_ORDER_SAS");
    if (tx->comp_order & ~(uint64_t)FI_ORDER_NONE)
        return refuse("ordered tx completions");
    if (tx->op_flags & ~(uint64_t)FAB_TX_OP_FLAGS)
        return refuse("unsupported tx op_flags");
    if (tx->inject_size > FAB_INJECT_SIZE || tx->iov_limit > 1 || tx->rma_iov_limit > 0)
        return refuse("tx inject_size, iov_limit or rma_iov_limit too large");
    if (tx->size > FAB_QUEUE_SIZE)
        return refuse("tx size too large");
    return 0;
}

static int check_rx(const struct fi_rx_attr *rx)
{
    if (rx == NULL)
        return 0;
    if (rx->caps & ~(FAB_CAPS | COMM_CAPS | FI_MULTI_RECV))
        return refuse("rx capabilities beyond tagged and message receives");
    if (rx->msg_order & ~(uint64_t)FI_ORDER_SAS)
        return refuse("rx ordering beyond FI_ORDER_SAS");
    if (rx->comp_order & ~(uint64_t)FI_ORDER_NONE)
        return refuse("ordered rx completions");
    if (rx->op_flags & ~(uint64_t)(FAB_RX_OP_FLAGS | FI_MULTI_RECV))
        return refuse("unsupported rx op_flags");
    if (rx->iov_limit > 1 || rx->total_buffered_recv > 0)
        return refuse("rx iov_limit or buffered receives");
    if (rx->size > FAB_QUEUE_SIZE)
        return refuse("rx size too large");
    return 0;
}

static int check_hints(const struct fi_info *h)
{
    int ret;

    if (h->caps & ~(FAB_CAPS | COMM_CAPS | FI_MULTI_RECV))
        return refuse("capabilities beyond FI_TAGGED/FI_MSG and FI_MULTI_RECV (RMA, atomics...)");
    /* FI_MULTI_RECV's untagged receives wait in the provider, which hands
     * them the oldest message of any source (fab_msg.c) */
    if ((h->caps & FI_MULTI_RECV) && (h->caps & FI_DIRECTED_RECV))
        return refuse("FI_MULTI_RECV with FI_DIRECTED_RECV");
    if ((h->caps & FI_MULTI_RECV) && (h->caps & FI_TAGGED) && !(h->caps & FI_MSG))
        return refuse("FI_MULTI_RECV for tagged receives (untagged ones only)");
    if (h->rx_attr && (h->rx_attr->op_flags & FI_MULTI_RECV) && !(h->caps & FI_MULTI_RECV))
        return refuse("the FI_MULTI_RECV op flag without the FI_MULTI_RECV capability");
    /* and the provider hands their messages over only when called */
    if ((h->caps & FI_MULTI_RECV) && h->domain_attr &&
        h->domain_attr->data_progress == FI_PROGRESS_AUTO)
        return refuse("FI_MULTI_RECV with automatic data progress");
    if (!fab_fmt_ok(h->addr_format))
        return refuse("an address format other than tmx names, FI_SOCKADDR_IN or FI_ADDR_STR");
    if (h->nic != NULL)
        return refuse("a NIC");
    if ((ret = check_fabric(h->fabric_attr)) || (ret = check_domain(h->domain_attr)) ||
        (ret = check_ep(h->ep_attr)) || (ret = check_tx(h->tx_attr)) ||
        (ret = check_rx(h->rx_attr)))
        return ret;
    return 0;
}

int fab_info_check(const struct fi_info *info)
{
    return info == NULL ? -FI_EINVAL : check_hints(info);
}

/* No registration is needed: no mr_mode bits. Before API 1.5 mr_mode is
 * an enum whose 0 (FI_MR_UNSPEC) only a request holds, so the answer is
 * FI_MR_SCALABLE, what no bits mean since; an FI_MR_BASIC asked for is
 * kept, whatever the version (fi_mr(3): the provider does not clear it). */
static int mr_mode_for(uint32_t version, const struct fi_info *h)
{
    if (h && h->domain_attr && h->domain_attr->mr_mode == FI_MR_BASIC)
        return FI_MR_BASIC;
    return FI_VERSION_LT(version, FI_VERSION(1, 5)) ? FI_MR_SCALABLE : 0;
}

static void fill_attrs(struct fi_info *fi, uint32_t version, const struct fi_info *h)
{
    struct fi_domain_attr *da = fi->domain_attr;
    struct fi_ep_attr *ea = fi->ep_attr;
    int both = (fi->caps & PRIMARY_CAPS) == PRIMARY_CAPS;

    fi->tx_attr->caps = fi->caps & TX_CAPS;
    fi->tx_attr->op_flags = h && h->tx_attr ? h->tx_attr->op_flags : 0;
    fi->tx_attr->msg_order = FI_ORDER_SAS;
    fi->tx_attr->comp_order = FI_ORDER_NONE;
    fi->tx_attr->inject_size = FAB_INJECT_SIZE;
    fi->tx_attr->size = FAB_QUEUE_SIZE;
    fi->tx_attr->iov_limit = 1;
    fi->rx_attr->caps = fi->caps & RX_CAPS;
    fi->rx_attr->op_flags = h && h->rx_attr ? h->rx_attr->op_flags : 0;
    fi->rx_attr->msg_order = FI_ORDER_SAS;
    fi->rx_attr->comp_order = FI_ORDER_NONE;
    fi->rx_attr->size = FAB_QUEUE_SIZE;
    fi->rx_attr->iov_limit = 1;
    ea->type = FI_EP_RDM;
    ea->protocol = FI_PROTO_UNSPEC;
    ea->protocol_version = 1;
    ea->max_msg_size = FAB_MAX_MSG_SIZE;
    ea->mem_tag_format = both ? FAB_TAG_FORMAT_63 : FAB_TAG_FORMAT_64;
    ea->tx_ctx_cnt = 1;
    ea->rx_ctx_cnt = 1;
    da->threading = h && h->domain_attr && h->domain_attr->threading ? h->domain_attr->threading
                                                                     : FI_THREAD_SAFE;
    da->control_progress = FI_PROGRESS_MANUAL;
    da->data_progress = fab_offload_on() && !(fi->caps & FI_MULTI_RECV) ? FI_PROGRESS_AUTO
                                                                         : FI_PROGRESS_MANUAL;
    da->resource_mgmt = FI_RM_ENABLED;
    da->av_type = h && h->domain_attr ? h->domain_attr->av_type : FI_AV_UNSPEC;
    da->mr_mode = mr_mode_for(version, h);
    da->cq_data_size = FAB_CQ_DATA_SIZE;
    da->cq_cnt = FAB_OBJ_CNT;
    da->ep_cnt = FAB_OBJ_CNT;
    da->tx_ctx_cnt = FAB_OBJ_CNT;
    da->rx_ctx_cnt = FAB_OBJ_CNT;
    da->cntr_cnt = FAB_OBJ_CNT;
    da->max_ep_tx_ctx = 1;
    da->max_ep_rx_ctx = 1;
    da->mr_cnt = 1024;
    da->caps = COMM_CAPS;
    fi->fabric_attr->prov_version = FAB_PROV_VERSION;
}

static struct fi_info *info_make(uint32_t version, const struct fi_info *h)
{
    struct fi_info *fi = fi_allocinfo();

    if (fi == NULL)
        return NULL;
    fi->caps = caps_for(h ? h->caps : 0);
    fi->mode = 0;
    fi->domain_attr->name = strdup(FAB_DOMAIN_NAME);
    fi->fabric_attr->name = strdup(FAB_FABRIC_NAME);
    if (fi->domain_attr->name == NULL || fi->fabric_attr->name == NULL) {
        fi_freeinfo(fi);
        return NULL;
    }
    fill_attrs(fi, version, h);
    return fi;
}

/* --------------------------------------------------------- addresses */

/* The format to answer in: the one asked for; else IPv4 when node,
 * service or an address in the hints names one (the user speaks of IPv4
 * addresses), tmx names otherwise (what Open MPI exchanges). */
static int sa_like(const void *a, size_t len)
{
    return a != NULL && len >= sizeof(struct sockaddr_in) &&
           ((const struct sockaddr_in *)a)->sin_family == AF_INET;
}

static uint32_t fmt_for(const char *node, const char *service, const struct fi_info *h)
{
    if (h && h->addr_format != FI_FORMAT_UNSPEC)
        return h->addr_format;
    if (node || service || (h && (sa_like(h->src_addr, h->src_addrlen) ||
                                  sa_like(h->dest_addr, h->dest_addrlen))))
        return FI_SOCKADDR_IN;
    return FI_FORMAT_UNSPEC;
}

static int addr_set(void **out, size_t *outlen, const void *a, size_t len)
{
    if ((*out = malloc(len)) == NULL)
        return -FI_ENOMEM;
    memcpy(*out, a, len);
    *outlen = len;
    return 0;
}

/* An IPv4 address in the info's format. */
static int sa_set(struct fi_info *fi, void **out, size_t *outlen, const struct sockaddr_in *sa)
{
    char str[64];

    if (fi->addr_format == FI_ADDR_STR)
        return addr_set(out, outlen, str, (size_t)fab_sa_to_str(sa, str, sizeof(str)) + 1);
    return addr_set(out, outlen, sa, sizeof(*sa));
}

/* An address from the hints, used when it is an IPv4 address of the
 * answer's format; anything else (an IPv6 address, say) is ignored, as
 * tmx names no endpoint by it. Returns 1 when *sa was filled. */
static int hint_addr(const struct fi_info *h, const void *a, size_t len, struct sockaddr_in *sa)
{
    if (a == NULL)
        return 0;
    if (h->addr_format == FI_ADDR_STR) {
        if (fab_str_to_sa(a, sa) == 0)
            return 1;
    } else if (len >= sizeof(*sa) && ((const struct sockaddr_in *)a)->sin_family == AF_INET) {
        memcpy(sa, a, sizeof(*sa));
        return 1;
    }
    FI_INFO(&fab_prov, FI_LOG_CORE, "hints address of %zu bytes ignored: not IPv4\n", len);
    return 0;
}

/* Source and destination of an IPv4 answer. With FI_SOURCE, node and
 * service name the source (the endpoint's name socket binds there);
 * otherwise the destination, and the source is the hints' or a wildcard
 * (any interface, a port of the kernel's choosing). */
static int addrs_ipv4(struct fi_info *fi, const char *node, const char *service, uint64_t flags,
                      const struct fi_info *h)
{
    struct sockaddr_in src, dst;
    int have_dst = 0, ret;

    if ((ret = fab_resolve_node(NULL, NULL, 1, &src)) != 0)
        return ret;
    if (h) {
        hint_addr(h, h->src_addr, h->src_addrlen, &src);
        have_dst = hint_addr(h, h->dest_addr, h->dest_addrlen, &dst);
    }
    if ((flags & FI_SOURCE) && (node || service))
        ret = fab_resolve_node(node, service, 1, &src);
    else if (node || service)
        ret = fab_resolve_node(node ? node : "localhost", service, 0, &dst), have_dst = 1;
    if (ret != 0)
        return ret;
    if ((ret = sa_set(fi, &fi->src_addr, &fi->src_addrlen, &src)) != 0)
        return ret;
    return have_dst ? sa_set(fi, &fi->dest_addr, &fi->dest_addrlen, &dst) : 0;
}

/* A tmx name cannot be chosen: the source is the empty name, which
 * means "wherever tmx places the endpoint"; a destination only from the
 * hints. */
static int addrs_tmx(struct fi_info *fi, const struct fi_info *h)
{
    static const unsigned char any[FAB_ADDR_LEN];
    int ret;

    if ((ret = addr_set(&fi->src_addr, &fi->src_addrlen, any, sizeof(any))) != 0)
        return ret;
    if (h && h->dest_addr && h->dest_addrlen == FAB_ADDR_LEN)
        return addr_set(&fi->dest_addr, &fi->dest_addrlen, h->dest_addr, FAB_ADDR_LEN);
    return 0;
}

/* node and service, and the hints' addresses, say where the endpoint is
 * and whom it talks to (fi_tmx(7), "Addresses"). */
int fab_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
                const struct fi_info *hints, struct fi_info **info)
{
    struct fi_info *fi;
    int ret;

    if (hints && (ret = check_hints(hints)) != 0)
        return ret;
    if ((fi = info_make(version, hints)) == NULL)
        return -FI_ENOMEM;
    fi->addr_format = fmt_for(node, service, hints);
    if (fi->addr_format == FI_FORMAT_UNSPEC)
        ret = addrs_tmx(fi, hints);
    else
        ret = addrs_ipv4(fi, node, service, flags, hints);
    if (ret != 0) {
        fi_freeinfo(fi);
        return ret;
    }
    *info = fi;
    return 0;
}
