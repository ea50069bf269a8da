/* The emulated remote read: see tl_emu.h. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tl/tl_emu.h"
#include "util/fault.h"
#include "util/log.h"

/* A read we wait for. */
typedef struct emu_get {
    util_dlist_t link;
    tl_ep_t *ep;                /* the owner */
    unsigned char *dst;
    tl_emu_req_t req;
    uint64_t received;          /* bytes in: the chunks come in order */
    int req_sent;
    uint64_t asked_us;          /* when the request went out, then when its
                                   data last came: what a wait counts from */
    uint64_t stall_us;          /* when the transport last reported it stalled
                                   (ops->waiting; 0: never) */
    tl_get_op_t *op;
} emu_get_t;

/* A read we answer. */
typedef struct emu_serve {
    util_dlist_t link;
    tl_ep_t *ep;                /* the reader */
    tl_emu_req_t req;
    uint64_t offset;            /* the next chunk */
    tmx_status_t status;        /* not TMX_OK: one refusal goes, then the end */
    int refused;                /* refused on arrival: counted in n_refused[refused - 1] */
} emu_serve_t;

/* A write we make. */
typedef struct emu_push {
    util_dlist_t link;
    tl_ep_t *ep;                /* the target */
    const unsigned char *src;
    uint64_t len;
    uint64_t raddr, rkey;       /* the target's memory and its key */
    uint64_t lkey;              /* src's key here */
    uint64_t offset;            /* the next chunk */
    tmx_status_t status;        /* TMX_INPROGRESS until every chunk went, or an error */
} emu_push_t;

static atomic_uint emu_alloc_fails; /* tl_emu_test_fail_alloc */

void tl_emu_test_fail_alloc(unsigned n)
{
    atomic_store(&emu_alloc_fails, n);
}

/* A zeroed record, or NULL when out of memory (or told to fail). */
static void *emu_alloc(size_t size)
{
    return util_fault_take(&emu_alloc_fails) ? NULL : calloc(1, size);
}

static uint64_t emu_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void tl_emu_init(tl_emu_t *e, tl_iface_t *iface, const tl_emu_ops_t *ops, size_t chunk)
{
    e->iface = iface;
    e->ops = ops;
    e->chunk = chunk;
    e->next_id = 0;
    e->n_refused[0] = e->n_refused[1] = 0;
    e->n_nomem = 0;
    util_dlist_init(&e->gets);
    util_dlist_init(&e->serves);
    util_dlist_init(&e->pushes);
}

/* ------------------------------------------------------------ the reader */

static void get_finish(emu_get_t *g, tmx_status_t st)
{
    util_dlist_unlink(&g->link);
    g->op->done(g->op, st);
    free(g);
}

/* 1 when the request went out or the read ended, 0 to try again later. */
static int get_ask(tl_emu_t *e, emu_get_t *g)
{
    tmx_status_t st = e->ops->req_send(g->ep, &g->req);

    if (st == TMX_ERR_AGAIN)
        return 0;
    if (st != TMX_OK) {
        util_error("%s: a read of %llu bytes from peer %016llx could not be asked: %s", e->iface->ops->name,
                   (unsigned long long)g->req.len, (unsigned long long)g->ep->uuid, tmx_strerror(st));
        get_finish(g, st);
        return 1;
    }
    g->req_sent = 1;
    g->asked_us = emu_now_us();
    return 1;
}

tmx_status_t tl_emu_get(tl_emu_t *e, tl_ep_t *ep, void *dst, size_t len, uint64_t raddr,
                        uint64_t rkey, tl_get_op_t *op)
{
    emu_get_t *g;

    if (len == 0)
        return TMX_OK;
    if ((g = emu_alloc(sizeof(*g))) == NULL)
        return TMX_ERR_NOMEM;
    g->ep = ep;
    g->dst = dst;
    g->op = op;
    g->req = (tl_emu_req_t){++e->next_id, raddr, rkey, len};
    util_dlist_push_tail(&e->gets, &g->link);
    get_ask(e, g);
    return TMX_INPROGRESS;
}

