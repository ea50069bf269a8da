/*
 * Counters: the completions of an endpoint's sends (FI_SEND) or receives
 * (FI_RECV) counted, successes and errors apart. An operation that wants
 * no CQ entry is still counted: it is posted with FAB_COUNT_ONLY as its
 * tmx user context while a counter is bound, and the CQ drops its
 * success. Reading or waiting on a counter drives the progress of its
 * endpoints, as reading a CQ does.
 */
#include <stdlib.h>

#include "fab.h"

#define CNTR_SLEEP_SLICE_US 10000

char fab_count_only; /* its address is FAB_COUNT_ONLY */

void fab_cntr_count(fab_cntr_t *cntr, int failed)
{
    if (failed)
        atomic_fetch_add(&cntr->err, 1);
    else
        atomic_fetch_add(&cntr->cnt, 1);
}

static void cntr_progress(fab_cntr_t *cntr)
{
    fab_lock(cntr->dom);
    for (int k = 0; k < cntr->n_eps; k++)
        fab_ep_drain(cntr->eps[k]);
    fab_unlock(cntr->dom);
}

static uint64_t cntr_read(struct fid_cntr *fid)
{
    fab_cntr_t *cntr = (fab_cntr_t *)fid;

    cntr_progress(cntr);
    return atomic_load(&cntr->cnt);
}

static uint64_t cntr_readerr(struct fid_cntr *fid)
{
    fab_cntr_t *cntr = (fab_cntr_t *)fid;

    cntr_progress(cntr);
    return atomic_load(&cntr->err);
}

/* What the application adds or sets is no news for fi_poll. */
static int cntr_add(struct fid_cntr *fid, uint64_t value)
{
    fab_cntr_t *cntr = (fab_cntr_t *)fid;

    atomic_store(&cntr->poll_cnt, atomic_fetch_add(&cntr->cnt, value) + value);
    return 0;
}

static int cntr_set(struct fid_cntr *fid, uint64_t value)
{
    fab_cntr_t *cntr = (fab_cntr_t *)fid;

    atomic_store(&cntr->cnt, value);
    atomic_store(&cntr->poll_cnt, value);
    return 0;
}

static int cntr_adderr(struct fid_cntr *fid, uint64_t value)
{
    fab_cntr_t *cntr = (fab_cntr_t *)fid;

    atomic_store(&cntr->poll_err, atomic_fetch_add(&cntr->err, value) + value);
    return 0;
}

static int cntr_seterr(struct fid_cntr *fid, uint64_t value)
{
    fab_cntr_t *cntr = (fab_cntr_t *)fid;

    atomic_store(&cntr->err, value);
    atomic_store(&cntr->poll_err, value);
    return 0;
}

int fab_cntr_poll(fab_cntr_t *cntr)
{
    uint64_t v, e, seen_v, seen_e;

    cntr_progress(cntr);
    v = atomic_load(&cntr->cnt);
    e = atomic_load(&cntr->err);
    seen_v = atomic_exchange(&cntr->poll_cnt, v);
    seen_e = atomic_exchange(&cntr->poll_err, e);
    return seen_v != v || seen_e != e;
}

/* Sleeps in the first endpoint's context, in slices. */
static void cntr_sleep(fab_cntr_t *cntr, int64_t us)
{
    tmx_context_h ctx = NULL;
    fab_ep_t *ep = NULL;

    fab_lock(cntr->dom);
    if (cntr->n_eps > 0)
        ctx = (ep = cntr->eps[0])->tmx;
    if (cntr->n_eps > 1 && us > 1000)
        us = 1000;
    if (ctx != NULL && cntr->dom->mt && !cntr->dom->ctx_mt) {
        /* single-threaded contexts that a wait fd's thread also drives */
        tmx_wait(ctx, us < 1000 ? us : 1000);
        fab_unlock(cntr->dom);
        return;
    }
    if (ep != NULL)
        atomic_fetch_add(&ep->sleepers, 1); /* its close waits for us */
    fab_unlock(cntr->dom);
    if (ctx == NULL) {
        sched_yield();
        return;
    }
    tmx_wait(ctx, us < CNTR_SLEEP_SLICE_US ? us : CNTR_SLEEP_SLICE_US);
    atomic_fetch_sub(&ep->sleepers, 1);
}

