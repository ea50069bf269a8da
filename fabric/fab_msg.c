/*
 * Data transfers: the tagged operations map one to one onto tmx_tsend,
 * tmx_trecv, tmx_tprobe, tmx_mrecv and tmx_message_discard. Untagged
 * messages are tagged messages in a space of their own: with FI_TAGGED and
 * FI_MSG both on, tag bit 63 marks them and tagged traffic keeps 63 bits.
 */
#include <stdlib.h>
#include <string.h>

#include "fab.h"

typedef struct xfer {
    void *buf;
    size_t len;
    fi_addr_t addr;
    uint64_t tag, ignore, data;
    uint64_t flags;             /* FI_TAGGED or FI_MSG, and op flags */
    void *context;
    int quiet;                  /* fi_inject and friends: never a completion */
} xfer_t;

/* --------------------------------------------------------------- checks */

static int ep_ready(fab_ep_t *ep, uint64_t flags)
{
    if (!ep->enabled) {
        FAB_WARN(FI_LOG_EP_DATA, "endpoint not enabled\n");
        return -FI_EOPBADSTATE;
    }
    if (!(ep->caps & flags & (FI_TAGGED | FI_MSG))) {
        FAB_WARN(FI_LOG_EP_DATA, "%s operation on an endpoint without that capability\n",
                 (flags & FI_TAGGED) ? "tagged" : "message");
        return -FI_EOPNOTSUPP;
    }
    return 0;
}

static int iov_one(const struct iovec *iov, size_t count, void **buf, size_t *len)
{
    if (count > 1) {
        FAB_WARN(FI_LOG_EP_DATA, "iov count %zu above the limit of 1\n", count);
        return -FI_EINVAL;
    }
    *buf = count ? iov[0].iov_base : NULL;
    *len = count ? iov[0].iov_len : 0;
    return 0;
}

/* The tmx tag of a transfer; tagged ones may not use the message bit.
 * An untagged message is FAB_MSG_BIT on every endpoint, whatever its
 * capabilities, so that one with FI_MSG alone and one with FI_MSG and
 * FI_TAGGED understand each other. */
static int xfer_tag(fab_ep_t *ep, const xfer_t *x, uint64_t *tag, uint64_t *ignore)
{
    if (!(x->flags & FI_TAGGED)) {
        *tag = FAB_MSG_BIT;
        *ignore = 0;
        return 0;
    }
    if (x->tag & ~x->ignore & ep->msg_bit) {
        FAB_WARN(FI_LOG_EP_DATA, "tag 0x%llx uses bit 63, reserved while FI_MSG is on\n",
                 (unsigned long long)x->tag);
        return -FI_EINVAL;
    }
    *tag = x->tag & ~ep->msg_bit;
    *ignore = x->ignore & ~ep->msg_bit;
    return 0;
}

/* ----------------------------------------------------------------- sends */

/* Injected data must be reusable on return: tmx's injected send copies
 * it and keeps nothing (FAB_INJECT_SIZE is TMX_INJECT_MAX). One that must
 * also be delivered first (FI_DELIVERY_COMPLETE) is a synchronous send
 * waited for here. The completion of a send*msg with FI_INJECT is written
 * at once. */
static ssize_t send_op(fab_ep_t *ep, const xfer_t *x, uint64_t tag, tmx_op_params_t *p);

/* An injected send: tmx's inject, which keeps nothing; with
 * FI_DELIVERY_COMPLETE, tmx's copying synchronous send, whose completion
 * comes through the CQ once the receiver matched it (never a wait here:
 * a data call must not block, and two peers that each sent so before
 * posting receives would wait for each other). */
static ssize_t send_inject(fab_ep_t *ep, const xfer_t *x, uint64_t tag, tmx_op_params_t *p)
{
    tmx_status_t st;

    p->flags |= TMX_OP_FLAG_INJECT;
    if (p->flags & TMX_OP_FLAG_SYNC)
        return send_op(ep, x, tag, p);
    st = tmx_tsend(ep->tmx, (tmx_peer_t)x->addr, x->buf, x->len, tag, p, NULL);
    if (st != TMX_OK)
        return -fab_errno(st);
    if (ep->tx_cntr)
        fab_cntr_count(ep->tx_cntr, 0);
    if (!x->quiet && (!ep->tx_selective || (x->flags & FI_COMPLETION))) {
        fab_cqe_t e = {.e = {.op_context = x->context,
                             .flags = (x->flags & (FI_TAGGED | FI_MSG)) | FI_SEND},
                       .src = FI_ADDR_NOTAVAIL};
        fab_cq_push(ep->tx_cq, &e);
    }
    return 0;
}

