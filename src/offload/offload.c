/*
 * The TM-SRQ of seed 000 in software (offload.h). Tagged buffers live in a
 * table of max_num_tags slots, linked in the order their ADDs were
 * processed; a handle is a slot and the slot's generation, so a DEL of a
 * buffer consumed meanwhile (its slot perhaps listed again for another
 * ADD) fails with TM_ERR instead of deleting the wrong buffer.
 *
 * The matchable tags are always a prefix of the list (offload.h, "The
 * synchronisation rule"): a tag is added unmatchable only at the tail, and
 * all become matchable together at a sync. An arrival therefore scans the
 * list from its head and stops at the first unmatchable tag: at most
 * max_num_tags looks, as a device's matching list is bounded.
 */
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "offload/offload.h"
#include "util/copy.h"
#include "util/log.h"

#define NIL UINT32_MAX

enum tb_state {
    TB_FREE = 0,
    TB_QUEUED,   /* its ADD is posted, not yet processed */
    TB_LISTED,   /* in the matching list */
    TB_READING,  /* matched by a rendezvous request, its read in flight */
    TB_DONE      /* consumed; its last completion not yet taken */
};

typedef struct off_tagbuf {
    uint16_t gen;
    uint8_t state;
    uint8_t matchable;
    uint32_t prev, next;     /* the list, while TB_LISTED */
    uint32_t next_free;
    uint64_t recv_wr_id;
    void *buf;
    size_t len;
    uint32_t src;
    uint64_t tag, ignore;
    off_msg_t msg;           /* TB_READING: the request (no data) */
} off_tagbuf_t;

struct off_engine {
    pthread_mutex_t lock;
    int locking;             /* 0: the caller serialises every call */
    off_caps_t caps;
    off_dev_ops_t dev;
    void *dev_arg;

    off_tagbuf_t *tb;
    uint32_t free_head;
    uint32_t head, tail;     /* the matching list, ADD order */
    uint32_t n_unmatchable;  /* listed and not matchable: the list's tail */

    off_op_t *opq;           /* a ring of caps.max_ops */
    size_t opq_head, opq_n;

    off_cqe_t *cq;           /* a ring that grows */
    size_t cq_head, cq_n, cq_cap;
    size_t cq_owed;          /* reads in flight: room kept for their DATA_VALID */
    unsigned cq_fail;        /* reservations left to fail (off_engine_fail_cq) */

    uint32_t hw_unexp;       /* messages passed to the host */
    uint32_t sw_reported;    /* what the host's last operation said */
    off_stats_t stats;
};

static void lock(off_engine_t *e)
{
    if (e->locking)
        pthread_mutex_lock(&e->lock);
}

static void unlock(off_engine_t *e)
{
    if (e->locking)
        pthread_mutex_unlock(&e->lock);
}

static void cqe_free_data(off_cqe_t *c)
{
    free((void *)c->msg.data);
    c->msg.data = NULL;
}

/* Room in the ring for n more completions besides the one owed to every
 * read in flight (its DATA_VALID, which off_read_done cannot refuse): 0,
 * or -1 (logged) without memory. */
static int cq_reserve(off_engine_t *e, size_t n)
{
    size_t need = e->cq_n + e->cq_owed + n;

    if (__builtin_expect(e->cq_fail > 0, 0)) {
        e->cq_fail--;
        util_error("offload: no memory for a completion (a test's)");
        return -1;
    }
    if (need > e->cq_cap) {
        size_t cap = e->cq_cap ? e->cq_cap : 64;
        off_cqe_t *c;
        while (cap < need)
            cap *= 2;
        if ((c = malloc(cap * sizeof(*c))) == NULL) {
            util_error("offload: no memory for %zu completions", cap);
            return -1;
        }
        for (size_t i = 0; i < e->cq_n; i++)
            c[i] = e->cq[(e->cq_head + i) & (e->cq_cap - 1)];
        free(e->cq);
        e->cq = c;
        e->cq_cap = cap;
        e->cq_head = 0;
    }
    return 0;
}

