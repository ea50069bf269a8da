/*
 * Completion queues. Reading a CQ whose ring is empty takes what the tmx
 * contexts of the bound endpoints completed straight into the caller's
 * buffer, in the format the CQ was opened with; the ring holds only what
 * could not go there (an endpoint's sends and receives may go to
 * different CQs). Errors wait in line: a read that reaches one returns
 * -FI_EAVAIL until fi_cq_readerr takes it.
 *
 * A CQ opened with FI_WAIT_FD hands out an eventfd (fi_control
 * FI_GETWAIT). tmx has no single descriptor to offer (shm sleeps on a
 * futex), so fi_trywait arms a thread of the CQ that sleeps in tmx_wait
 * on the CQ's contexts and writes the eventfd once a completion reached
 * the CQ. No wakeup is lost: fi_trywait clears the eventfd and drives
 * progress before it arms, and the armed thread drives progress before
 * each sleep, so a completion that arrives in between is found by the
 * one or the other.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "fab.h"

#define CQ_SLEEP_SLICE_US 10000   /* how soon fi_cq_signal is noticed */
#define WAITER_POLL_MIN_US 50     /* a wait fd's thread polling a single- */
#define WAITER_POLL_MAX_US 1000   /* threaded domain sleeps this long */

int fab_cq_push(fab_cq_t *cq, const fab_cqe_t *c)
{
    if (cq->count == cq->cap) {
        size_t cap = cq->cap * 2;
        fab_cqe_t *r = malloc(cap * sizeof(*r));
        if (r == NULL) {
            FAB_WARN(FI_LOG_CQ, "CQ of %zu entries cannot grow: completion lost\n", cq->cap);
            return -FI_ENOMEM;
        }
        for (size_t i = 0; i < cq->count; i++)
            r[i] = cq->ring[(cq->head + i) & (cq->cap - 1)];
        free(cq->ring);
        cq->ring = r;
        cq->cap = cap;
        cq->head = 0;
    }
    cq->ring[(cq->head + cq->count) & (cq->cap - 1)] = *c;
    cq->count++;
    return 0;
}

/* ------------------------------------------------------ tmx completions */

/* With FI_TAGGED and FI_MSG both on, the message bit tells untagged from
 * tagged; otherwise the endpoint does only one of them. */
static uint64_t tag_kind(const fab_ep_t *ep, uint64_t tag)
{
    if (ep->msg_bit)
        return (tag & ep->msg_bit) ? FI_MSG : FI_TAGGED;
    return (ep->caps & FI_TAGGED) ? FI_TAGGED : FI_MSG;
}

static void fill_error(const tmx_completion_t *c, fab_cqe_t *e)
{
    e->err = fab_errno(c->status);
    e->prov_errno = c->status;
    if (c->status == TMX_ERR_TRUNCATED)
        e->olen = c->msg_length - c->length;
}

/* A send's tmx user context is the application's own; sends that want no
 * completion were posted without one. */
static fab_cq_t *send_complete(fab_ep_t *ep, const tmx_completion_t *c, fab_cqe_t *e)
{
    *e = (fab_cqe_t){.e = {.op_context = c->user_context, .flags = tag_kind(ep, c->tag) | FI_SEND},
                     .src = FI_ADDR_NOTAVAIL};
    if (c->status != TMX_OK)
        fill_error(c, e);
    return ep->tx_cq;
}

static fab_cq_t *recv_complete(fab_ep_t *ep, const tmx_completion_t *c, fab_cqe_t *e)
{
    uint64_t kind = tag_kind(ep, c->tag);

    *e = (fab_cqe_t){.e = {.op_context = c->user_context, .flags = kind | FI_RECV, .len = c->length},
                     .src = fab_av_valid(ep->av, c->source) ? c->source : FI_ADDR_NOTAVAIL};
    if (kind == FI_TAGGED)
        e->e.tag = c->tag & ~ep->msg_bit;
    if (c->has_data) {
        e->e.data = c->data;
        e->e.flags |= FI_REMOTE_CQ_DATA;
    }
    if (c->status != TMX_OK)
        fill_error(c, e);
    return ep->rx_cq;
}