static int send_check(fab_ep_t *ep, const xfer_t *x)
{
    if (!fab_av_valid(ep->av, x->addr)) {
        FAB_WARN(FI_LOG_EP_DATA, "send to fi_addr %llu, not in the AV\n",
                 (unsigned long long)x->addr);
        return -FI_EINVAL;
    }
    if ((x->buf == NULL && x->len > 0) || x->len > FAB_MAX_MSG_SIZE) {
        FAB_WARN(FI_LOG_EP_DATA, "send of %zu bytes from %p\n", x->len, x->buf);
        return -FI_EINVAL;
    }
    if ((x->flags & FI_INJECT) && x->len > FAB_INJECT_SIZE) {
        FAB_WARN(FI_LOG_EP_DATA, "inject of %zu bytes, above %d\n", x->len, FAB_INJECT_SIZE);
        return -FI_EINVAL;
    }
    return 0;
}

/* The send's tmx user context is the application's: the CQ rebuilds the
 * rest of the entry from the tag. A send that wants no completion still
 * reports a failure. */
static ssize_t send_op(fab_ep_t *ep, const xfer_t *x, uint64_t tag, tmx_op_params_t *p)
{
    int quiet = x->quiet || (ep->tx_selective && !(x->flags & FI_COMPLETION));

    if (quiet && !ep->tx_cntr)
        p->flags |= TMX_OP_FLAG_CQ_ERRORS_ONLY;
    p->field_mask |= TMX_OP_FIELD_USER_CONTEXT;
    p->user_context = quiet && ep->tx_cntr ? FAB_COUNT_ONLY : x->context;
    return -fab_errno(tmx_tsend(ep->tmx, (tmx_peer_t)x->addr, x->buf, x->len, tag, p, NULL));
}

static ssize_t ep_send(fab_ep_t *ep, const xfer_t *x)
{
    tmx_op_params_t p = {.field_mask = TMX_OP_FIELD_FLAGS};
    uint64_t tag = 0, ignore = 0;
    ssize_t ret;

    fab_lock(ep->dom);
    if ((ret = ep_ready(ep, x->flags)) || (ret = send_check(ep, x)) ||
        (ret = xfer_tag(ep, x, &tag, &ignore)))
        goto out_unlock;
    if (x->flags & FI_REMOTE_CQ_DATA) {
        p.field_mask |= TMX_OP_FIELD_DATA;
        p.data = x->data;
    }
    if (x->flags & (FI_DELIVERY_COMPLETE | FI_MATCH_COMPLETE))
        p.flags |= TMX_OP_FLAG_SYNC;
    ret = (x->flags & FI_INJECT) ? send_inject(ep, x, tag, &p) : send_op(ep, x, tag, &p);
out_unlock:
    fab_unlock(ep->dom);
    return ret;
}

/* -------------------------------------------------------------- receives */

static int recv_source(fab_ep_t *ep, fi_addr_t addr, tmx_peer_t *peer)
{
    if (addr == FI_ADDR_UNSPEC || !(ep->caps & FI_DIRECTED_RECV)) {
        *peer = TMX_ANY_SOURCE;
        return 0;
    }
    if (!fab_av_valid(ep->av, addr)) {
        FAB_WARN(FI_LOG_EP_DATA, "receive from fi_addr %llu, not in the AV\n",
                 (unsigned long long)addr);
        return -FI_EINVAL;
    }
    *peer = (tmx_peer_t)addr;
    return 0;
}

/* A receive's tmx user context is the application's own, as a send's is:
 * the CQ rebuilds the rest of the entry from the tag, fi_cancel finds it
 * through tmx_cancel(), and a receive that wants no completion for
 * success still reports a failure. */
static tmx_op_params_t recv_params(const fab_ep_t *ep, const xfer_t *x)
{
    tmx_op_params_t p = {.field_mask = TMX_OP_FIELD_USER_CONTEXT | TMX_OP_FIELD_FLAGS,
                         .user_context = x->context};

    if (ep->rx_selective && !(x->flags & FI_COMPLETION)) {
        if (ep->rx_cntr)
            p.user_context = FAB_COUNT_ONLY; /* counted, then dropped by the CQ */
        else
            p.flags = TMX_OP_FLAG_CQ_ERRORS_ONLY;
    }
    return p;
}

static ssize_t recv_post(fab_ep_t *ep, const xfer_t *x, tmx_peer_t peer, uint64_t tag,
                         uint64_t ignore)
{
    tmx_op_params_t p = recv_params(ep, x);

    return -fab_errno(tmx_trecv(ep->tmx, peer, x->buf, x->len, tag, ignore, &p, NULL));
}

/* ------------------------------------------- untagged, with FI_MULTI_RECV */