static emu_get_t *get_find(tl_emu_t *e, tl_ep_t *ep, uint32_t id)
{
    util_dlist_t *pos;

    util_dlist_foreach(pos, &e->gets) {
        emu_get_t *g = util_container_of(pos, emu_get_t, link);
        if (g->req.id == id && g->ep == ep)
            return g;
    }
    return NULL;
}

tmx_status_t tl_emu_data_arrive(tl_emu_t *e, tl_ep_t *ep, uint32_t id, uint64_t offset,
                                tmx_status_t status, const void *p, size_t n, uint64_t now_us)
{
    emu_get_t *g = get_find(e, ep, id);

    /* a chunk out of order would leave a hole that counting bytes
     * cannot see: the transports deliver one owner's chunks in order */
    if (g == NULL || !g->req_sent || offset != g->received || n > g->req.len - offset)
        return TMX_ERR_INVALID;
    if (status != TMX_OK) {
        util_error("%s: peer %016llx refused a read of %llu bytes: %s", e->iface->ops->name,
                   (unsigned long long)ep->uuid, (unsigned long long)g->req.len, tmx_strerror(status));
        get_finish(g, status < 0 ? status : TMX_ERR_IO);
        return TMX_OK;
    }
    memcpy(g->dst + offset, p, n);
    g->received += n;
    if (now_us > g->asked_us)
        g->asked_us = now_us;
    if (g->received == g->req.len)
        get_finish(g, TMX_OK);
    return TMX_OK;
}

/* ------------------------------------------------------------- the owner */

static int serve_push(tl_emu_t *e, emu_serve_t *s);

static void serve_free(tl_emu_t *e, emu_serve_t *s)
{
    util_dlist_unlink(&s->link);
    if (s->refused)
        e->n_refused[s->refused - 1]--;
    free(s);
}

/* 1 if a read under rkey is being served (and not refused). */
static int key_served(const tl_emu_t *e, uint64_t rkey)
{
    const util_dlist_t *pos;

    util_dlist_foreach(pos, &e->serves) {
        const emu_serve_t *s = util_container_of(pos, emu_serve_t, link);
        if (s->req.rkey == rkey && s->status == TMX_OK)
            return 1;
    }
    return 0;
}

/* No memory to serve req: the reader is refused without any, at once or
 * from the table that waits for room (tl_emu_progress), so that its read
 * fails instead of waiting until one of us fails. TMX_ERR_NOMEM when the
 * table is full too. */
static tmx_status_t serve_nomem(tl_emu_t *e, tl_ep_t *ep, const tl_emu_req_t *req)
{
    tmx_status_t st = e->ops->data_send(ep, req->id, 0, TMX_ERR_NOMEM, NULL, 0, req->rkey);

    util_error("%s: no memory to serve a read of %llu bytes for peer %016llx: refused", e->iface->ops->name,
               (unsigned long long)req->len, (unsigned long long)ep->uuid);
    if (st != TMX_ERR_AGAIN)
        return TMX_OK; /* gone, or the transport's refusal ends ep */
    if (e->n_nomem == TL_EMU_NOMEM_MAX)
        return TMX_ERR_NOMEM;
    e->nomem[e->n_nomem++] = (struct tl_emu_nomem){ep, req->id, req->rkey};
    return TMX_OK;
}

/* Sends the refusals serve_nomem kept; the number sent. */
static int nomem_progress(tl_emu_t *e)
{
    uint32_t i = 0, kept = 0;

    for (; i < e->n_nomem; i++) {
        struct tl_emu_nomem *n = &e->nomem[i];
        if (e->ops->data_send(n->ep, n->id, 0, TMX_ERR_NOMEM, NULL, 0, n->rkey) == TMX_ERR_AGAIN)
            e->nomem[kept++] = *n;
    }
    e->n_nomem = kept;
    return (int)(i - kept);
}

