#include "match/match.h"

#include <stdlib.h>
#include <string.h>

#include "util/hash.h"
#include "util/log.h"

#define MATCH_MIN_BUCKETS 128 /* the first size, and where shrinks stop */
#define MATCH_BIN_CHUNK 256

/* A FIFO of entries sharing one key: (mask, src or ANY, tag & ~mask). */
/* r->bin of a receive that waits in the pending list: never dereferenced. */
static struct match_bin *const pending_bin = (struct match_bin *)&pending_bin;

typedef struct match_bin {
    struct match_bin *next;  /* hash chain */
    uint64_t hash;
    uint64_t mask;
    uint64_t tag;            /* already masked */
    uint32_t src;
    uint32_t slot;           /* unexpected bins: which match_msg link */
    util_dlist_t queue;
    util_dlist_t idle;       /* posted bins: in the table's idle list while empty */
} match_bin_t;

static tmx_status_t table_init(match_table_t *t)
{
    t->buckets = calloc(MATCH_MIN_BUCKETS, sizeof(*t->buckets));
    if (t->buckets == NULL)
        return TMX_ERR_NOMEM;
    t->n_buckets = MATCH_MIN_BUCKETS;
    t->hot = NULL;
    t->n_bins = 0;
    util_dlist_init(&t->idle);
    t->n_idle = 0;
    return TMX_OK;
}

static void table_fini(match_table_t *t)
{
    free(t->buckets);
    t->buckets = NULL;
    t->n_buckets = 0;
}

static inline uint64_t bin_hash(uint64_t mask, uint32_t src, uint64_t tag)
{
    return util_hash3(tag, mask, src);
}

static inline match_bin_t *table_lookup(match_table_t *t, uint64_t mask, uint32_t src, uint64_t tag)
{
    match_bin_t *b = t->hot;
    uint64_t h;

    if (b != NULL && b->tag == tag && b->src == src && b->mask == mask)
        return b;
    h = bin_hash(mask, src, tag);
    for (b = t->buckets[h & (t->n_buckets - 1)]; b != NULL; b = b->next) {
        if (b->tag == tag && b->src == src && b->mask == mask) {
            t->hot = b;
            return b;
        }
    }
    return NULL;
}

/* Rehashes into n buckets; on allocation failure keeps the old array,
 * which stays correct, only slower (or larger). */
static void table_resize(match_table_t *t, size_t n)
{
    match_bin_t **nb = calloc(n, sizeof(*nb));

    if (nb == NULL)
        return;
    for (size_t i = 0; i < t->n_buckets; i++) {
        match_bin_t *b = t->buckets[i];
        while (b != NULL) {
            match_bin_t *next = b->next;
            size_t j = b->hash & (n - 1);
            b->next = nb[j];
            nb[j] = b;
            b = next;
        }
    }
    free(t->buckets);
    t->buckets = nb;
    t->n_buckets = n;
}

/* The bin of a key, made if need be: from *spare if given and set (a bin
 * set aside), else from the pool. */
static match_bin_t *table_get(match_engine_t *m, match_table_t *t, uint64_t mask, uint32_t src,
                              uint64_t tag, uint32_t slot, match_bin_t **spare)
{
    match_bin_t *b = table_lookup(t, mask, src, tag);
    size_t idx;

    if (b != NULL) {
        if (!util_dlist_empty(&b->idle)) {
            util_dlist_unlink(&b->idle);
            t->n_idle--;
        }
        return b;
    }
    if (spare != NULL && *spare != NULL) {
        b = *spare;
        *spare = NULL;
    } else if ((b = util_pool_get(&m->bin_pool)) == NULL) {
        return NULL;
    }
    b->hash = bin_hash(mask, src, tag);
    b->mask = mask;
    b->tag = tag;
    b->src = src;
    b->slot = slot;
    util_dlist_init(&b->queue);
    util_dlist_init(&b->idle);
    idx = b->hash & (t->n_buckets - 1);
    b->next = t->buckets[idx];
    t->buckets[idx] = b;
    t->hot = b;
    /* At most half a bin per bucket: once the table outgrows the cache,
     * every bin walked in a chain is a dependent cache miss. */
    if (++t->n_bins > t->n_buckets / 2)
        table_resize(t, t->n_buckets * 2);
    return b;
}

/* Takes a bin out of its chain. */
static void table_unlink(match_table_t *t, match_bin_t *bin)
{
    match_bin_t **pp = &t->buckets[bin->hash & (t->n_buckets - 1)];

    while (*pp != bin)
        pp = &(*pp)->next;
    *pp = bin->next;
    if (t->hot == bin)
        t->hot = NULL;
    t->n_bins--;
}