/* With FI_MULTI_RECV, untagged receives wait in the provider, in post
 * order, and tmx keeps every untagged message as unexpected until the
 * provider claims it (tmx_tprobe) for the first waiting receive and
 * receives it there (tmx_mrecv): at its buffer's start, or for a
 * multi-receive buffer right after the last message it took. That keeps
 * a multi-receive buffer first in line for as long as it takes messages,
 * which reposting its remainder to tmx would not. An endpoint with
 * FI_MULTI_RECV has no FI_DIRECTED_RECV (fi_getinfo refuses both): every
 * untagged receive takes a message from any source, so the first receive
 * takes the oldest message. */

static void urq_unlink(fab_ep_t *ep, fab_urecv_t *u)
{
    u->released = 1;
    if (ep->urq_head == u) {
        fab_urecv_t *n = u->next;
        while (n != &ep->urq_live && n->released)
            n = n->next;
        ep->urq_head = n != &ep->urq_live ? n : NULL;
    }
}

void fab_urq_free_one(fab_urecv_t *u)
{
    u->prev->next = u->next;
    u->next->prev = u->prev;
    free(u);
}

/* A receive that ends with no message in flight: its entry, now (a
 * multi-receive buffer's release is reported even under selective
 * completion). */
static void urq_end(fab_ep_t *ep, fab_urecv_t *u, int err, int prov_errno)
{
    fab_cqe_t e = {.e = {.op_context = u->context, .flags = FI_MSG | FI_RECV},
                   .src = FI_ADDR_NOTAVAIL, .err = err, .prov_errno = prov_errno};

    if (u->multi)
        e.e.flags |= FI_MULTI_RECV;
    if (err != 0 && ep->rx_cntr != NULL)
        fab_cntr_count(ep->rx_cntr, 1);
    if (err != 0 || !u->quiet || u->multi)
        fab_cq_push(ep->rx_cq, &e);
    fab_urq_free_one(u);
}

int fab_urq_progress(fab_ep_t *ep)
{
    int taken = 0;

    while (ep->urq_head != NULL) {
        fab_urecv_t *u = ep->urq_head;
        fab_op_t *op = fab_op_get(ep, u->context);
        tmx_op_params_t p = {.field_mask = TMX_OP_FIELD_USER_CONTEXT};
        tmx_completion_t info;
        tmx_message_h msg;
        tmx_status_t st;
        size_t room;

        if (op == NULL)
            return taken; /* no memory now: the messages wait in tmx */
        st = tmx_tprobe(ep->tmx, TMX_ANY_SOURCE, FAB_MSG_BIT, 0, TMX_PROBE_FLAG_CLAIM, &info, &msg);
        if (st != TMX_OK) {
            fab_op_put(ep, op);
            if (st != TMX_ERR_NO_MESSAGE)
                FAB_WARN(FI_LOG_EP_DATA, "claiming an untagged message: %s\n", tmx_strerror(st));
            return taken;
        }
        taken++;
        room = u->len - u->off;
        op->u = u;
        op->buf = u->buf != NULL ? u->buf + u->off : NULL; /* an empty receive may have none */
        u->off += info.msg_length < room ? info.msg_length : room;
        u->inflight++;
        if (!u->multi || u->off == u->len || u->len - u->off < ep->min_multi_recv)
            urq_unlink(ep, u);
        p.user_context = op;
        st = tmx_mrecv(ep->tmx, msg, op->buf, room, &p, NULL);
        if (st != TMX_OK) {
            /* the message is lost (and its sender released): the
             * receive says so, and takes no more */
            FAB_WARN(FI_LOG_EP_DATA, "receiving an untagged message: %s\n", tmx_strerror(st));
            if (st == TMX_ERR_INVALID) /* left claimed */
                tmx_message_discard(ep->tmx, msg);
            fab_op_put(ep, op);
            urq_unlink(ep, u);
            if (--u->inflight == 0) {
                urq_end(ep, u, fab_errno(st), st);
            } else {
                fab_cqe_t e = {.e = {.op_context = u->context, .flags = FI_MSG | FI_RECV},
                               .src = FI_ADDR_NOTAVAIL, .err = fab_errno(st), .prov_errno = st};
                if (ep->rx_cntr != NULL)
                    fab_cntr_count(ep->rx_cntr, 1);
                fab_cq_push(ep->rx_cq, &e);
            }
        }
    }
    return taken;
}