/* A completion at the ring's end, in room reserved before (cq_reserve,
 * or a read's owed room). */
static off_cqe_t *cq_push(off_engine_t *e)
{
    off_cqe_t *c = &e->cq[(e->cq_head + e->cq_n++) & (e->cq_cap - 1)];

    util_zero(c, sizeof(*c));
    if (e->hw_unexp != e->sw_reported)
        c->flags = OFF_WC_TM_SYNC_REQ;
    return c;
}

static uint32_t handle_of(const off_engine_t *e, uint32_t i)
{
    return i | (uint32_t)e->tb[i].gen << 16;
}

/* The slot a handle names while it is still that buffer, or NIL. */
static uint32_t slot_of(const off_engine_t *e, uint32_t handle)
{
    uint32_t i = handle & 0xffffu;

    if (i >= e->caps.max_num_tags || e->tb[i].gen != (uint16_t)(handle >> 16) ||
        e->tb[i].state == TB_FREE)
        return NIL;
    return i;
}

static void slot_free(off_engine_t *e, uint32_t i)
{
    off_tagbuf_t *t = &e->tb[i];

    t->state = TB_FREE;
    t->gen++;
    t->next_free = e->free_head;
    e->free_head = i;
}

static void list_unlink(off_engine_t *e, uint32_t i)
{
    off_tagbuf_t *t = &e->tb[i];

    if (t->prev != NIL)
        e->tb[t->prev].next = t->next;
    else
        e->head = t->next;
    if (t->next != NIL)
        e->tb[t->next].prev = t->prev;
    else
        e->tail = t->prev;
    if (!t->matchable)
        e->n_unmatchable--;
    e->stats.listed--;
}

/* ------------------------------------------------------------ open, close */

tmx_status_t off_engine_open(const off_caps_t *caps, const off_dev_ops_t *dev, void *dev_arg,
                             off_engine_t **out)
{
    off_caps_t c = {OFF_DEF_MAX_NUM_TAGS, OFF_DEF_MAX_OPS, OFF_DEF_MAX_RNDV_HDR_SIZE};
    off_engine_t *e;

    if (caps != NULL) {
        c.max_num_tags = caps->max_num_tags ? caps->max_num_tags : c.max_num_tags;
        c.max_ops = caps->max_ops ? caps->max_ops : c.max_ops;
        c.max_rndv_hdr_size = caps->max_rndv_hdr_size ? caps->max_rndv_hdr_size
                                                      : c.max_rndv_hdr_size;
    }
    if (c.max_num_tags > OFF_MAX_NUM_TAGS || c.max_ops > (1u << 20) ||
        c.max_rndv_hdr_size < OFF_RNDV_HDR_FIXED || dev == NULL ||
        dev->read == NULL || dev->fin == NULL) {
        util_error("offload: max_num_tags %u (at most %u), max_ops %u (at most %u), "
                   "max_rndv_hdr_size %u (at least %u), or no device operations",
                   c.max_num_tags, OFF_MAX_NUM_TAGS, c.max_ops, 1u << 20, c.max_rndv_hdr_size,
                   OFF_RNDV_HDR_FIXED);
        return TMX_ERR_INVALID;
    }
    if ((e = calloc(1, sizeof(*e))) == NULL ||
        (e->tb = calloc(c.max_num_tags, sizeof(*e->tb))) == NULL ||
        (e->opq = calloc(c.max_ops, sizeof(*e->opq))) == NULL) {
        if (e != NULL)
            free(e->tb);
        free(e);
        return TMX_ERR_NOMEM;
    }
    pthread_mutex_init(&e->lock, NULL);
    e->locking = 1;
    e->caps = c;
    e->dev = *dev;
    e->dev_arg = dev_arg;
    e->head = e->tail = NIL;
    e->free_head = NIL;
    for (uint32_t i = c.max_num_tags; i-- > 0;) {
        e->tb[i].next_free = e->free_head;
        e->free_head = i;
    }
    *out = e;
    return TMX_OK;
}