/* Unlinks and frees a bin whose queue has become empty. */
static void table_drop(match_engine_t *m, match_table_t *t, match_bin_t *bin)
{
    table_unlink(t, bin);
    util_pool_put(&m->bin_pool, bin);
    /* A burst's bins gone, a large array follows, halving at an eighth
     * full: it doubled at half full, so a load that hovers does not
     * rehash again and again, and one that comes and goes in hundreds of
     * keys rehashes once each way. Idle bins do not hold it up: once the
     * bins in use fill a sixteenth at most, the longest idle ones go until
     * the array may halve, down to MATCH_MIN_BUCKETS, so what a burst of
     * keys leaves behind does not depend on how many keys it had. (At an
     * eighth, receives that stay posted on as many keys as idle bins are
     * kept would make a stream of new keys grow the array and empty it of
     * idle bins again and again.) */
    size_t n = t->n_buckets;

    while (n > MATCH_MIN_BUCKETS && t->n_bins - t->n_idle <= n / 8) {
        if (t->n_bins > n / 8 && t->n_bins - t->n_idle > n / 16)
            break;
        while (t->n_bins > n / 8) {
            match_bin_t *old = util_container_of(t->idle.next, match_bin_t, idle);

            util_dlist_unlink(&old->idle);
            t->n_idle--;
            table_unlink(t, old);
            util_pool_put(&m->bin_pool, old);
        }
        n /= 2;
    }
    if (n != t->n_buckets)
        table_resize(t, n);
}

tmx_status_t match_init(match_engine_t *m)
{
    memset(m, 0, sizeof(*m));
    util_pool_init(&m->bin_pool, sizeof(match_bin_t), MATCH_BIN_CHUNK);
    if (table_init(&m->posted) != TMX_OK)
        goto err_pool;
    if (table_init(&m->unexp) != TMX_OK)
        goto err_posted;
    util_dlist_init(&m->unexp_all);
    m->unindexed = &m->unexp_all;
    util_dlist_init(&m->pending);
    m->pending_max = MATCH_PENDING_MAX;
    return TMX_OK;

err_posted:
    table_fini(&m->posted);
err_pool:
    util_pool_fini(&m->bin_pool);
    util_error("out of memory creating the matching engine");
    return TMX_ERR_NOMEM;
}

void match_fini(match_engine_t *m)
{
    table_fini(&m->posted);
    table_fini(&m->unexp);
    util_pool_fini(&m->bin_pool);
    free(m->masks);
    m->masks = NULL;
    m->n_masks = 0;
    m->cap_masks = 0;
}

/* ------------------------------------------------------------ posted side */

static match_mask_t *mask_find(match_engine_t *m, uint64_t mask)
{
    for (size_t i = 0; i < m->n_masks; i++) {
        if (m->masks[i].mask == mask)
            return &m->masks[i];
    }
    return NULL;
}

/* Room for one more mask; -1 without memory. */
static int masks_room(match_engine_t *m)
{
    if (m->n_masks == m->cap_masks) {
        size_t cap = m->cap_masks ? m->cap_masks * 2 : 8;
        match_mask_t *nm = realloc(m->masks, cap * sizeof(*nm));
        if (nm == NULL)
            return -1;
        m->masks = nm;
        m->cap_masks = cap;
    }
    return 0;
}

static match_mask_t *mask_get(match_engine_t *m, uint64_t mask)
{
    match_mask_t *mm = mask_find(m, mask);

    if (mm != NULL)
        return mm;
    if (masks_room(m) != 0)
        return NULL;
    mm = &m->masks[m->n_masks++];
    mm->mask = mask;
    mm->n_src = 0;
    mm->n_any = 0;
    return mm;
}

static void mask_put(match_engine_t *m, uint64_t mask, int any)
{
    match_mask_t *mm = mask_find(m, mask);

    if (any)
        mm->n_any--;
    else
        mm->n_src--;
    if (mm->n_any == 0 && mm->n_src == 0 && m->n_masks > MATCH_MASKS_KEPT)
        *mm = m->masks[--m->n_masks];
}

/* A posted bin that emptied: kept for the next receive on its key, and
 * the longest idle one dropped once too many wait. */
static void bin_idle(match_engine_t *m, match_bin_t *bin)
{
    match_table_t *t = &m->posted;

    util_dlist_push_tail(&t->idle, &bin->idle);
    if (++t->n_idle > MATCH_IDLE_BINS) {
        match_bin_t *old = util_container_of(t->idle.next, match_bin_t, idle);
        util_dlist_unlink(&old->idle);
        t->n_idle--;
        table_drop(m, t, old);
    }
}

