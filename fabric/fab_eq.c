/*
 * Event queues. An RDM endpoint of this provider raises no events of its
 * own (no connections, synchronous AV inserts), so what an EQ holds is
 * what the application wrote with fi_eq_write: a FIFO, read by fi_eq_read
 * and fi_eq_sread (which sleeps on a condition variable), with an eventfd
 * readable while it is not empty when opened with FI_WAIT_FD.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "fab.h"

typedef struct eq_event {
    struct eq_event *next;
    uint32_t event;
    size_t len;
    unsigned char data[]; /* what fi_eq_write was given */
} eq_event_t;

typedef struct fab_eq {
    struct fid_eq fid;
    fab_fabric_t *fab;
    pthread_mutex_t lock;       /* guards the list */
    pthread_cond_t cond;        /* signalled on each write */
    eq_event_t *head, *tail;
    int fd;                     /* eventfd with FI_WAIT_FD, else -1 */
} fab_eq_t;

/* With the lock held: the fd is readable exactly while events wait. */
static void eq_fd_sync(fab_eq_t *eq)
{
    uint64_t v = 1;

    if (eq->fd < 0)
        return;
    if (eq->head == NULL) {
        while (read(eq->fd, &v, sizeof(v)) > 0)
            ;
    } else if (write(eq->fd, &v, sizeof(v)) < 0) {
        FAB_WARN(FI_LOG_EQ, "EQ wait fd write: %s\n", strerror(errno));
    }
}

/* Takes the first event (or copies it with FI_PEEK), with the lock held. */
static ssize_t eq_take(fab_eq_t *eq, uint32_t *event, void *buf, size_t len, uint64_t flags)
{
    eq_event_t *e = eq->head;

    if (e == NULL)
        return -FI_EAGAIN;
    if (len < e->len)
        return -FI_ETOOSMALL;
    if (event)
        *event = e->event;
    if (e->len)
        memcpy(buf, e->data, e->len);
    ssize_t n = (ssize_t)e->len;
    if (!(flags & FI_PEEK)) {
        eq->head = e->next;
        if (eq->head == NULL)
            eq->tail = NULL;
        free(e);
        eq_fd_sync(eq);
    }
    return n;
}

static ssize_t eq_read(struct fid_eq *fid, uint32_t *event, void *buf, size_t len, uint64_t flags)
{
    fab_eq_t *eq = (fab_eq_t *)fid;
    ssize_t ret;

    if (flags & ~(uint64_t)FI_PEEK)
        return -FI_EBADFLAGS;
    pthread_mutex_lock(&eq->lock);
    ret = eq_take(eq, event, buf, len, flags);
    pthread_mutex_unlock(&eq->lock);
    return ret;
}

/* Nothing raises errors here: fi_eq_write writes events only. */
static ssize_t eq_readerr(struct fid_eq *eq, struct fi_eq_err_entry *buf, uint64_t flags)
{
    return -FI_EAGAIN;
}

static ssize_t eq_write(struct fid_eq *fid, uint32_t event, const void *buf, size_t len,
                        uint64_t flags)
{
    fab_eq_t *eq = (fab_eq_t *)fid;
    eq_event_t *e;

    if (flags != 0) {
        FAB_WARN(FI_LOG_EQ, "fi_eq_write: flags 0x%llx (error entries are not written)\n",
                 (unsigned long long)flags);
        return -FI_EBADFLAGS;
    }
    if ((len > 0 && buf == NULL) || (e = malloc(sizeof(*e) + len)) == NULL)
        return len > 0 && buf == NULL ? -FI_EINVAL : -FI_ENOMEM;
    e->next = NULL;
    e->event = event;
    e->len = len;
    if (len)
        memcpy(e->data, buf, len);
    pthread_mutex_lock(&eq->lock);
    if (eq->tail)
        eq->tail->next = e;
    else
        eq->head = e;
    eq->tail = e;
    eq_fd_sync(eq);
    pthread_cond_broadcast(&eq->cond);
    pthread_mutex_unlock(&eq->lock);
    return (ssize_t)len;
}