void off_engine_close(off_engine_t *e)
{
    if (e == NULL)
        return;
    for (size_t i = 0; i < e->cq_n; i++)
        cqe_free_data(&e->cq[(e->cq_head + i) & (e->cq_cap - 1)]);
    pthread_mutex_destroy(&e->lock);
    free(e->cq);
    free(e->opq);
    free(e->tb);
    free(e);
}

void off_engine_set_serialised(off_engine_t *e)
{
    e->locking = 0;
}

void off_engine_caps(const off_engine_t *e, off_caps_t *caps)
{
    *caps = e->caps;
}

void off_engine_fail_cq(off_engine_t *e, unsigned n)
{
    lock(e);
    e->cq_fail = n;
    unlock(e);
}

void off_engine_stats(off_engine_t *e, off_stats_t *s)
{
    lock(e);
    *s = e->stats;
    s->reading = 0;
    for (uint32_t i = 0; i < e->caps.max_num_tags; i++)
        s->reading += e->tb[i].state == TB_READING;
    unlock(e);
}

/* ----------------------------------------------------------- operations */

tmx_status_t off_post_ops(off_engine_t *e, off_op_t *ops, size_t n, off_op_t **bad)
{
    tmx_status_t st = TMX_OK;
    size_t k;

    lock(e);
    for (k = 0; k < n; k++) {
        off_op_t *op = &ops[k];
        if (op->opcode < OFF_WR_TAG_ADD || op->opcode > OFF_WR_TAG_SYNC ||
            (op->flags & ~OFF_OPS_SIGNALED) ||
            (op->opcode == OFF_WR_TAG_ADD && op->add.buf == NULL && op->add.len > 0)) {
            util_error("offload: bad operation (opcode %u, flags 0x%x)", op->opcode,
                          op->flags);
            st = TMX_ERR_INVALID;
            break;
        }
        if (e->opq_n == e->caps.max_ops ||
            (op->opcode == OFF_WR_TAG_ADD && e->free_head == NIL)) {
            st = TMX_ERR_AGAIN;
            break;
        }
        if (op->opcode == OFF_WR_TAG_ADD) {
            uint32_t i = e->free_head;
            off_tagbuf_t *t = &e->tb[i];
            e->free_head = t->next_free;
            t->state = TB_QUEUED;
            op->handle = handle_of(e, i);
        }
        e->opq[(e->opq_head + e->opq_n++) % e->caps.max_ops] = *op;
    }
    unlock(e);
    if (bad != NULL)
        *bad = k < n ? &ops[k] : NULL;
    return st;
}

static void op_complete(off_engine_t *e, const off_op_t *op, enum off_wc_status status)
{
    static const uint8_t wc[] = {0, OFF_WC_TM_ADD, OFF_WC_TM_DEL, OFF_WC_TM_SYNC};
    off_cqe_t *c;

    if (status == OFF_WC_SUCCESS && !(op->flags & OFF_OPS_SIGNALED))
        return;
    if (cq_reserve(e, 1) != 0)
        return;
    c = cq_push(e);
    c->opcode = wc[op->opcode];
    c->status = (uint8_t)status;
    c->wr_id = op->wr_id;
}