/* Queues an untagged receive of an endpoint with FI_MULTI_RECV. */
static ssize_t urq_post(fab_ep_t *ep, const xfer_t *x)
{
    fab_urecv_t *u = calloc(1, sizeof(*u));

    if (u == NULL)
        return -FI_ENOMEM;
    u->buf = x->buf;
    u->len = x->len;
    u->context = x->context;
    u->multi = (x->flags & FI_MULTI_RECV) != 0;
    u->quiet = ep->rx_selective && !(x->flags & FI_COMPLETION);
    u->prev = ep->urq_live.prev;
    u->next = &ep->urq_live;
    u->prev->next = u;
    ep->urq_live.prev = u;
    if (u->multi && u->len < ep->min_multi_recv) {
        /* too small to take anything: released at once */
        u->released = 1;
        urq_end(ep, u, 0, 0);
        return 0;
    }
    if (ep->urq_head == NULL)
        ep->urq_head = u;
    fab_urq_progress(ep);
    return 0;
}

int fab_urq_cancel(fab_ep_t *ep, void *context)
{
    for (fab_urecv_t *u = ep->urq_live.next; u != &ep->urq_live; u = u->next) {
        if (u->released || u->context != context)
            continue;
        urq_unlink(ep, u);
        if (u->inflight == 0)
            urq_end(ep, u, FI_ECANCELED, TMX_ERR_CANCELED);
        /* else its last message's entry says it is released */
        return 0;
    }
    return -FI_ENOENT;
}

void fab_urq_free(fab_ep_t *ep)
{
    while (ep->urq_live.next != &ep->urq_live)
        fab_urq_free_one(ep->urq_live.next);
    ep->urq_head = NULL;
}

static ssize_t ep_recv(fab_ep_t *ep, const xfer_t *x)
{
    uint64_t tag = 0, ignore = 0;
    tmx_peer_t peer = TMX_ANY_SOURCE;
    ssize_t ret;

    fab_lock(ep->dom);
    if ((ret = ep_ready(ep, x->flags)) || (ret = recv_source(ep, x->addr, &peer)) ||
        (ret = xfer_tag(ep, x, &tag, &ignore)))
        goto out_unlock;
    if (x->buf == NULL && x->len > 0) {
        FAB_WARN(FI_LOG_EP_DATA, "receive of %zu bytes into %p\n", x->len, x->buf);
        ret = -FI_EINVAL;
        goto out_unlock;
    }
    if (ep->urq_on && !(x->flags & FI_TAGGED))
        ret = urq_post(ep, x);
    else
        ret = recv_post(ep, x, peer, tag, ignore);
out_unlock:
    fab_unlock(ep->dom);
    return ret;
}

/* ------------------------------------------------- peek, claim, discard */

/* Peek results are completions written at once, found or not. */
static void peek_report(fab_ep_t *ep, const xfer_t *x, const tmx_completion_t *info, int err)
{
    fab_cqe_t e = {.e = {.op_context = x->context, .flags = FI_TAGGED | FI_RECV},
                   .src = FI_ADDR_NOTAVAIL, .err = err};

    if (err == 0 && info != NULL) {
        e.e.len = info->msg_length;
        e.e.tag = info->tag & ~ep->msg_bit;
        if (info->has_data) {
            e.e.data = info->data;
            e.e.flags |= FI_REMOTE_CQ_DATA;
        }
        e.src = fab_av_valid(ep->av, info->source) ? info->source : FI_ADDR_NOTAVAIL;
    }
    if (err == FI_ENOMSG)
        e.prov_errno = TMX_ERR_NO_MESSAGE;
    fab_cq_push(ep->rx_cq, &e);
}

static ssize_t peek(fab_ep_t *ep, const xfer_t *x, tmx_peer_t peer, uint64_t tag,
                    uint64_t ignore)
{
    int claim = (x->flags & (FI_CLAIM | FI_DISCARD)) != 0;
    tmx_completion_t info;
    tmx_message_h msg = NULL;
    tmx_status_t st;
    fab_op_t *op;

    st = tmx_tprobe(ep->tmx, peer, tag, ignore, claim ? TMX_PROBE_FLAG_CLAIM : 0, &info,
                    claim ? &msg : NULL);
    if (st == TMX_ERR_NO_MESSAGE) {
        peek_report(ep, x, NULL, FI_ENOMSG);
        return 0;
    }
    if (st != TMX_OK)
        return -fab_errno(st);
    if (x->flags & FI_DISCARD) {
        tmx_message_discard(ep->tmx, msg);
    } else if (x->flags & FI_CLAIM) {
        if ((op = fab_op_get(ep, x->context)) == NULL) {
            tmx_message_discard(ep->tmx, msg);
            return -FI_ENOMEM;
        }
        op->msg = msg;
        fab_op_list_add(&ep->claimed, op);
    }
    peek_report(ep, x, &info, 0);
    return 0;
}