static ssize_t eq_sread(struct fid_eq *fid, uint32_t *event, void *buf, size_t len, int timeout,
                        uint64_t flags)
{
    fab_eq_t *eq = (fab_eq_t *)fid;
    struct timespec end;
    ssize_t ret;
    int rc = 0;

    if (flags & ~(uint64_t)FI_PEEK)
        return -FI_EBADFLAGS;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += timeout / 1000;
    end.tv_nsec += (long)(timeout % 1000) * 1000000;
    if (end.tv_nsec >= 1000000000) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&eq->lock);
    while (eq->head == NULL && rc == 0) {
        if (timeout < 0)
            pthread_cond_wait(&eq->cond, &eq->lock);
        else
            rc = pthread_cond_timedwait(&eq->cond, &eq->lock, &end);
    }
    ret = eq_take(eq, event, buf, len, flags);
    pthread_mutex_unlock(&eq->lock);
    return ret;
}

int fab_eq_trywait(struct fid *fid)
{
    fab_eq_t *eq = (fab_eq_t *)fid;
    int ret;

    pthread_mutex_lock(&eq->lock);
    ret = eq->head != NULL ? -FI_EAGAIN : 0;
    pthread_mutex_unlock(&eq->lock);
    return ret;
}

static const char *eq_strerror(struct fid_eq *eq, int prov_errno, const void *err_data,
                               char *buf, size_t len)
{
    return fab_prov_strerror(prov_errno, buf, len);
}

static struct fi_ops_eq eq_ops = {
    .size = sizeof(struct fi_ops_eq),
    .read = eq_read,
    .readerr = eq_readerr,
    .write = eq_write,
    .sread = eq_sread,
    .strerror = eq_strerror,
};

static int eq_close(struct fid *fid)
{
    fab_eq_t *eq = (fab_eq_t *)fid;

    while (eq->head) {
        eq_event_t *e = eq->head;
        eq->head = e->next;
        free(e);
    }
    if (eq->fd >= 0)
        close(eq->fd);
    pthread_cond_destroy(&eq->cond);
    pthread_mutex_destroy(&eq->lock);
    atomic_fetch_sub(&eq->fab->refs, 1);
    free(eq);
    return 0;
}

static int eq_control(struct fid *fid, int command, void *arg)
{
    fab_eq_t *eq = (fab_eq_t *)fid;

    return fab_wait_control(eq->fd, command, arg);
}

static struct fi_ops eq_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = eq_close,
    .bind = fab_no_bind,
    .control = eq_control,
    .ops_open = fab_no_ops_open,
    .tostr = fab_no_tostr,
    .ops_set = fab_no_ops_set,
};

static int eq_cond_init(fab_eq_t *eq)
{
    pthread_condattr_t ca;

    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&eq->cond, &ca);
    pthread_condattr_destroy(&ca);
    return pthread_mutex_init(&eq->lock, NULL) == 0 ? 0 : -FI_ENOMEM;
}

int fab_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr, struct fid_eq **out,
                void *context)
{
    fab_fabric_t *fab = (fab_fabric_t *)fabric;
    enum fi_wait_obj w = attr ? attr->wait_obj : FI_WAIT_NONE;
    fab_eq_t *eq;

    if (w != FI_WAIT_NONE && w != FI_WAIT_UNSPEC && w != FI_WAIT_FD) {
        FAB_WARN(FI_LOG_EQ, "EQ wait object %d: only FI_WAIT_NONE, UNSPEC or FD\n", w);
        return -FI_ENOSYS;
    }
    if ((eq = calloc(1, sizeof(*eq))) == NULL)
        return -FI_ENOMEM;
    eq->fd = -1;
    if (w == FI_WAIT_FD && (eq->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
        free(eq);
        return -FI_EMFILE;
    }
    eq_cond_init(eq);
    eq->fab = fab;
    eq->fid.fid.fclass = FI_CLASS_EQ;
    eq->fid.fid.context = context;
    eq->fid.fid.ops = &eq_fi_ops;
    eq->fid.ops = &eq_ops;
    atomic_fetch_add(&fab->refs, 1);
    *out = &eq->fid;
    return 0;
}