/* A message an untagged receive of an endpoint with FI_MULTI_RECV took
 * (fab_msg.c): its tmx user context is the provider's op, which names the
 * receive and where in its buffer the message went. The receive's last
 * message, once it takes no more, says so (FI_MULTI_RECV): its buffer is
 * the application's again. */
fab_cq_t *fab_urq_complete(fab_ep_t *ep, const tmx_completion_t *c, fab_cqe_t *e)
{
    fab_op_t *op = c->user_context;
    fab_urecv_t *u = op->u;
    int last, quiet;

    *e = (fab_cqe_t){.e = {.op_context = u->context, .flags = FI_MSG | FI_RECV, .len = c->length,
                           .buf = op->buf},
                     .src = fab_av_valid(ep->av, c->source) ? c->source : FI_ADDR_NOTAVAIL};
    if (c->has_data) {
        e->e.data = c->data;
        e->e.flags |= FI_REMOTE_CQ_DATA;
    }
    if (c->status != TMX_OK)
        fill_error(c, e);
    fab_op_put(ep, op);
    last = --u->inflight == 0 && u->released;
    if (last && u->multi)
        e->e.flags |= FI_MULTI_RECV;
    quiet = u->quiet && e->err == 0 && !(last && u->multi); /* a release is always said */
    if (last)
        fab_urq_free_one(u);
    return quiet ? NULL : ep->rx_cq;
}

/* Turns a tmx completion into *e and counts it; returns the CQ it goes
 * to, NULL for a counted success that wants no CQ entry. */
static fab_cq_t *ep_complete(fab_ep_t *ep, const tmx_completion_t *c, fab_cqe_t *e)
{
    int send = c->op == TMX_OP_TSEND;

    if (!send && ep->urq_on && tag_kind(ep, c->tag) == FI_MSG) {
        fab_cq_t *to = fab_urq_complete(ep, c, e);
        if (ep->rx_cntr != NULL)
            fab_cntr_count(ep->rx_cntr, e->err != 0);
        return to;
    }
    fab_cq_t *cq = send ? send_complete(ep, c, e) : recv_complete(ep, c, e);
    fab_cntr_t *cntr = send ? ep->tx_cntr : ep->rx_cntr;

    if (cntr != NULL)
        fab_cntr_count(cntr, e->err != 0);
    if (c->user_context == FAB_COUNT_ONLY) {
        e->e.op_context = NULL;
        return e->err != 0 ? cq : NULL;
    }
    return cq;
}

void fab_ep_drain(fab_ep_t *ep)
{
    tmx_completion_t c[FAB_DRAIN_BATCH];
    fab_cqe_t e;
    fab_cq_t *cq;
    size_t n;

    if (!ep->enabled)
        return;
    if (ep->urq_head != NULL)
        fab_urq_progress(ep);
    do {
        if (tmx_cq_read(ep->tmx, c, FAB_DRAIN_BATCH, &n) != TMX_OK)
            return;
        for (size_t i = 0; i < n; i++) {
            if ((cq = ep_complete(ep, &c[i], &e)) != NULL)
                fab_cq_push(cq, &e);
        }
        /* what that read's progress brought in, a caller about to sleep
         * would otherwise leave for its next turn */
    } while (n == FAB_DRAIN_BATCH || (ep->urq_head != NULL && fab_urq_progress(ep) > 0));
}

static void cq_progress(fab_cq_t *cq)
{
    for (int k = 0; k < cq->n_eps; k++)
        fab_ep_drain(cq->eps[k]);
}

static size_t entry_size(enum fi_cq_format f)
{
    switch (f) {
    case FI_CQ_FORMAT_CONTEXT:
        return sizeof(struct fi_cq_entry);
    case FI_CQ_FORMAT_MSG:
        return sizeof(struct fi_cq_msg_entry);
    case FI_CQ_FORMAT_DATA:
        return sizeof(struct fi_cq_data_entry);
    default:
        return sizeof(struct fi_cq_tagged_entry);
    }
}

/* Each format is a prefix of the next (context, msg, data, tagged), so
 * an entry is written field by field from the widest down. */