static fab_op_t *claimed_find(fab_ep_t *ep, void *context)
{
    for (fab_op_t *op = ep->claimed.next; op != &ep->claimed; op = op->next) {
        if (op->context == context)
            return op;
    }
    return NULL;
}

/* Receives (or with FI_DISCARD drops) the message an earlier FI_PEEK |
 * FI_CLAIM with the same context claimed. */
static ssize_t claim_recv(fab_ep_t *ep, const xfer_t *x)
{
    fab_op_t *op = claimed_find(ep, x->context);
    tmx_op_params_t p = recv_params(ep, x);
    tmx_message_h msg;
    tmx_status_t st;

    if (op == NULL) {
        FAB_WARN(FI_LOG_EP_DATA, "FI_CLAIM with a context that claimed nothing\n");
        return -FI_EINVAL;
    }
    msg = op->msg;
    if (x->flags & FI_DISCARD) {
        fab_op_list_del(op);
        fab_op_put(ep, op);
        tmx_message_discard(ep->tmx, msg);
        peek_report(ep, x, NULL, 0);
        return 0;
    }
    st = tmx_mrecv(ep->tmx, msg, x->buf, x->len, &p, NULL);
    if (st == TMX_ERR_INVALID)
        return -FI_EINVAL; /* the message stays claimed */
    fab_op_list_del(op);
    fab_op_put(ep, op);
    return -fab_errno(st);
}

static ssize_t ep_trecvmsg_flags(fab_ep_t *ep, const xfer_t *x)
{
    uint64_t tag = 0, ignore = 0;
    tmx_peer_t peer = TMX_ANY_SOURCE;
    ssize_t ret;

    fab_lock(ep->dom);
    if ((ret = ep_ready(ep, x->flags)))
        goto out_unlock;
    if ((x->flags & FI_CLAIM) && !(x->flags & FI_PEEK)) {
        ret = claim_recv(ep, x);
        goto out_unlock;
    }
    if ((ret = recv_source(ep, x->addr, &peer)) || (ret = xfer_tag(ep, x, &tag, &ignore)))
        goto out_unlock;
    ret = peek(ep, x, peer, tag, ignore);
out_unlock:
    fab_unlock(ep->dom);
    return ret;
}

/* ----------------------------------------------------------- entry points */

#define EP(fid) ((fab_ep_t *)(fid))

/* fi_trecv, what Open MPI's ofi MTL calls for every receive: the usual
 * case (an enabled tagged endpoint, a completion wanted, a tag clear of
 * the message bit, a source in the AV or any) goes straight to
 * tmx_trecv; anything else takes the general path, which says what is
 * wrong. */
static ssize_t t_recv(struct fid_ep *fid, void *buf, size_t len, void *desc, fi_addr_t src,
                      uint64_t tag, uint64_t ignore, void *context)
{
    fab_ep_t *ep = EP(fid);
    tmx_peer_t peer = TMX_ANY_SOURCE;

    if (__builtin_expect(ep->enabled && (ep->caps & FI_TAGGED) && !ep->dom->mt &&
                             (!ep->rx_selective || (ep->rx_op_flags & FI_COMPLETION)) &&
                             !(tag & ~ignore & ep->msg_bit) && (buf != NULL || len == 0),
                         1)) {
        if (src != FI_ADDR_UNSPEC && (ep->caps & FI_DIRECTED_RECV)) {
            if (!fab_av_valid(ep->av, src))
                goto general;
            peer = (tmx_peer_t)src;
        }
        tmx_op_params_t p = {.field_mask = TMX_OP_FIELD_USER_CONTEXT, .user_context = context};
        tmx_status_t st = tmx_trecv(ep->tmx, peer, buf, len, tag & ~ep->msg_bit, ignore & ~ep->msg_bit, &p, NULL);
        return st == TMX_OK ? 0 : -fab_errno(st);
    }
general:;
    xfer_t x = {buf, len, src, tag, ignore, 0, FI_TAGGED | ep->rx_op_flags, context, 0};

    return ep_recv(ep, &x);
}

static ssize_t t_recvv(struct fid_ep *fid, const struct iovec *iov, void **desc, size_t count,
                       fi_addr_t src, uint64_t tag, uint64_t ignore, void *context)
{
    void *buf;
    size_t len;

    if (iov_one(iov, count, &buf, &len) != 0)
        return -FI_EINVAL;
    return t_recv(fid, buf, len, NULL, src, tag, ignore, context);
}

/* FI_MORE, a hint that more receives follow, is taken and ignored. */
#define RECVMSG_FLAGS (FI_COMPLETION | FI_PEEK | FI_CLAIM | FI_DISCARD | FI_REMOTE_CQ_DATA | FI_MORE)