static void op_process(off_engine_t *e, const off_op_t *op)
{
    enum off_wc_status status = OFF_WC_SUCCESS;

    if (op->opcode == OFF_WR_TAG_ADD) {
        uint32_t i = op->handle & 0xffffu;
        off_tagbuf_t *t = &e->tb[i];
        t->state = TB_LISTED;
        t->recv_wr_id = op->add.recv_wr_id;
        t->buf = op->add.buf;
        t->len = op->add.len;
        t->src = op->add.src;
        t->tag = op->add.tag;
        t->ignore = op->add.ignore;
        t->matchable = op->unexpected_cnt == e->hw_unexp;
        t->next = NIL;
        t->prev = e->tail;
        if (e->tail != NIL)
            e->tb[e->tail].next = i;
        else
            e->head = i;
        e->tail = i;
        e->stats.listed++;
        if (!t->matchable) {
            e->n_unmatchable++;
            e->stats.added_unsynced++;
        }
    } else if (op->opcode == OFF_WR_TAG_DEL) {
        uint32_t i = slot_of(e, op->handle);
        if (i == NIL || e->tb[i].state != TB_LISTED) {
            status = OFF_WC_TM_ERR; /* consumed meanwhile, or never ours */
        } else {
            list_unlink(e, i);
            slot_free(e, i);
        }
    }
    /* Every operation reports the host's count; the host has now handled
     * every message passed on against its whole list, so every tag may
     * match. */
    e->sw_reported = op->unexpected_cnt;
    if (e->sw_reported == e->hw_unexp && e->n_unmatchable > 0) {
        for (uint32_t i = e->head; i != NIL; i = e->tb[i].next)
            e->tb[i].matchable = 1;
        e->n_unmatchable = 0;
    }
    op_complete(e, op, status);
}

size_t off_engine_run(off_engine_t *e, size_t max)
{
    size_t done = 0;

    lock(e);
    while (done < max && e->opq_n > 0) {
        off_op_t op = e->opq[e->opq_head];
        e->opq_head = (e->opq_head + 1) % e->caps.max_ops;
        e->opq_n--;
        op_process(e, &op);
        done++;
    }
    unlock(e);
    return done;
}

/* ------------------------------------------------------------- arrivals */

/* A completion that hands m whole to the host, data copied: c, or a new
 * one in room reserved before. */
static void to_host(off_engine_t *e, const off_msg_t *m, uint8_t opcode, off_cqe_t *c)
{
    if (c == NULL)
        c = cq_push(e);
    c->opcode = opcode;
    c->src = m->src;
    c->priv = m->app_ctx;
    c->tag = m->tag;
    c->msg = *m;
    c->msg.data = NULL;
    if (m->len > 0) {
        void *d = malloc(m->len);
        if (d == NULL) {
            util_error("offload: no memory for a %zu-byte message from %u: lost", m->len, m->src);
            c->status = OFF_WC_LOC_ERR;
            c->dev_status = TMX_ERR_NOMEM;
            c->msg.len = 0;
        } else {
            memcpy(d, m->data, m->len);
            c->msg.data = d;
        }
    }
}

/* The first matchable tag m matches, or NIL. */
static uint32_t list_match(const off_engine_t *e, const off_msg_t *m)
{
    for (uint32_t i = e->head; i != NIL && e->tb[i].matchable; i = e->tb[i].next) {
        const off_tagbuf_t *t = &e->tb[i];
        if ((t->src == OFF_ANY_SOURCE || t->src == m->src) && ((t->tag ^ m->tag) & ~t->ignore) == 0)
            return i;
    }
    return NIL;
}

/* An eager message that matched slot i, whose buffer takes it (as much of
 * it as fits), completed in c: the buffer's one completion. */
static void eager_complete(off_engine_t *e, const off_msg_t *m, uint32_t i, off_cqe_t *c)
{
    off_tagbuf_t *t = &e->tb[i];
    size_t n = m->len < t->len ? m->len : t->len;

    util_copy(t->buf, m->data, n);
    c->opcode = OFF_WC_TM_RECV;
    c->flags |= OFF_WC_TM_MATCH | OFF_WC_TM_DATA_VALID;
    c->wr_id = t->recv_wr_id;
    c->handle = handle_of(e, i);
    c->src = m->src;
    c->priv = m->app_ctx;
    c->tag = m->tag;
    c->byte_len = n;
    c->msg.op = m->op;
    c->msg.len = m->len;
    c->msg.imm = m->imm;
    c->msg.has_imm = m->has_imm;
    c->status = n < m->len ? OFF_WC_TRUNCATED : OFF_WC_SUCCESS;
}