static void entry_write(const fab_cq_t *cq, const fab_cqe_t *c, void *out)
{
    struct fi_cq_tagged_entry *t = out;

    switch (cq->format) {
    case FI_CQ_FORMAT_TAGGED:
        t->tag = c->e.tag;
        /* fall through */
    case FI_CQ_FORMAT_DATA:
        t->buf = c->e.buf;
        t->data = c->e.data;
        /* fall through */
    case FI_CQ_FORMAT_MSG:
        t->flags = c->e.flags;
        t->len = c->e.len;
        /* fall through */
    default:
        t->op_context = c->e.op_context;
    }
}

/* The completion of nearly every receive Open MPI's ofi MTL posts: a
 * tagged receive that succeeded, into a tagged-format CQ with nothing
 * waiting in its ring and no counter, written straight into the reader's
 * entry; what ep_complete and entry_write would write, without the
 * staging entry. Returns 0 for any other completion. */
static inline int fast_tagged_recv(const fab_cq_t *cq, const fab_ep_t *ep, const tmx_completion_t *c,
                                   char *out, fi_addr_t *src)
{
    struct fi_cq_tagged_entry *t = (struct fi_cq_tagged_entry *)out;

    if (c->op != TMX_OP_TRECV || c->status != TMX_OK || cq->format != FI_CQ_FORMAT_TAGGED ||
        ep->rx_cq != cq || cq->count != 0 || ep->rx_cntr != NULL || c->user_context == FAB_COUNT_ONLY ||
        tag_kind(ep, c->tag) != FI_TAGGED)
        return 0;
    t->op_context = c->user_context;
    t->flags = FI_TAGGED | FI_RECV | (c->has_data ? FI_REMOTE_CQ_DATA : 0);
    t->len = c->length;
    t->buf = NULL;
    t->data = c->has_data ? c->data : 0;
    t->tag = c->tag & ~ep->msg_bit;
    if (src != NULL)
        *src = fab_av_valid(ep->av, c->source) ? c->source : FI_ADDR_NOTAVAIL;
    return 1;
}

/* Hands out what one tmx_cq_read returned: into out while nothing waits
 * in the ring; errors (for fi_cq_readerr) and whatever follows them, and
 * entries for an endpoint's other CQ, wait in a ring. Returns the entries
 * written to out. Out of line, so that an empty poll stays short. */
static __attribute__((noinline)) size_t cq_take(fab_cq_t *cq, fab_ep_t *ep,
                                                const tmx_completion_t *c, size_t got,
                                                char *out, fi_addr_t *src)
{
    size_t n = 0, sz = entry_size(cq->format);
    fab_cqe_t e;
    fab_cq_t *to;

    for (size_t i = 0; i < got; i++) {
        if (fast_tagged_recv(cq, ep, &c[i], out + n * sz, src ? &src[n] : NULL)) {
            n++;
            continue;
        }
        if ((to = ep_complete(ep, &c[i], &e)) == NULL)
            continue;
        if (to != cq || e.err != 0 || cq->count > 0) {
            fab_cq_push(to, &e);
            continue;
        }
        entry_write(cq, &e, out + n * sz);
        if (src)
            src[n] = e.src;
        n++;
    }
    return n;
}

/* One endpoint's part of a read: at most count entries. */
static size_t ep_read(fab_cq_t *cq, fab_ep_t *ep, char *out, size_t count, fi_addr_t *src)
{
    tmx_completion_t c[FAB_DRAIN_BATCH];
    size_t got;

    if (__builtin_expect(ep->urq_head != NULL, 0) && ep->enabled)
        fab_urq_progress(ep);
    if (!ep->enabled || tmx_cq_read(ep->tmx, c, count < FAB_DRAIN_BATCH ? count : FAB_DRAIN_BATCH,
                                    &got) != TMX_OK)
        return 0;
    /* an untagged message that read's progress brought in, claimed now
     * rather than after a sleep */
    if (got == 0 && __builtin_expect(ep->urq_head != NULL, 0) && fab_urq_progress(ep) > 0 &&
        tmx_cq_read(ep->tmx, c, count < FAB_DRAIN_BATCH ? count : FAB_DRAIN_BATCH, &got) != TMX_OK)
        return 0;
    if (got == 0)
        return 0;
    return cq_take(cq, ep, c, got, out, src);
}

/* While the ring is empty, completions go from the tmx contexts straight
 * into buf, at most as many as buf holds. */