static ssize_t t_recvmsg(struct fid_ep *fid, const struct fi_msg_tagged *msg, uint64_t flags)
{
    xfer_t x = {NULL, 0, msg ? msg->addr : 0, msg ? msg->tag : 0, msg ? msg->ignore : 0, 0,
                FI_TAGGED | (flags & ~(uint64_t)FI_MORE), msg ? msg->context : NULL, 0};

    if (msg == NULL || (flags & ~(uint64_t)RECVMSG_FLAGS)) {
        FAB_WARN(FI_LOG_EP_DATA, "fi_trecvmsg: no message or flags 0x%llx\n",
                 (unsigned long long)flags);
        return msg == NULL ? -FI_EINVAL : -FI_EBADFLAGS;
    }
    if (iov_one(msg->msg_iov, msg->iov_count, &x.buf, &x.len) != 0)
        return -FI_EINVAL;
    if (flags & (FI_PEEK | FI_CLAIM))
        return ep_trecvmsg_flags(EP(fid), &x);
    if (flags & FI_DISCARD)
        return -FI_EBADFLAGS;
    return ep_recv(EP(fid), &x);
}

/* The usual short tagged send: an enabled tagged endpoint, an address
 * in the AV, a tag clear of the message bit, a payload within the inject
 * size. */
static inline int send_usual(const fab_ep_t *ep, const xfer_t *x)
{
    return ep->enabled && (ep->caps & x->flags & FI_TAGGED) && x->len <= FAB_INJECT_SIZE &&
           (x->buf != NULL || x->len == 0) && !(x->tag & ep->msg_bit) && fab_av_valid(ep->av, x->addr);
}

/* fi_tinject and fi_tinjectdata, what Open MPI's ofi MTL calls for every
 * short blocking send, and fi_tsend and fi_tsenddata of a short message
 * that need not wait for its delivery (what it calls for every short
 * nonblocking send): the usual case goes straight to tmx_tinject, which
 * copies the payload out before it returns; a send that wants a
 * completion has it written at once, as tmx would report it (a send
 * completes when its buffer may be reused), without a request. Anything
 * else takes the general path, which says what is wrong. */
static inline ssize_t send_fast(fab_ep_t *ep, const xfer_t *x)
{
    ssize_t ret = 1;

    fab_lock(ep->dom);
    if (__builtin_expect(send_usual(ep, x) && (x->quiet || ep->tx_cq != NULL), 1)) {
        tmx_status_t st = tmx_tinject(ep->tmx, (tmx_peer_t)x->addr, x->buf, x->len, x->tag,
                                      (x->flags & FI_REMOTE_CQ_DATA) != 0, x->data);
        ret = st == TMX_OK ? 0 : -fab_errno(st);
        if (st == TMX_OK && ep->tx_cntr)
            fab_cntr_count(ep->tx_cntr, 0);
        if (st == TMX_OK && !x->quiet && (!ep->tx_selective || (x->flags & FI_COMPLETION))) {
            fab_cqe_t e = {.e = {.op_context = x->context, .flags = FI_TAGGED | FI_SEND},
                           .src = FI_ADDR_NOTAVAIL};
            fab_cq_push(ep->tx_cq, &e);
        }
    }
    fab_unlock(ep->dom);
    return ret <= 0 ? ret : ep_send(ep, x);
}

/* A send that waits for delivery (FI_DELIVERY_COMPLETE, FI_MATCH_COMPLETE)
 * is tmx's synchronous send: never the fast path. */
static inline ssize_t send_tagged(fab_ep_t *ep, const xfer_t *x)
{
    if (x->flags & (FI_DELIVERY_COMPLETE | FI_MATCH_COMPLETE))
        return ep_send(ep, x);
    return send_fast(ep, x);
}

static ssize_t t_send(struct fid_ep *fid, const void *buf, size_t len, void *desc,
                      fi_addr_t dest, uint64_t tag, void *context)
{
    xfer_t x = {(void *)buf, len, dest, tag, 0, 0, FI_TAGGED | EP(fid)->tx_op_flags, context, 0};

    x.flags &= ~(uint64_t)(FI_INJECT | FI_REMOTE_CQ_DATA);
    return send_tagged(EP(fid), &x);
}

static ssize_t t_sendv(struct fid_ep *fid, const struct iovec *iov, void **desc, size_t count,
                       fi_addr_t dest, uint64_t tag, void *context)
{
    void *buf;
    size_t len;

    if (iov_one(iov, count, &buf, &len) != 0)
        return -FI_EINVAL;
    return t_send(fid, buf, len, NULL, dest, tag, context);
}

#define SENDMSG_FLAGS (FAB_TX_OP_FLAGS | FI_MORE | FI_FENCE)