tmx_status_t tl_emu_req_arrive(tl_emu_t *e, tl_ep_t *ep, const tl_emu_req_t *req)
{
    emu_serve_t *s = emu_alloc(sizeof(*s));
    int kind;

    if (s == NULL)
        return serve_nomem(e, ep, req);
    s->ep = ep;
    s->req = *req;
    /* asked once here so that a request for nothing lent is refused
     * before any chunk, and again for every chunk (serve_push) */
    s->status = e->iface->mem_check(e->iface->recv_arg, req->raddr, req->len, req->rkey);
    /* A key lends its memory to one read at a time: another request under
     * it while it is served (its reader's again, or anyone's who learned
     * the key) is refused, so that the reads served are as many as the
     * keys we lent, not as the requests we are sent. */
    if (s->status == TMX_OK && key_served(e, req->rkey))
        s->status = TMX_ERR_BUSY;
    util_dlist_push_tail(&e->serves, &s->link);
    if (s->status == TMX_OK)
        return TMX_OK; /* a key only a send of ours gave out: as many as those */
    /* Refused: any process can ask for nothing lent, as often as it
     * likes, and need not acknowledge the refusals. One goes now if it
     * can; those that must wait for room are bounded, strangers' apart
     * from peers', the rest dropped. A peer whose request is dropped so
     * (its owner's send ended, its window full, and
     * TL_EMU_REFUSED_PEERS_MAX refusals to peers waiting, which
     * strangers cannot fill) is not told: its read waits until one of
     * the two fails. */
    if (serve_push(e, s)) {
        serve_free(e, s);
        return TMX_OK;
    }
    kind = ep->kind == TL_EP_ADDED; /* anyone becomes implicit */
    if (e->n_refused[kind] >= (kind ? TL_EMU_REFUSED_PEERS_MAX : TL_EMU_REFUSED_MAX)) {
        serve_free(e, s);
        return TMX_ERR_AGAIN;
    }
    s->refused = 1 + kind;
    e->n_refused[kind]++;
    return TMX_OK;
}

/* Sends chunks while there is room; 1 when the whole read (or the
 * refusal) is on its way. */
static int serve_push(tl_emu_t *e, emu_serve_t *s)
{
    do {
        uint64_t left = s->req.len - s->offset;
        size_t n = s->status != TMX_OK ? 0 : (left < e->chunk ? (size_t)left : e->chunk);
        const void *src = (const void *)(uintptr_t)(s->req.raddr + s->offset);
        tmx_status_t st;

        /* the memory is lent only while the owner's send lasts: asked
         * again for every chunk, so that a send that failed meanwhile
         * ends the read with one refusal and nothing freed is read */
        if (n > 0 && (st = e->iface->mem_check(e->iface->recv_arg, s->req.raddr + s->offset, n,
                                               s->req.rkey)) != TMX_OK) {
            s->status = st;
            n = 0;
        }
        st = e->ops->data_send(s->ep, s->req.id, s->offset, s->status, n ? src : NULL, n, s->req.rkey);
        if (st == TMX_ERR_AGAIN)
            return 0;
        if (st != TMX_OK)
            return 1;
        s->offset += n;
    } while (s->status == TMX_OK && s->offset < s->req.len);
    return 1;
}

/* ------------------------------------------------------------- the writer */

/* Sends chunks while there is room; the write's end is kept in status. */
static void push_send(tl_emu_t *e, emu_push_t *w)
{
    while (w->status == TMX_INPROGRESS && w->offset < w->len) {
        uint64_t left = w->len - w->offset;
        size_t n = left < e->chunk ? (size_t)left : e->chunk;
        tmx_status_t st = e->iface->mem_check(e->iface->recv_arg, (uintptr_t)(w->src + w->offset), n,
                                              w->lkey);

        if (st == TMX_OK)
            st = e->ops->put_send(w->ep, w->raddr + w->offset, w->rkey, w->src + w->offset, n, w->lkey);
        if (st == TMX_ERR_AGAIN)
            return;
        if (st != TMX_OK) {
            w->status = st;
            return;
        }
        w->offset += n;
    }
    if (w->status == TMX_INPROGRESS)
        w->status = TMX_OK;
}