static size_t cq_read_direct(fab_cq_t *cq, void *buf, size_t count, fi_addr_t *src)
{
    size_t n = 0, sz = entry_size(cq->format);

    for (int k = 0; k < cq->n_eps && n < count; k++)
        n += ep_read(cq, cq->eps[k], (char *)buf + n * sz, count - n, src ? src + n : NULL);
    return n;
}

static ssize_t cq_readfrom_locked(fab_cq_t *cq, void *buf, size_t count, fi_addr_t *src)
{
    size_t n = 0, sz = entry_size(cq->format);

    if (cq->count == 0 && count == 0)
        cq_progress(cq);
    else if (cq->count == 0 && (n = cq_read_direct(cq, buf, count, src)) > 0)
        return (ssize_t)n;
    while (n < count && cq->count > 0) {
        fab_cqe_t *c = &cq->ring[cq->head];
        if (c->err != 0)
            break;
        entry_write(cq, c, (char *)buf + n * sz);
        if (src)
            src[n] = c->src;
        cq->head = (cq->head + 1) & (cq->cap - 1);
        cq->count--;
        n++;
    }
    if (n > 0)
        return (ssize_t)n;
    /* -FI_EAVAIL only for an error entry at the head: a read of 0
     * entries with successes waiting reads none, as any other */
    return cq->count > 0 && cq->ring[cq->head].err != 0 ? -FI_EAVAIL : -FI_EAGAIN;
}

static ssize_t cq_readfrom(struct fid_cq *fid, void *buf, size_t count, fi_addr_t *src)
{
    fab_cq_t *cq = (fab_cq_t *)fid;
    ssize_t ret;

    if (buf == NULL && count > 0)
        return -FI_EINVAL;
    fab_lock(cq->dom);
    ret = cq_readfrom_locked(cq, buf, count, src);
    fab_unlock(cq->dom);
    return ret;
}

/* The usual poll (what Open MPI's ofi MTL calls in its progress loop):
 * one endpoint, nothing waiting in the ring, no lock to take; a poll that
 * finds nothing is kept short. Anything else takes the general path. */
static ssize_t cq_read(struct fid_cq *fid, void *buf, size_t count)
{
    fab_cq_t *cq = (fab_cq_t *)fid;

    /* mt first: in a locked domain another thread may be filling the
     * ring, which only the general path may look at */
    if (__builtin_expect(!cq->dom->mt && cq->n_eps == 1 && cq->count == 0 && count != 0 && buf != NULL, 1)) {
        size_t n = ep_read(cq, cq->eps[0], buf, count, NULL);
        if (n > 0)
            return (ssize_t)n;
        if (cq->count == 0)
            return -FI_EAGAIN;
    }
    return cq_readfrom(fid, buf, count, NULL);
}

/* Before API 1.5 the error entry ended at err_data. */
static void err_write(const fab_cq_t *cq, const fab_cqe_t *c, struct fi_cq_err_entry *e)
{
    e->op_context = c->e.op_context;
    e->flags = c->e.flags;
    e->len = c->e.len;
    e->buf = c->e.buf;
    e->data = c->e.data;
    e->tag = c->e.tag;
    e->olen = c->olen;
    e->err = c->err;
    e->prov_errno = c->prov_errno;
    if (FI_VERSION_GE(cq->dom->fab->fid.api_version, FI_VERSION(1, 5))) {
        if (e->err_data_size == 0)
            e->err_data = NULL;
        e->err_data_size = 0;
    } else {
        e->err_data = NULL;
    }
}

static ssize_t cq_readerr(struct fid_cq *fid, struct fi_cq_err_entry *buf, uint64_t flags)
{
    fab_cq_t *cq = (fab_cq_t *)fid;
    ssize_t ret = -FI_EAGAIN;

    if (buf == NULL)
        return -FI_EINVAL;
    fab_lock(cq->dom);
    if (cq->count == 0)
        cq_progress(cq);
    if (cq->count > 0 && cq->ring[cq->head].err != 0) {
        err_write(cq, &cq->ring[cq->head], buf);
        cq->head = (cq->head + 1) & (cq->cap - 1);
        cq->count--;
        ret = 1;
    }
    fab_unlock(cq->dom);
    return ret;
}

/* Sleeps in tmx until a completion may be there, in slices so that a
 * signal from another thread is seen. */