/* Puts one pending receive into its bin; fails only for want of memory. */
static tmx_status_t recv_index(match_engine_t *m, match_recv_t *r)
{
    int any = r->src == TMX_ANY_SOURCE;
    match_mask_t *mm = mask_get(m, r->ignore);
    match_bin_t *bin;

    if (mm == NULL)
        return TMX_ERR_NOMEM;
    bin = table_get(m, &m->posted, r->ignore, r->src, r->tag & ~r->ignore, 0, NULL);
    if (bin == NULL) {
        if (mm->n_any == 0 && mm->n_src == 0)
            *mm = m->masks[--m->n_masks];
        return TMX_ERR_NOMEM;
    }
    if (any)
        mm->n_any++;
    else
        mm->n_src++;
    util_dlist_unlink(&r->link);
    m->n_pending--;
    r->bin = bin;
    util_dlist_push_tail(&bin->queue, &r->link);
    return TMX_OK;
}

/* A pending list of one key goes into its bin in one step: the list is
 * spliced onto the bin's queue, after any older receives on that key. The
 * mask's room and a bin were set aside (window_reserve), so only a
 * window too short to have needed them can fail. */
static tmx_status_t window_index(match_engine_t *m)
{
    match_mask_t *mm = mask_get(m, m->pend_ignore);
    match_bin_t *bin;
    util_dlist_t *pos;

    if (mm == NULL)
        return TMX_ERR_NOMEM;
    bin = table_get(m, &m->posted, m->pend_ignore, m->pend_src, m->pend_tag, 0, &m->spare_bin);
    if (bin == NULL) {
        if (mm->n_any == 0 && mm->n_src == 0)
            *mm = m->masks[--m->n_masks];
        return TMX_ERR_NOMEM;
    }
    util_dlist_foreach(pos, &m->pending)
        util_container_of(pos, match_recv_t, link)->bin = bin;
    util_dlist_splice_tail(&bin->queue, &m->pending);
    if (m->pend_src == TMX_ANY_SOURCE)
        mm->n_any += m->n_pending;
    else
        mm->n_src += m->n_pending;
    m->n_pending = 0;
    return TMX_OK;
}

/* Sets aside what window_index will need, as a one-key window passes
 * pending_max: room for its mask and a bin. Masks are added only when
 * the pending list goes into the bins, so the room stays until then (a
 * mask that goes only makes more). -1 without memory. */
static int window_reserve(match_engine_t *m)
{
    if (mask_find(m, m->pend_ignore) == NULL && masks_room(m) != 0)
        return -1;
    if (m->spare_bin == NULL && (m->spare_bin = util_pool_get(&m->bin_pool)) == NULL)
        return -1;
    return 0;
}

void match_index_posted(match_engine_t *m)
{
    if (m->pend_one_key && m->n_pending > 1 && window_index(m) == TMX_OK)
        goto out;
    while (!util_dlist_empty(&m->pending)) {
        match_recv_t *r = util_container_of(m->pending.next, match_recv_t, link);
        if (recv_index(m, r) != TMX_OK) {
            util_warn("out of memory indexing posted receives: %zu scanned in order", m->n_pending);
            break;
        }
    }
out:
    if (m->spare_bin != NULL) { /* not needed, or already spent */
        util_pool_put(&m->bin_pool, m->spare_bin);
        m->spare_bin = NULL;
    }
}

static inline int pend_key_is(const match_engine_t *m, const match_recv_t *r)
{
    return r->src == m->pend_src && r->ignore == m->pend_ignore &&
           (r->tag & ~r->ignore) == m->pend_tag;
}

tmx_status_t match_post(match_engine_t *m, match_recv_t *r)
{
    int same = m->n_pending != 0 && m->pend_one_key && pend_key_is(m, r);

    if (same && m->n_pending == m->pending_max && window_reserve(m) != 0)
        same = 0; /* nothing set aside for a long window: into the bins now */
    if (!same && m->n_pending >= m->pending_max)
        match_index_posted(m);
    if (m->n_pending == 0) {
        m->pend_one_key = 1;
        m->pend_src = r->src;
        m->pend_ignore = r->ignore;
        m->pend_tag = r->tag & ~r->ignore;
    } else if (!same) {
        m->pend_one_key = 0;
    }
    r->bin = pending_bin;
    r->seq = m->post_seq++;
    util_dlist_push_tail(&m->pending, &r->link);
    m->n_pending++;
    m->n_posted++;
    if (m->pending_max == 0)
        match_index_posted(m);
    return TMX_OK;
}