/* Whether a rendezvous request that matched slot i goes on in the host
 * (RNDV_INCOMPLETE): its buffer is too small, or the request larger than
 * the engine parses. */
static int rndv_incomplete(const off_engine_t *e, const off_msg_t *m, uint32_t i)
{
    return m->rlen > e->tb[i].len || m->len > e->caps.max_rndv_hdr_size - OFF_RNDV_HDR_FIXED;
}

static int arrive(off_engine_t *e, const off_msg_t *m, int inline_host, off_cqe_t *direct)
{
    off_msg_t req;
    void *buf = NULL;
    uint64_t token = 0, recv_wr_id = 0;
    off_cqe_t *c;
    uint32_t i;
    int read = 0, taken = 1, to_direct;

    if ((m->len > 0 && m->data == NULL) || m->len > OFF_MSG_MAX) {
        util_error("offload: a %zu-byte message from %u %s: dropped", m->len, m->src,
                   m->data == NULL ? "without its data" : "longer than any a transport delivers");
        return 3;
    }
    lock(e);
    /* Room for the completion first, so that a message lost for want of
     * memory leaves the engine as it was. None is needed for what an
     * inline host takes in hand, nor for a direct completion. */
    if (m->op != OFF_TM_EAGER && m->op != OFF_TM_RNDV) {
        if (cq_reserve(e, 1) != 0)
            goto lost;
        to_host(e, m, OFF_WC_TM_NO_TAG, NULL);
        goto out;
    }
    if ((i = list_match(e, m)) == NIL) {
        if (!inline_host && cq_reserve(e, 1) != 0)
            goto lost;
        e->hw_unexp++;
        e->stats.unexpected++;
        if (inline_host)
            taken = 0;
        else
            to_host(e, m, OFF_WC_RECV, NULL);
        goto out;
    }
    /* nothing older waits in the ring: an eager completion may go straight
     * to the host, which takes it as it would from the ring */
    to_direct = direct != NULL && m->op == OFF_TM_EAGER && e->cq_n == 0;
    /* a read the engine starts is owed room for its DATA_VALID too */
    read = m->op == OFF_TM_RNDV && !rndv_incomplete(e, m, i);
    if (!to_direct && cq_reserve(e, read ? 2 : 1) != 0)
        goto lost;
    e->stats.matched++;
    off_tagbuf_t *t = &e->tb[i];
    list_unlink(e, i);
    t->state = TB_DONE;
    if (to_direct) {
        util_zero(direct, sizeof(*direct));
        if (e->hw_unexp != e->sw_reported)
            direct->flags = OFF_WC_TM_SYNC_REQ;
        eager_complete(e, m, i, direct);
        slot_free(e, i);
        taken = 2;
        goto out;
    }
    c = cq_push(e); /* reserved above */
    if (m->op == OFF_TM_EAGER) {
        eager_complete(e, m, i, c);
        goto out;
    }
    c->opcode = OFF_WC_TM_RECV;
    c->flags |= OFF_WC_TM_MATCH;
    c->wr_id = t->recv_wr_id;
    c->handle = handle_of(e, i);
    c->src = m->src;
    c->priv = m->app_ctx;
    c->tag = m->tag;
    c->msg.op = m->op;
    c->msg.imm = m->imm;
    c->msg.has_imm = m->has_imm;
    if (!read) {
        /* The buffer is too small, or the request larger than the engine
         * parses: the tag is consumed all the same (an older message may
         * not overtake it), and the headers go to the host, which
         * finishes the message. */
        c->status = OFF_WC_TM_RNDV_INCOMPLETE;
        to_host(e, m, OFF_WC_TM_RECV, c);
        c->flags |= OFF_WC_TM_MATCH;
    } else {
        t->state = TB_READING;
        t->msg = *m;
        t->msg.data = NULL;
        t->msg.len = 0;
        c->msg.rlen = m->rlen;
        req = t->msg;
        buf = t->buf;
        token = c->handle;
        recv_wr_id = t->recv_wr_id;
        e->cq_owed++;
    }
out:
    unlock(e);
    if (read)
        e->dev.read(e->dev_arg, &req, buf, recv_wr_id, token);
    return taken;
lost:
    unlock(e);
    util_error("offload: no room for a completion: a message from %u lost", m->src);
    return 3;
}

