/*
 * Poll sets: which of a few CQs and counters have something new. fi_poll
 * drives progress as a read would, then reports the context of each CQ
 * with entries waiting and of each counter whose success or error value
 * changed since the previous fi_poll saw it (or fi_cntr_add and the like
 * set it: fab_cntr_poll).
 *
 * Locks, in this order: the domain's poll_lock (its list of sets), a
 * set's lock (its members), the domain lock (taken by the members'
 * reads). fi_poll holds a set's lock across the reads, so that a member
 * cannot be freed under it.
 */
#include <stdlib.h>

#include "fab.h"

#define POLL_MAX 64 /* CQs and counters in one poll set */

typedef struct fab_poll {
    struct fid_poll fid;
    fab_domain_t *dom;
    pthread_mutex_t lock;       /* guards the members */
    struct fid *fids[POLL_MAX];
    int n;
    struct fab_poll *next;      /* in dom->polls */
} fab_poll_t;

/* A CQ or counter being closed leaves every poll set of its domain (fi_poll
 * then no longer sees it); the sets hold no reference, so members may be
 * closed before their set, as fabtests do. */
void fab_poll_forget(fab_domain_t *dom, struct fid *member)
{
    pthread_mutex_lock(&dom->poll_lock);
    for (fab_poll_t *ps = dom->polls; ps != NULL; ps = ps->next) {
        pthread_mutex_lock(&ps->lock);
        for (int i = 0; i < ps->n; i++) {
            if (ps->fids[i] == member) {
                ps->n--;
                ps->fids[i] = ps->fids[ps->n];
                i--;
            }
        }
        pthread_mutex_unlock(&ps->lock);
    }
    pthread_mutex_unlock(&dom->poll_lock);
}

static int poll_has_news(fab_poll_t *ps, int i)
{
    struct fid *f = ps->fids[i];

    if (f->fclass == FI_CLASS_CQ)
        return fab_cq_ready((fab_cq_t *)f);
    return fab_cntr_poll((fab_cntr_t *)f);
}

static int poll_poll(struct fid_poll *fid, void **context, int count)
{
    fab_poll_t *ps = (fab_poll_t *)fid;
    int n = 0;

    pthread_mutex_lock(&ps->lock);
    for (int i = 0; i < ps->n && n < count; i++) {
        if (poll_has_news(ps, i))
            context[n++] = ps->fids[i]->context;
    }
    pthread_mutex_unlock(&ps->lock);
    return n;
}

/* Members of the set's own domain only: a closing CQ or counter leaves
 * the poll sets of its domain (fab_poll_forget), so a set of another
 * domain would keep it once freed. */
static int poll_add(struct fid_poll *fid, struct fid *event_fid, uint64_t flags)
{
    fab_poll_t *ps = (fab_poll_t *)fid;
    int ret = 0;

    if (event_fid == NULL ||
        (event_fid->fclass != FI_CLASS_CQ && event_fid->fclass != FI_CLASS_CNTR)) {
        FAB_WARN(FI_LOG_DOMAIN, "fi_poll_add: only CQs and counters\n");
        return -FI_EINVAL;
    }
    if (fab_fid_domain(event_fid) != ps->dom) {
        FAB_WARN(FI_LOG_DOMAIN, "fi_poll_add: a CQ or counter of another domain\n");
        return -FI_EINVAL;
    }
    pthread_mutex_lock(&ps->lock);
    if (ps->n == POLL_MAX) {
        ret = -FI_ENOSPC;
    } else {
        ps->fids[ps->n++] = event_fid;
    }
    pthread_mutex_unlock(&ps->lock);
    return ret;
}

static int poll_del(struct fid_poll *fid, struct fid *event_fid, uint64_t flags)
{
    fab_poll_t *ps = (fab_poll_t *)fid;
    int ret = -FI_EINVAL;

    pthread_mutex_lock(&ps->lock);
    for (int i = 0; i < ps->n; i++) {
        if (ps->fids[i] == event_fid) {
            ps->n--;
            ps->fids[i] = ps->fids[ps->n];
            ret = 0;
            break;
        }
    }
    pthread_mutex_unlock(&ps->lock);
    return ret;
}

static struct fi_ops_poll poll_ops = {
    .size = sizeof(struct fi_ops_poll),
    .poll = poll_poll,
    .poll_add = poll_add,
    .poll_del = poll_del,
};

static int poll_close(struct fid *fid)
{
    fab_poll_t *ps = (fab_poll_t *)fid;

    pthread_mutex_lock(&ps->dom->poll_lock);
    for (fab_poll_t **pp = (fab_poll_t **)&ps->dom->polls; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == ps) {
            *pp = ps->next;
            break;
        }
    }
    pthread_mutex_unlock(&ps->dom->poll_lock);
    atomic_fetch_sub(&ps->dom->refs, 1);
    pthread_mutex_destroy(&ps->lock);
    free(ps);
    return 0;
}

static struct fi_ops poll_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = poll_close,
    .bind = fab_no_bind,
    .control = fab_no_control,
    .ops_open = fab_no_ops_open,
    .tostr = fab_no_tostr,
    .ops_set = fab_no_ops_set,
};

int fab_poll_open(struct fid_domain *domain, struct fi_poll_attr *attr, struct fid_poll **out)
{
    fab_domain_t *dom = (fab_domain_t *)domain;
    fab_poll_t *ps;

    if (attr && attr->flags != 0)
        return -FI_EBADFLAGS;
    if ((ps = calloc(1, sizeof(*ps))) == NULL)
        return -FI_ENOMEM;
    pthread_mutex_init(&ps->lock, NULL);
    ps->dom = dom;
    ps->fid.fid.fclass = FI_CLASS_POLL;
    ps->fid.fid.ops = &poll_fi_ops;
    ps->fid.ops = &poll_ops;
    pthread_mutex_lock(&dom->poll_lock);
    ps->next = dom->polls;
    dom->polls = ps;
    pthread_mutex_unlock(&dom->poll_lock);
    atomic_fetch_add(&dom->refs, 1);
    *out = &ps->fid;
    return 0;
}