static ssize_t t_sendmsg(struct fid_ep *fid, const struct fi_msg_tagged *msg, uint64_t flags)
{
    xfer_t x = {NULL, 0, msg ? msg->addr : 0, msg ? msg->tag : 0, 0, msg ? msg->data : 0,
                FI_TAGGED | flags, msg ? msg->context : NULL, 0};

    if (msg == NULL || (flags & ~(uint64_t)SENDMSG_FLAGS)) {
        FAB_WARN(FI_LOG_EP_DATA, "fi_tsendmsg: no message or flags 0x%llx\n",
                 (unsigned long long)flags);
        return msg == NULL ? -FI_EINVAL : -FI_EBADFLAGS;
    }
    if (iov_one(msg->msg_iov, msg->iov_count, &x.buf, &x.len) != 0)
        return -FI_EINVAL;
    return ep_send(EP(fid), &x);
}

static ssize_t t_inject(struct fid_ep *fid, const void *buf, size_t len, fi_addr_t dest,
                        uint64_t tag)
{
    xfer_t x = {(void *)buf, len, dest, tag, 0, 0, FI_TAGGED | FI_INJECT, NULL, 1};

    return send_fast(EP(fid), &x);
}

/* Whether a short tagged send with remote data can go straight to
 * tmx_tinject without the general path's checks and lock: what
 * send_usual and send_fast would decide for it, on an endpoint of one
 * thread. */
static inline int senddata_direct(const fab_ep_t *ep, const void *buf, size_t len, fi_addr_t dest,
                                  uint64_t tag)
{
    return ep->enabled && (ep->caps & FI_TAGGED) && !ep->dom->mt && len <= FAB_INJECT_SIZE &&
           (buf != NULL || len == 0) && !(tag & ep->msg_bit) && fab_av_valid(ep->av, dest);
}

static ssize_t t_senddata(struct fid_ep *fid, const void *buf, size_t len, void *desc,
                          uint64_t data, fi_addr_t dest, uint64_t tag, void *context)
{
    fab_ep_t *ep = EP(fid);
    uint64_t flags = ep->tx_op_flags;

    if (__builtin_expect(senddata_direct(ep, buf, len, dest, tag) && ep->tx_cq != NULL &&
                             !(flags & (FI_DELIVERY_COMPLETE | FI_MATCH_COMPLETE)),
                         1)) {
        tmx_status_t st = tmx_tinject(ep->tmx, (tmx_peer_t)dest, buf, len, tag, 1, data);
        if (st != TMX_OK)
            return -fab_errno(st);
        if (ep->tx_cntr)
            fab_cntr_count(ep->tx_cntr, 0);
        if (!ep->tx_selective || (flags & FI_COMPLETION)) {
            fab_cqe_t e = {.e = {.op_context = context, .flags = FI_TAGGED | FI_SEND},
                           .src = FI_ADDR_NOTAVAIL};
            fab_cq_push(ep->tx_cq, &e);
        }
        return 0;
    }
    xfer_t x = {(void *)buf, len, dest, tag, 0, data, FI_TAGGED | flags, context, 0};

    x.flags = (x.flags & ~(uint64_t)FI_INJECT) | FI_REMOTE_CQ_DATA;
    return send_tagged(EP(fid), &x);
}

static ssize_t t_injectdata(struct fid_ep *fid, const void *buf, size_t len, uint64_t data,
                            fi_addr_t dest, uint64_t tag)
{
    fab_ep_t *ep = EP(fid);

    if (__builtin_expect(senddata_direct(ep, buf, len, dest, tag), 1)) {
        tmx_status_t st = tmx_tinject(ep->tmx, (tmx_peer_t)dest, buf, len, tag, 1, data);
        if (st != TMX_OK)
            return -fab_errno(st);
        if (ep->tx_cntr)
            fab_cntr_count(ep->tx_cntr, 0);
        return 0;
    }
    xfer_t x = {(void *)buf, len, dest, tag, 0, data, FI_TAGGED | FI_INJECT | FI_REMOTE_CQ_DATA,
                NULL, 1};

    return send_fast(ep, &x);
}

struct fi_ops_tagged fab_tagged_ops = {
    .size = sizeof(struct fi_ops_tagged),
    .recv = t_recv,
    .recvv = t_recvv,
    .recvmsg = t_recvmsg,
    .send = t_send,
    .sendv = t_sendv,
    .sendmsg = t_sendmsg,
    .inject = t_inject,
    .senddata = t_senddata,
    .injectdata = t_injectdata,
};

/* ------------------------------------------------- untagged equivalents */

static ssize_t m_recv(struct fid_ep *fid, void *buf, size_t len, void *desc, fi_addr_t src,
                      void *context)
{
    xfer_t x = {buf, len, src, 0, 0, 0, FI_MSG | EP(fid)->rx_op_flags, context, 0};

    return ep_recv(EP(fid), &x);
}