static void cq_sleep(fab_cq_t *cq, int64_t us)
{
    tmx_context_h ctx = NULL;
    fab_ep_t *ep = NULL;

    fab_lock(cq->dom);
    if (cq->n_eps > 0)
        ctx = (ep = cq->eps[0])->tmx;
    if (cq->n_eps > 1 && us > 1000)
        us = 1000;
    if (ctx != NULL && cq->dom->mt && !cq->dom->ctx_mt) {
        /* single-threaded contexts that a wait fd's thread also drives:
         * only under the lock, so in short slices */
        tmx_wait(ctx, us < 1000 ? us : 1000);
        fab_unlock(cq->dom);
        return;
    }
    if (ep != NULL)
        atomic_fetch_add(&ep->sleepers, 1); /* its close waits for us */
    fab_unlock(cq->dom);
    if (ctx == NULL) {
        sched_yield();
        return;
    }
    tmx_wait(ctx, us < CQ_SLEEP_SLICE_US ? us : CQ_SLEEP_SLICE_US);
    atomic_fetch_sub(&ep->sleepers, 1);
}

static ssize_t cq_sreadfrom(struct fid_cq *fid, void *buf, size_t count, fi_addr_t *src,
                            const void *cond, int timeout)
{
    fab_cq_t *cq = (fab_cq_t *)fid;
    int64_t deadline = timeout < 0 ? INT64_MAX : fab_now_us() + (int64_t)timeout * 1000;
    ssize_t ret;

    for (;;) {
        ret = cq_readfrom(fid, buf, count, src);
        if (ret != -FI_EAGAIN)
            return ret;
        if (atomic_exchange(&cq->signaled, 0))
            return -FI_EAGAIN; /* fi_cq(3): signaled with nothing to read */
        int64_t left = deadline - fab_now_us();
        if (left <= 0)
            return -FI_EAGAIN;
        cq_sleep(cq, left);
    }
}

static ssize_t cq_sread(struct fid_cq *fid, void *buf, size_t count, const void *cond,
                        int timeout)
{
    return cq_sreadfrom(fid, buf, count, NULL, cond, timeout);
}

static int cq_signal(struct fid_cq *fid)
{
    fab_cq_t *cq = (fab_cq_t *)fid;

    atomic_store(&cq->signaled, 1);
    return 0;
}

static const char *cq_strerror(struct fid_cq *fid, int prov_errno, const void *err_data,
                               char *buf, size_t len)
{
    return fab_prov_strerror(prov_errno, buf, len);
}

/* -------------------------------------------------------------- wait fd */

static void waiter_signal(fab_cq_waiter_t *w)
{
    uint64_t one = 1;

    pthread_mutex_lock(&w->lock);
    if (w->armed && write(w->fd, &one, sizeof(one)) < 0)
        FAB_WARN(FI_LOG_CQ, "CQ wait fd write: %s\n", strerror(errno));
    w->armed = 0;
    pthread_mutex_unlock(&w->lock);
}

/* Blocks until armed; 0 once told to stop. */
static int waiter_armed(fab_cq_waiter_t *w)
{
    int go;

    pthread_mutex_lock(&w->lock);
    while (!w->armed && !w->stop)
        pthread_cond_wait(&w->cond, &w->lock);
    go = !w->stop;
    pthread_mutex_unlock(&w->lock);
    return go;
}

/* One turn: progress into the CQ; if nothing reached it, a sleep. With
 * contexts any thread may drive (dom->ctx_mt), in one of the CQ's
 * contexts, woken by what arrives (in turn, in short slices when there
 * are several). Otherwise the thread may drive them only under the
 * domain lock, which it does not hold asleep: it sleeps *idle_us, from
 * WAITER_POLL_MIN_US doubling to WAITER_POLL_MAX_US. */