static inline match_recv_t *bin_head_recv(const match_bin_t *bin)
{
    return util_container_of(bin->queue.next, match_recv_t, link);
}

static inline void consider_bin(match_table_t *t, uint64_t mask, uint32_t src, uint64_t tag,
                                match_recv_t **best)
{
    match_bin_t *bin = table_lookup(t, mask, src, tag & ~mask);
    match_recv_t *r;

    if (bin == NULL || util_dlist_empty(&bin->queue))
        return;
    r = bin_head_recv(bin);
    if (*best == NULL || r->seq < (*best)->seq)
        *best = r;
}

match_recv_t *match_find_recv(match_engine_t *m, uint32_t src, uint64_t tag)
{
    match_recv_t *best = NULL;
    util_dlist_t *pos;

    if (m->n_posted != m->n_pending) {
        for (size_t i = 0; i < m->n_masks; i++) {
            const match_mask_t *mm = &m->masks[i];
            if (mm->n_src != 0)
                consider_bin(&m->posted, mm->mask, src, tag, &best);
            if (mm->n_any != 0)
                consider_bin(&m->posted, mm->mask, TMX_ANY_SOURCE, tag, &best);
        }
        if (best != NULL)
            return best; /* older than any pending receive */
    }
    util_dlist_foreach(pos, &m->pending) {
        match_recv_t *r = util_container_of(pos, match_recv_t, link);
        if (match_matches(r->src, r->tag, r->ignore, src, tag))
            return r;
        if (m->pend_one_key)
            break; /* the others have the first one's key */
    }
    return NULL;
}

void match_remove_recv(match_engine_t *m, match_recv_t *r)
{
    match_bin_t *bin = r->bin;

    util_dlist_unlink(&r->link);
    r->bin = NULL;
    m->n_posted--;
    if (bin == pending_bin) {
        if (--m->n_pending == 0 && m->spare_bin != NULL) { /* the window is gone */
            util_pool_put(&m->bin_pool, m->spare_bin);
            m->spare_bin = NULL;
        }
        return;
    }
    if (util_dlist_empty(&bin->queue))
        bin_idle(m, bin);
    mask_put(m, r->ignore, r->src == TMX_ANY_SOURCE);
}

/* Into a bin's queue by post order: the receive may be older than some
 * already there. */
static void bin_insert_by_seq(match_bin_t *bin, match_recv_t *r)
{
    util_dlist_t *pos = bin->queue.prev;

    while (pos != &bin->queue && util_container_of(pos, match_recv_t, link)->seq > r->seq)
        pos = pos->prev;
    util_dlist_push_head(pos, &r->link); /* right after pos */
}

tmx_status_t match_recv_set_src(match_engine_t *m, match_recv_t *r, uint32_t src)
{
    match_bin_t *old = r->bin, *bin;

    if (old == pending_bin) { /* scanned in order: only the list's key may change */
        r->src = src;
        if (m->n_pending == 1)
            m->pend_src = src;
        else
            m->pend_one_key = 0;
        return TMX_OK;
    }
    /* the mask keeps its count: one named source for another */
    bin = table_get(m, &m->posted, r->ignore, src, r->tag & ~r->ignore, 0, NULL);
    if (bin == NULL)
        return TMX_ERR_NOMEM;
    util_dlist_unlink(&r->link);
    r->src = src;
    r->bin = bin;
    bin_insert_by_seq(bin, r);
    if (util_dlist_empty(&old->queue))
        bin_idle(m, old);
    return TMX_OK;
}

int match_any_source_posted(const match_engine_t *m)
{
    const util_dlist_t *pos;

    for (size_t i = 0; i < m->n_masks; i++) {
        if (m->masks[i].n_any != 0)
            return 1;
    }
    for (pos = m->pending.next; pos != &m->pending; pos = pos->next) {
        if (util_container_of(pos, match_recv_t, link)->src == TMX_ANY_SOURCE)
            return 1;
        if (m->pend_one_key)
            break;
    }
    return 0;
}

/* -------------------------------------------------------- unexpected side */

static void msg_unbin(match_engine_t *m, match_msg_t *msg, int upto)
{
    for (int i = 0; i < upto; i++) {
        match_bin_t *bin = msg->bin[i];
        util_dlist_unlink(&msg->link[i]);
        msg->bin[i] = NULL;
        if (util_dlist_empty(&bin->queue))
            table_drop(m, &m->unexp, bin);
    }
}

