/*
 * The matching engine: posted receives and unexpected messages with MPI's
 * matching rules (seed 000, "Introduction"), independent of any transport.
 *
 * Rules. A receive (src or TMX_ANY_SOURCE, tag, ignore) matches a message
 * (src, tag) when the sources agree and (msg.tag & ~ignore) == (recv.tag &
 * ~ignore). An arriving message takes the earliest-posted matching receive;
 * a posted receive takes the earliest-arrived matching message. The caller
 * hands messages in per-source arrival order, which the transports keep
 * equal to send order.
 *
 * Cost. Both sides are indexed by hash bins, each a FIFO, and every entry
 * carries a sequence number so that the heads of several bins can be
 * compared to recover global order.
 *
 *   posted side: a receive lives in the bin keyed (ignore, src or ANY,
 *   tag & ~ignore). An arriving message looks up, for each distinct ignore
 *   mask in use among posted receives, the bins (mask, src, tag & ~mask) and
 *   (mask, ANY, tag & ~mask) and takes the head with the smallest sequence.
 *   That is O(1) expected for every wildcard kind, and O(M) for M distinct
 *   masks in use (MPI uses a handful).
 *
 *   unexpected side: a message joins the global arrival list at once, and
 *   is linked into three bins, exact (src, tag), by tag (ANY, tag) and by
 *   source (src, any tag), lazily: by the first lookup that needs the bins,
 *   which indexes every message not yet indexed, in arrival order. Each
 *   message is indexed at most once, so the cost stays O(1) amortised, and
 *   a queue drained by any-any receives never touches a bin. A receive
 *   whose mask is 0 or all ones looks at the head of one bin (or of the
 *   global list): O(1) expected. A receive with any other mask scans the
 *   by-source bin (or the global list for ANY) from the oldest message;
 *   that is the documented slower path, linear in the messages it skips.
 *
 * Entries are embedded in the caller's objects; the engine never allocates
 * them. It allocates bins from a pool; match_add_msg() can fail with
 * TMX_ERR_NOMEM and leave nothing behind, and a receive that finds no
 * memory for its bin stays in the pending list, which is slower but as
 * correct, so match_post() does not fail.
 *
 * Not thread safe: the owner serialises calls.
 */
#ifndef TMX_MATCH_H
#define TMX_MATCH_H

#include <stddef.h>
#include <stdint.h>

#include "tmx.h"
#include "util/list.h"
#include "util/pool.h"

struct match_bin;

/* A posted receive. Fill src, tag and ignore before match_post(). */
typedef struct match_recv {
    util_dlist_t link;       /* in its bin's FIFO, or the pending list */
    struct match_bin *bin;   /* NULL when not posted; a marker while pending */
    uint64_t seq;            /* post order */
    uint64_t tag;
    uint64_t ignore;
    uint32_t src;            /* a peer or TMX_ANY_SOURCE */
} match_recv_t;

enum match_msg_link {
    MATCH_LINK_EXACT = 0,  /* bin (src, tag) */
    MATCH_LINK_TAG = 1,    /* bin (ANY, tag) */
    MATCH_LINK_SRC = 2,    /* bin (src, any) */
    MATCH_LINK_BINS = 3,   /* links that live in bins */
    MATCH_LINK_ALL = 3,    /* the engine's global arrival list */
    MATCH_LINK_COUNT = 4
};

/* An unexpected message. Fill src (a real peer, never TMX_ANY_SOURCE) and
 * tag before match_add_msg(). */
typedef struct match_msg {
    util_dlist_t link[MATCH_LINK_COUNT];
    struct match_bin *bin[MATCH_LINK_BINS];  /* NULL until indexed */
    uint64_t seq;                            /* arrival order */
    int stored;
    uint64_t tag;
    uint32_t src;
} match_msg_t;

/* One ignore mask in use on the posted side, with how many posted receives
 * use it with a named source and with TMX_ANY_SOURCE. */
typedef struct match_mask {
    uint64_t mask;
    size_t n_src;
    size_t n_any;
} match_mask_t;

/* Posted bins that empty stay in the table, this many at most, so that a
 * receive posted again on the same key (every iteration of a loop) finds
 * its bin instead of allocating and hashing one in anew. As many again in
 * use fit the table's smallest kept size (MATCH_MIN_BUCKETS, at most
 * half full) without growing it. */
#define MATCH_IDLE_BINS 32
/* Masks whose receives are all gone stay listed, up to this many. */
#define MATCH_MASKS_KEPT 8
/* Receives kept out of the bins while at most this many wait, unless
 * they all have one key (see match_engine_t). */
#define MATCH_PENDING_MAX 8

typedef struct match_table {
    struct match_bin **buckets;
    struct match_bin *hot; /* the bin found last: a window of receives on
                              one key (and their messages) finds it without
                              hashing; NULL, or a bin in the table */
    size_t n_buckets;  /* a power of two */
    size_t n_bins;
    util_dlist_t idle; /* posted side: emptied bins kept for reuse, oldest first */
    size_t n_idle;
} match_table_t;