static void waiter_turn(fab_cq_t *cq, unsigned *next, int64_t *idle_us)
{
    tmx_context_h ctx = NULL;
    int n, ready;

    fab_lock(cq->dom);
    cq_progress(cq);
    ready = cq->count > 0;
    if ((n = cq->n_eps) > 0 && !ready && cq->dom->ctx_mt) {
        ctx = cq->eps[(*next)++ % (unsigned)n]->tmx;
        atomic_store(&cq->w.busy, ctx);
    }
    fab_unlock(cq->dom);
    if (ready) {
        *idle_us = WAITER_POLL_MIN_US;
        waiter_signal(&cq->w);
    } else if (ctx != NULL) {
        tmx_wait(ctx, n > 1 ? 1000 : CQ_SLEEP_SLICE_US);
        atomic_store(&cq->w.busy, NULL);
    } else {
        usleep((useconds_t)*idle_us);
        if (*idle_us < WAITER_POLL_MAX_US)
            *idle_us *= 2;
    }
}

static void *waiter_main(void *arg)
{
    fab_cq_t *cq = arg;
    unsigned next = 0;
    int64_t idle_us = WAITER_POLL_MIN_US;

    while (waiter_armed(&cq->w))
        waiter_turn(cq, &next, &idle_us);
    return NULL;
}

int fab_cq_ready(fab_cq_t *cq)
{
    int ready;

    fab_lock(cq->dom);
    if (cq->count == 0)
        cq_progress(cq);
    ready = cq->count > 0;
    fab_unlock(cq->dom);
    return ready;
}

int fab_cq_trywait(fab_cq_t *cq)
{
    uint64_t v;
    int ret = 0;

    if (cq->w.fd < 0)
        return -FI_EINVAL;
    fab_lock(cq->dom);
    if (cq->count == 0)
        cq_progress(cq);
    if (cq->count > 0) {
        ret = -FI_EAGAIN;
    } else {
        pthread_mutex_lock(&cq->w.lock);
        while (read(cq->w.fd, &v, sizeof(v)) > 0)
            ;
        cq->w.armed = 1;
        pthread_cond_signal(&cq->w.cond);
        pthread_mutex_unlock(&cq->w.lock);
    }
    fab_unlock(cq->dom);
    return ret;
}

/* The thread drives the domain's contexts beside the application: from
 * now on the domain takes its lock even if the application promised one
 * thread (FI_THREAD_DOMAIN and the like). */