tmx_status_t match_add_msg(match_engine_t *m, match_msg_t *msg)
{
    for (int i = 0; i < MATCH_LINK_BINS; i++)
        msg->bin[i] = NULL;
    msg->seq = m->arrive_seq++;
    msg->stored = 1;
    util_dlist_push_tail(&m->unexp_all, &msg->link[MATCH_LINK_ALL]);
    if (m->unindexed == &m->unexp_all)
        m->unindexed = &msg->link[MATCH_LINK_ALL];
    m->n_unexp++;
    return TMX_OK;
}

/* Links one message into its three bins. */
static tmx_status_t msg_index(match_engine_t *m, match_msg_t *msg)
{
    static const uint64_t masks[MATCH_LINK_BINS] = {0, 0, TMX_TAG_ANY};
    static const int any[MATCH_LINK_BINS] = {0, 1, 0};

    for (int i = 0; i < MATCH_LINK_BINS; i++) {
        uint32_t src = any[i] ? TMX_ANY_SOURCE : msg->src;
        match_bin_t *bin = table_get(m, &m->unexp, masks[i], src, msg->tag & ~masks[i], i, NULL);
        if (bin == NULL) {
            msg_unbin(m, msg, i);
            util_error("out of memory indexing an unexpected message (%zu stored)", m->n_unexp);
            return TMX_ERR_NOMEM;
        }
        msg->bin[i] = bin;
        util_dlist_push_tail(&bin->queue, &msg->link[i]);
    }
    return TMX_OK;
}

/* Indexes, in arrival order, every message that is not yet in its bins, so
 * that each bin's FIFO stays in arrival order. */
static tmx_status_t index_pending(match_engine_t *m)
{
    while (m->unindexed != &m->unexp_all) {
        match_msg_t *msg = util_container_of(m->unindexed, match_msg_t, link[MATCH_LINK_ALL]);
        tmx_status_t st = msg_index(m, msg);
        if (st != TMX_OK)
            return st;
        m->unindexed = m->unindexed->next;
    }
    return TMX_OK;
}

static inline match_msg_t *bin_head_msg(const match_bin_t *bin)
{
    return util_container_of(bin->queue.next, match_msg_t, link[bin->slot]);
}

/* The slower path for partial masks: oldest first through one list. */
static match_msg_t *scan_list(match_engine_t *m, util_dlist_t *head, int slot, uint64_t tag,
                              uint64_t ignore)
{
    util_dlist_t *pos;

    util_dlist_foreach(pos, head) {
        match_msg_t *msg = util_container_of(pos, match_msg_t, link[slot]);
        m->slow_scans++;
        if (((msg->tag ^ tag) & ~ignore) == 0)
            return msg;
    }
    return NULL;
}

/* Without memory for bins, a correct answer the slow way. */
static match_msg_t *scan_all(match_engine_t *m, uint32_t src, uint64_t tag, uint64_t ignore)
{
    util_dlist_t *pos;

    util_dlist_foreach(pos, &m->unexp_all) {
        match_msg_t *msg = util_container_of(pos, match_msg_t, link[MATCH_LINK_ALL]);
        m->slow_scans++;
        if (match_matches(src, tag, ignore, msg->src, msg->tag))
            return msg;
    }
    return NULL;
}

match_msg_t *match_find_msg(match_engine_t *m, uint32_t src, uint64_t tag, uint64_t ignore)
{
    int full = ignore == TMX_TAG_ANY;
    uint64_t key_mask = full || ignore != 0 ? TMX_TAG_ANY : 0;
    match_bin_t *bin;

    if (m->n_unexp == 0)
        return NULL;
    if (src == TMX_ANY_SOURCE && key_mask == TMX_TAG_ANY) {
        if (full)
            return util_container_of(m->unexp_all.next, match_msg_t, link[MATCH_LINK_ALL]);
        return scan_list(m, &m->unexp_all, MATCH_LINK_ALL, tag, ignore);
    }
    if (index_pending(m) != TMX_OK)
        return scan_all(m, src, tag, ignore);
    bin = table_lookup(&m->unexp, key_mask, src, tag & ~key_mask);
    if (bin == NULL)
        return NULL;
    if (ignore == 0 || full)
        return bin_head_msg(bin);
    return scan_list(m, &bin->queue, bin->slot, tag, ignore);
}

void match_remove_msg(match_engine_t *m, match_msg_t *msg)
{
    util_dlist_t *all = &msg->link[MATCH_LINK_ALL];

    if (m->unindexed == all)
        m->unindexed = all->next;
    if (msg->bin[0] != NULL)
        msg_unbin(m, msg, MATCH_LINK_BINS);
    util_dlist_unlink(all);
    msg->stored = 0;
    m->n_unexp--;
}