static ssize_t m_recvv(struct fid_ep *fid, const struct iovec *iov, void **desc, size_t count,
                       fi_addr_t src, void *context)
{
    void *buf;
    size_t len;

    if (iov_one(iov, count, &buf, &len) != 0)
        return -FI_EINVAL;
    return m_recv(fid, buf, len, NULL, src, context);
}

static ssize_t m_recvmsg(struct fid_ep *fid, const struct fi_msg *msg, uint64_t flags)
{
    xfer_t x = {NULL, 0, msg ? msg->addr : 0, 0, 0, 0, FI_MSG | (flags & ~(uint64_t)FI_MORE),
                msg ? msg->context : NULL, 0};
    uint64_t ok = FI_COMPLETION | FI_REMOTE_CQ_DATA | FI_MORE | (EP(fid)->urq_on ? FI_MULTI_RECV : 0);

    if (msg == NULL || (flags & ~ok)) {
        FAB_WARN(FI_LOG_EP_DATA, "fi_recvmsg: no message or flags 0x%llx\n",
                 (unsigned long long)flags);
        return msg == NULL ? -FI_EINVAL : -FI_EBADFLAGS;
    }
    if (iov_one(msg->msg_iov, msg->iov_count, &x.buf, &x.len) != 0)
        return -FI_EINVAL;
    return ep_recv(EP(fid), &x);
}

static ssize_t m_send(struct fid_ep *fid, const void *buf, size_t len, void *desc,
                      fi_addr_t dest, void *context)
{
    xfer_t x = {(void *)buf, len, dest, 0, 0, 0, FI_MSG | EP(fid)->tx_op_flags, context, 0};

    x.flags &= ~(uint64_t)(FI_INJECT | FI_REMOTE_CQ_DATA);
    return ep_send(EP(fid), &x);
}

static ssize_t m_sendv(struct fid_ep *fid, const struct iovec *iov, void **desc, size_t count,
                       fi_addr_t dest, void *context)
{
    void *buf;
    size_t len;

    if (iov_one(iov, count, &buf, &len) != 0)
        return -FI_EINVAL;
    return m_send(fid, buf, len, NULL, dest, context);
}

static ssize_t m_sendmsg(struct fid_ep *fid, const struct fi_msg *msg, uint64_t flags)
{
    xfer_t x = {NULL, 0, msg ? msg->addr : 0, 0, 0, msg ? msg->data : 0, FI_MSG | flags,
                msg ? msg->context : NULL, 0};

    if (msg == NULL || (flags & ~(uint64_t)SENDMSG_FLAGS)) {
        FAB_WARN(FI_LOG_EP_DATA, "fi_sendmsg: no message or flags 0x%llx\n",
                 (unsigned long long)flags);
        return msg == NULL ? -FI_EINVAL : -FI_EBADFLAGS;
    }
    if (iov_one(msg->msg_iov, msg->iov_count, &x.buf, &x.len) != 0)
        return -FI_EINVAL;
    return ep_send(EP(fid), &x);
}

static ssize_t m_inject(struct fid_ep *fid, const void *buf, size_t len, fi_addr_t dest)
{
    xfer_t x = {(void *)buf, len, dest, 0, 0, 0, FI_MSG | FI_INJECT, NULL, 1};

    return ep_send(EP(fid), &x);
}

static ssize_t m_senddata(struct fid_ep *fid, const void *buf, size_t len, void *desc,
                          uint64_t data, fi_addr_t dest, void *context)
{
    xfer_t x = {(void *)buf, len, dest, 0, 0, data, FI_MSG | EP(fid)->tx_op_flags, context, 0};

    x.flags = (x.flags & ~(uint64_t)FI_INJECT) | FI_REMOTE_CQ_DATA;
    return ep_send(EP(fid), &x);
}

static ssize_t m_injectdata(struct fid_ep *fid, const void *buf, size_t len, uint64_t data,
                            fi_addr_t dest)
{
    xfer_t x = {(void *)buf, len, dest, 0, 0, data, FI_MSG | FI_INJECT | FI_REMOTE_CQ_DATA, NULL,
                1};

    return ep_send(EP(fid), &x);
}

struct fi_ops_msg fab_msg_ops = {
    .size = sizeof(struct fi_ops_msg),
    .recv = m_recv,
    .recvv = m_recvv,
    .recvmsg = m_recvmsg,
    .send = m_send,
    .sendv = m_sendv,
    .sendmsg = m_sendmsg,
    .inject = m_inject,
    .senddata = m_senddata,
    .injectdata = m_injectdata,
};