tmx_status_t tl_emu_put(tl_emu_t *e, tl_ep_t *ep, const void *src, size_t len, uint64_t raddr,
                        uint64_t rkey, uint64_t lkey)
{
    emu_push_t *w = emu_alloc(sizeof(*w));

    if (w == NULL)
        return TMX_ERR_NOMEM;
    *w = (emu_push_t){.ep = ep, .src = src, .len = len, .raddr = raddr, .rkey = rkey, .lkey = lkey,
                      .status = TMX_INPROGRESS};
    util_dlist_push_tail(&e->pushes, &w->link);
    push_send(e, w); /* its end is reported by tl_emu_progress, never here */
    return TMX_INPROGRESS;
}

int tl_emu_progress(tl_emu_t *e, uint64_t now_us)
{
    util_dlist_t *pos, *tmp;
    int events = 0;

    util_dlist_foreach_safe(pos, tmp, &e->pushes) {
        emu_push_t *w = util_container_of(pos, emu_push_t, link);
        push_send(e, w);
        if (w->status != TMX_INPROGRESS) {
            tmx_status_t st = w->status;
            uint64_t lkey = w->lkey;
            if (st != TMX_OK)
                util_error("%s: a write of %llu bytes to peer %016llx ended: %s", e->iface->ops->name,
                           (unsigned long long)w->len, (unsigned long long)w->ep->uuid, tmx_strerror(st));
            util_dlist_unlink(&w->link);
            free(w);
            e->iface->put_done(e->iface->recv_arg, lkey, st);
            events++;
        }
    }

    if (e->n_nomem != 0)
        events += nomem_progress(e);
    util_dlist_foreach_safe(pos, tmp, &e->serves) {
        emu_serve_t *s = util_container_of(pos, emu_serve_t, link);
        if (serve_push(e, s)) {
            serve_free(e, s);
            events++;
        }
    }
    util_dlist_foreach_safe(pos, tmp, &e->gets) {
        emu_get_t *g = util_container_of(pos, emu_get_t, link);
        if (!g->req_sent)
            events += get_ask(e, g);
        else if (e->ops->waiting != NULL)
            e->ops->waiting(g->ep, g->asked_us, now_us, &g->stall_us);
    }
    return events;
}

/* ------------------------------------------------------------- endings */

void tl_emu_ep_fail(tl_emu_t *e, tl_ep_t *ep)
{
    util_dlist_t *pos, *tmp;
    uint32_t kept = 0;

    for (uint32_t i = 0; i < e->n_nomem; i++) {
        if (e->nomem[i].ep != ep)
            e->nomem[kept++] = e->nomem[i];
    }
    e->n_nomem = kept;

    util_dlist_foreach_safe(pos, tmp, &e->pushes) {
        emu_push_t *w = util_container_of(pos, emu_push_t, link);
        if (w->ep == ep) {
            util_dlist_unlink(&w->link);
            free(w);
        }
    }

    util_dlist_foreach_safe(pos, tmp, &e->serves) {
        emu_serve_t *s = util_container_of(pos, emu_serve_t, link);
        if (s->ep == ep)
            serve_free(e, s);
    }
    util_dlist_foreach_safe(pos, tmp, &e->gets) {
        emu_get_t *g = util_container_of(pos, emu_get_t, link);
        if (g->ep == ep)
            get_finish(g, TMX_ERR_PEER_FAILED);
    }
}

void tl_emu_abandon(tl_emu_t *e)
{
    util_dlist_t *pos, *tmp;

    util_dlist_foreach_safe(pos, tmp, &e->gets) {
        free(util_container_of(pos, emu_get_t, link));
    }
    util_dlist_foreach_safe(pos, tmp, &e->serves) {
        free(util_container_of(pos, emu_serve_t, link));
    }
    util_dlist_foreach_safe(pos, tmp, &e->pushes) {
        free(util_container_of(pos, emu_push_t, link));
    }
    util_dlist_init(&e->gets);
    util_dlist_init(&e->serves);
    util_dlist_init(&e->pushes);
    e->n_refused[0] = e->n_refused[1] = 0;
    e->n_nomem = 0;
}