static int waiter_open(fab_cq_t *cq)
{
    cq->w.fd = -1;
    cq->dom->mt = 1;
    if ((cq->w.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
        return -FI_EMFILE;
    pthread_mutex_init(&cq->w.lock, NULL);
    pthread_cond_init(&cq->w.cond, NULL);
    if (pthread_create(&cq->w.thread, NULL, waiter_main, cq) != 0) {
        pthread_cond_destroy(&cq->w.cond);
        pthread_mutex_destroy(&cq->w.lock);
        close(cq->w.fd);
        cq->w.fd = -1;
        return -FI_EOTHER;
    }
    return 0;
}

static void waiter_close(fab_cq_t *cq)
{
    if (cq->w.fd < 0)
        return;
    pthread_mutex_lock(&cq->w.lock);
    cq->w.stop = 1;
    pthread_cond_signal(&cq->w.cond);
    pthread_mutex_unlock(&cq->w.lock);
    pthread_join(cq->w.thread, NULL);
    pthread_cond_destroy(&cq->w.cond);
    pthread_mutex_destroy(&cq->w.lock);
    close(cq->w.fd);
    cq->w.fd = -1;
}

static struct fi_ops_cq cq_ops = {
    .size = sizeof(struct fi_ops_cq),
    .read = cq_read,
    .readfrom = cq_readfrom,
    .readerr = cq_readerr,
    .sread = cq_sread,
    .sreadfrom = cq_sreadfrom,
    .signal = cq_signal,
    .strerror = cq_strerror,
};

/* ------------------------------------------------------- endpoints bound */

int fab_cq_attach(fab_cq_t *cq, fab_ep_t *ep)
{
    for (int k = 0; k < cq->n_eps; k++) {
        if (cq->eps[k] == ep)
            return 0;
    }
    if (fab_eps_reserve(&cq->eps, cq->n_eps, &cq->cap_eps) != 0)
        return -FI_ENOMEM;
    cq->eps[cq->n_eps++] = ep;
    atomic_fetch_add(&cq->refs, 1);
    return 0;
}

/* The caller holds the domain lock, so the wait thread cannot pick the
 * endpoint again; it may still sleep in its context for one slice. */
void fab_cq_detach(fab_cq_t *cq, fab_ep_t *ep)
{
    for (int k = 0; k < cq->n_eps; k++) {
        if (cq->eps[k] == ep) {
            cq->eps[k] = cq->eps[--cq->n_eps];
            atomic_fetch_sub(&cq->refs, 1);
            break;
        }
    }
    while (cq->w.fd >= 0 && atomic_load(&cq->w.busy) == ep->tmx)
        usleep(100);
}

static int cq_close(struct fid *fid)
{
    fab_cq_t *cq = (fab_cq_t *)fid;

    if (atomic_load(&cq->refs) != 0) {
        FAB_WARN(FI_LOG_CQ, "CQ closed while %d endpoints use it\n", atomic_load(&cq->refs));
        return -FI_EBUSY;
    }
    fab_poll_forget(cq->dom, fid);
    waiter_close(cq);
    atomic_fetch_sub(&cq->dom->refs, 1);
    free(cq->eps);
    free(cq->ring);
    free(cq);
    return 0;
}

int fab_wait_control(int fd, int command, void *arg)
{
    if (arg == NULL && (command == FI_GETWAIT || command == FI_GETWAITOBJ)) {
        FAB_WARN(FI_LOG_CQ, "fi_control: NULL argument\n");
        return -FI_EINVAL;
    }
    switch (command) {
    case FI_GETWAIT:
        if (fd < 0)
            return -FI_ENODATA;
        *(int *)arg = fd;
        return 0;
    case FI_GETWAITOBJ:
        *(enum fi_wait_obj *)arg = fd < 0 ? FI_WAIT_NONE : FI_WAIT_FD;
        return 0;
    default:
        return -FI_ENOSYS;
    }
}

static int cq_control(struct fid *fid, int command, void *arg)
{
    fab_cq_t *cq = (fab_cq_t *)fid;

    return fab_wait_control(cq->w.fd, command, arg);
}

static struct fi_ops cq_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = cq_close,
    .bind = fab_no_bind,
    .control = cq_control,
    .ops_open = fab_no_ops_open,
    .tostr = fab_no_tostr,
    .ops_set = fab_no_ops_set,
};

static int cq_attr_check(const struct fi_cq_attr *attr)
{
    if (attr->format > FI_CQ_FORMAT_TAGGED) {
        FAB_WARN(FI_LOG_CQ, "unknown CQ format %d\n", attr->format);
        return -FI_ENOSYS;
    }
    if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC &&
        attr->wait_obj != FI_WAIT_YIELD && attr->wait_obj != FI_WAIT_FD) {
        FAB_WARN(FI_LOG_CQ, "wait object %d: only FI_WAIT_NONE, UNSPEC, YIELD or FD\n",
                 attr->wait_obj);
        return -FI_ENOSYS;
    }
    if (attr->wait_cond != FI_CQ_COND_NONE || (attr->flags & FI_AFFINITY)) {
        FAB_WARN(FI_LOG_CQ, "CQ wait conditions and affinity are not offered\n");
        return -FI_ENOSYS;
    }
    return 0;
}

int fab_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **out,
                void *context)
{
    fab_domain_t *dom = (fab_domain_t *)domain;
    fab_cq_t *cq;
    int ret;

    if (attr == NULL)
        return -FI_EINVAL;
    if ((ret = cq_attr_check(attr)) != 0)
        return ret;
    if ((cq = calloc(1, sizeof(*cq))) == NULL)
        return -FI_ENOMEM;
    cq->cap = 256;
    if ((cq->ring = malloc(cq->cap * sizeof(*cq->ring))) == NULL)
        goto err_free_cq;
    cq->format = attr->format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_CONTEXT : attr->format;
    cq->dom = dom;
    cq->w.fd = -1;
    if (attr->wait_obj == FI_WAIT_FD && (ret = waiter_open(cq)) != 0)
        goto err_free_ring;
    cq->fid.fid.fclass = FI_CLASS_CQ;
    cq->fid.fid.context = context;
    cq->fid.fid.ops = &cq_fi_ops;
    cq->fid.ops = &cq_ops;
    atomic_fetch_add(&dom->refs, 1);
    *out = &cq->fid;
    return 0;

err_free_ring:
    free(cq->ring);
    free(cq);
    return ret;
err_free_cq:
    free(cq);
    return -FI_ENOMEM;
}