/* Posted receives go first to a short list scanned in post order, which
 * costs no hashing while few receives wait (a ping-pong has one); once
 * more than pending_max wait, all of them go into the bins, in order. So
 * every receive in a bin is older than every receive in the list.
 *
 * While every receive in the list has one key (source, ignore mask and
 * masked tag: a window of receives from one peer on one tag), the list
 * may grow past pending_max: a message then matches either its first
 * receive or none of them, so a look at the first is the whole scan. Such
 * a window goes into the bins when a receive on another key comes, in one
 * step: it is all one bin's, so the list is spliced onto that bin's queue
 * (a pointer written per receive, no hashing). The bin, and room for its
 * mask, are set aside when the window first passes pending_max (spare_bin),
 * so that running out of memory then cannot leave a long window of one
 * key mixed with another and scanned whole by every arrival: a window that
 * finds no memory for them goes into the bins at once, as before. */
typedef struct match_engine {
    util_dlist_t pending;     /* posted receives not in bins, post order */
    size_t n_pending;
    size_t pending_max;       /* MATCH_PENDING_MAX; 0 puts every receive in a bin */
    int pend_one_key;         /* every receive in the list has the key below
                                 (0 may also leave it so; the key is stale
                                 while the list is empty) */
    uint32_t pend_src;
    uint64_t pend_tag;        /* masked */
    uint64_t pend_ignore;
    struct match_bin *spare_bin; /* set aside when a one-key window reached
                                    pending_max, in no table; given back when
                                    the list empties or goes into the bins
                                    (so at most one bin, held meanwhile) */
    match_table_t posted;
    match_table_t unexp;
    util_dlist_t unexp_all;   /* every unexpected message, arrival order */
    util_dlist_t *unindexed;  /* first of unexp_all not in bins, or the head */
    util_pool_t bin_pool;
    match_mask_t *masks;   /* distinct masks in use on the posted side */
    size_t n_masks;
    size_t cap_masks;
    uint64_t post_seq;
    uint64_t arrive_seq;
    size_t n_posted;
    size_t n_unexp;
    uint64_t slow_scans;   /* entries visited on the slower path */
} match_engine_t;

tmx_status_t match_init(match_engine_t *m);

/* Frees the engine's bins. Entries still stored are forgotten, not freed. */
void match_fini(match_engine_t *m);

/* Stores a posted receive at the end of the post order. The caller has
 * already checked the unexpected side (match_find_msg). */
tmx_status_t match_post(match_engine_t *m, match_recv_t *r);

/* The earliest-posted receive that matches a message (src, tag), or NULL.
 * The receive stays posted until match_remove_recv(). */
match_recv_t *match_find_recv(match_engine_t *m, uint32_t src, uint64_t tag);

/* Removes a posted receive (after a match, or to cancel it). */
void match_remove_recv(match_engine_t *m, match_recv_t *r);

/* Gives a posted receive naming a source another named source (not
 * TMX_ANY_SOURCE either way), keeping its place in the post order: a
 * process known by two numbers until now reported with the second.
 * TMX_ERR_NOMEM (nothing changed) without memory for the new key's bin. */
tmx_status_t match_recv_set_src(match_engine_t *m, match_recv_t *r, uint32_t src);

/* Moves every pending receive into its bin (done by match_post when the
 * list is full: pending_max wait and a receive on another key comes, or
 * they already have several keys); a receive that finds no memory for a
 * bin stays pending, which is slower but as correct (a one-key window
 * longer than pending_max has its bin set aside, so it never stays). */
void match_index_posted(match_engine_t *m);

/* Whether a receive from TMX_ANY_SOURCE is posted. */
int match_any_source_posted(const match_engine_t *m);

/* Stores an unexpected message at the end of the arrival order. */
tmx_status_t match_add_msg(match_engine_t *m, match_msg_t *msg);

/* The earliest-arrived stored message that a receive (src, tag, ignore)
 * matches, or NULL. The message stays stored (probe) until
 * match_remove_msg() (receive, claim). */
match_msg_t *match_find_msg(match_engine_t *m, uint32_t src, uint64_t tag, uint64_t ignore);

void match_remove_msg(match_engine_t *m, match_msg_t *msg);

static inline int match_recv_is_posted(const match_recv_t *r)
{
    return r->bin != NULL;
}

static inline int match_msg_is_stored(const match_msg_t *msg)
{
    return msg->stored;
}

/* The matching predicate itself, shared with tests and tools. */
static inline int match_matches(uint32_t r_src, uint64_t r_tag, uint64_t r_ignore, uint32_t m_src,
                                uint64_t m_tag)
{
    return (r_src == TMX_ANY_SOURCE || r_src == m_src) && ((r_tag ^ m_tag) & ~r_ignore) == 0;
}

#endif