void off_arrive(off_engine_t *e, const off_msg_t *m)
{
    arrive(e, m, 0, NULL);
}

int off_arrive_inline(off_engine_t *e, const off_msg_t *m, off_cqe_t *direct)
{
    return arrive(e, m, 1, direct);
}

int off_arrive_unlisted(off_engine_t *e)
{
    int none;

    lock(e);
    /* the matchable tags come first in the list (list_match) */
    none = e->head == NIL || !e->tb[e->head].matchable;
    if (none) {
        e->hw_unexp++;
        e->stats.unexpected++;
    }
    unlock(e);
    return none;
}

/* The slot whose read token names, locked; NIL (unlocked, logged) when
 * it names no read in flight. */
static uint32_t reading_slot(off_engine_t *e, uint64_t token, const char *what)
{
    uint32_t i;

    lock(e);
    i = token <= UINT32_MAX ? slot_of(e, (uint32_t)token) : NIL;
    if (i == NIL || e->tb[i].state != TB_READING) {
        unlock(e);
        util_error("offload: a read %s that is not in flight (token 0x%llx)", what,
                   (unsigned long long)token);
        return NIL;
    }
    return i;
}

void off_read_done(off_engine_t *e, uint64_t token, tmx_status_t status)
{
    off_msg_t req;
    off_cqe_t *c;
    uint32_t i = reading_slot(e, token, "completed");

    if (i == NIL)
        return;
    req = e->tb[i].msg;
    e->cq_owed--;
    c = cq_push(e); /* in the room the read was owed */
    c->opcode = OFF_WC_TM_RECV;
    c->flags |= OFF_WC_TM_DATA_VALID;
    c->wr_id = e->tb[i].recv_wr_id;
    c->handle = handle_of(e, i);
    c->src = req.src;
    c->priv = req.app_ctx;
    c->tag = req.tag;
    c->byte_len = status == TMX_OK ? req.rlen : 0;
    c->msg = req; /* headers only: its data stayed with the request */
    c->status = status == TMX_OK ? OFF_WC_SUCCESS : OFF_WC_REM_ERR;
    c->dev_status = status;
    e->tb[i].state = TB_DONE;
    unlock(e);
    /* The sender's buffer is released by FIN, whatever the read gave: a
     * failed read is reported here and not retried. */
    e->dev.fin(e->dev_arg, &req, status);
}

int off_read_abandon(off_engine_t *e, uint64_t token)
{
    uint32_t i = reading_slot(e, token, "abandoned");

    if (i == NIL)
        return -1;
    e->cq_owed--;
    slot_free(e, i);
    unlock(e);
    return 0;
}

/* ---------------------------------------------------------- completions */

int off_cq_empty(off_engine_t *e)
{
    int empty;

    lock(e);
    empty = e->cq_n == 0;
    unlock(e);
    return empty;
}

size_t off_poll_cq(off_engine_t *e, off_cqe_t *out, size_t n)
{
    size_t k = 0;

    lock(e);
    while (k < n && e->cq_n > 0) {
        off_cqe_t *c = &out[k++];
        *c = e->cq[e->cq_head];
        e->cq_head = (e->cq_head + 1) & (e->cq_cap - 1);
        e->cq_n--;
        /* every TM_RECV completion is a buffer's last but the MATCH of a
         * rendezvous the engine reads itself */
        if (c->opcode == OFF_WC_TM_RECV &&
            !(c->status == OFF_WC_SUCCESS && !(c->flags & OFF_WC_TM_DATA_VALID)))
            slot_free(e, c->handle & 0xffffu);
    }
    unlock(e);
    return k;
}

void off_cqe_release(off_cqe_t *c)
{
    cqe_free_data(c);
}