/* Until the count reaches threshold (0), an error is counted (-FI_EAVAIL)
 * or timeout ms pass (-FI_ETIMEDOUT; < 0: no limit). */
static int cntr_wait(struct fid_cntr *fid, uint64_t threshold, int timeout)
{
    fab_cntr_t *cntr = (fab_cntr_t *)fid;
    int64_t deadline = timeout < 0 ? INT64_MAX : fab_now_us() + (int64_t)timeout * 1000;
    uint64_t errs = atomic_load(&cntr->err);

    for (;;) {
        cntr_progress(cntr);
        if (atomic_load(&cntr->cnt) >= threshold)
            return 0;
        if (atomic_load(&cntr->err) != errs)
            return -FI_EAVAIL;
        int64_t left = deadline - fab_now_us();
        if (left <= 0)
            return -FI_ETIMEDOUT;
        cntr_sleep(cntr, left);
    }
}

static struct fi_ops_cntr cntr_ops = {
    .size = sizeof(struct fi_ops_cntr),
    .read = cntr_read,
    .readerr = cntr_readerr,
    .add = cntr_add,
    .set = cntr_set,
    .wait = cntr_wait,
    .adderr = cntr_adderr,
    .seterr = cntr_seterr,
};

int fab_cntr_attach(fab_cntr_t *cntr, fab_ep_t *ep)
{
    for (int k = 0; k < cntr->n_eps; k++) {
        if (cntr->eps[k] == ep)
            return 0;
    }
    if (fab_eps_reserve(&cntr->eps, cntr->n_eps, &cntr->cap_eps) != 0)
        return -FI_ENOMEM;
    cntr->eps[cntr->n_eps++] = ep;
    atomic_fetch_add(&cntr->refs, 1);
    return 0;
}

void fab_cntr_detach(fab_cntr_t *cntr, fab_ep_t *ep)
{
    for (int k = 0; k < cntr->n_eps; k++) {
        if (cntr->eps[k] == ep) {
            cntr->eps[k] = cntr->eps[--cntr->n_eps];
            atomic_fetch_sub(&cntr->refs, 1);
            return;
        }
    }
}

static int cntr_close(struct fid *fid)
{
    fab_cntr_t *cntr = (fab_cntr_t *)fid;

    if (atomic_load(&cntr->refs) != 0) {
        FAB_WARN(FI_LOG_CNTR, "counter closed while %d endpoints use it\n",
                 atomic_load(&cntr->refs));
        return -FI_EBUSY;
    }
    fab_poll_forget(cntr->dom, fid);
    atomic_fetch_sub(&cntr->dom->refs, 1);
    free(cntr->eps);
    free(cntr);
    return 0;
}

static struct fi_ops cntr_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = cntr_close,
    .bind = fab_no_bind,
    .control = fab_no_control,
    .ops_open = fab_no_ops_open,
    .tostr = fab_no_tostr,
    .ops_set = fab_no_ops_set,
};

int fab_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr, struct fid_cntr **out,
                  void *context)
{
    fab_domain_t *dom = (fab_domain_t *)domain;
    fab_cntr_t *cntr;

    if (attr && (attr->events != FI_CNTR_EVENTS_COMP || attr->flags != 0 ||
                 (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC &&
                  attr->wait_obj != FI_WAIT_YIELD))) {
        FAB_WARN(FI_LOG_CNTR, "counters count completions, and wait without a wait object\n");
        return -FI_ENOSYS;
    }
    if ((cntr = calloc(1, sizeof(*cntr))) == NULL)
        return -FI_ENOMEM;
    cntr->dom = dom;
    cntr->fid.fid.fclass = FI_CLASS_CNTR;
    cntr->fid.fid.context = context;
    cntr->fid.fid.ops = &cntr_fi_ops;
    cntr->fid.ops = &cntr_ops;
    atomic_fetch_add(&dom->refs, 1);
    *out = &cntr->fid;
    return 0;
}
