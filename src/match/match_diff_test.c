/*
 * Randomized differential test of the matching engine against a reference
 * model that keeps posted receives and unexpected messages in plain arrays,
 * in post and arrival order, and matches by linear scan with
 * match_matches(). Every find is compared by the identity of the entry
 * chosen. A failure names its seed and operation; set TMX_TEST_SEED to run
 * that seed alone.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "unit.h"

#include "match/match.h"
#include "tmx.h"

#define OPS_PER_SEED (1u << 17)
#define DEPTH_MAX 2048  /* drain a side above this ... */
#define DEPTH_LOW 1024  /* ... down to this */
#define NONE SIZE_MAX
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static const uint64_t seeds[] = {
    0x1, 0x2a, 0xdeadbeef, 0x5eed0001, 0x123456789abcdefULL, 0x7, 0xfeedface, 0xc0ffee,
};

/* Masks shared by many receives, so posted bins fill up and empty again. */
static const uint64_t common_masks[] = {
    0x1, 0x3, 0x6, 0xf0, 0xffffffff00000000ULL, 0x8000000000000000ULL, ~(uint64_t)1,
};

static uint64_t total_ops;
static uint64_t total_finds;
static uint64_t total_matched;
static uint64_t total_mismatches;

/* ------------------------------------------------------------------ prng */

/* splitmix64: tiny, and the same stream on every platform. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rng_below(uint64_t *s, uint64_t n)
{
    return rng_next(s) % n;
}

static bool rng_chance(uint64_t *s, unsigned percent)
{
    return rng_below(s, 100) < percent;
}

/* ------------------------------------------------------------- reference */

typedef struct ref_entry {
    void *obj;  /* the engine's entry; NULL once removed */
    uint64_t tag;
    uint64_t ignore;
    uint32_t src;
} ref_entry_t;

/* Entries in post or arrival order. Removed ones leave a hole until the
 * holes outnumber the live entries, which keeps removal O(1) amortised. */
typedef struct ref_queue {
    ref_entry_t *v;
    size_t head;  /* no live entry before this */
    size_t len;
    size_t cap;
    size_t live;
} ref_queue_t;

static void ref_push(ref_queue_t *q, ref_entry_t e)
{
    if (q->len == q->cap) {
        q->cap = q->cap ? q->cap * 2 : 1024;
        q->v = realloc(q->v, q->cap * sizeof(*q->v));
        assert_non_null(q->v);
    }
    q->v[q->len++] = e;
    q->live++;
}

static void ref_compact(ref_queue_t *q)
{
    size_t n = 0;

    for (size_t i = q->head; i < q->len; i++) {
        if (q->v[i].obj != NULL)
            q->v[n++] = q->v[i];
    }
    q->head = 0;
    q->len = n;
}

static void ref_kill(ref_queue_t *q, size_t i)
{
    q->v[i].obj = NULL;
    q->live--;
    while (q->head < q->len && q->v[q->head].obj == NULL)
        q->head++;
    if (q->len - q->head > 2 * q->live + 64)
        ref_compact(q);
}

static size_t ref_random_live(const ref_queue_t *q, uint64_t *rng)
{
    size_t i;

    do
        i = q->head + (size_t)rng_below(rng, q->len - q->head);
    while (q->v[i].obj == NULL);
    return i;
}

/* The earliest posted receive that matches a message. */
static size_t ref_find_recv(const ref_queue_t *q, uint32_t src, uint64_t tag)
{
    for (size_t i = q->head; i < q->len; i++) {
        const ref_entry_t *e = &q->v[i];
        if (e->obj != NULL && match_matches(e->src, e->tag, e->ignore, src, tag))
            return i;
    }
    return NONE;
}

/* The earliest arrived message that a receive matches. */
static size_t ref_find_msg(const ref_queue_t *q, uint32_t src, uint64_t tag, uint64_t ignore)
{
    for (size_t i = q->head; i < q->len; i++) {
        const ref_entry_t *e = &q->v[i];
        if (e->obj != NULL && match_matches(src, tag, ignore, e->src, e->tag))
            return i;
    }
    return NONE;
}

/* ------------------------------------------------------------ test state */

typedef struct profile {
    uint32_t n_src;       /* message sources 0 .. n_src - 1 */
    uint64_t n_tag;       /* small tags 0 .. n_tag - 1 */
    unsigned any_src_pct; /* receives with TMX_ANY_SOURCE */
    unsigned big_tag_pct; /* tags drawn from all 64 bits */
    unsigned post_pct;    /* share of posts against arrivals */
} profile_t;

typedef struct diff {
    match_engine_t m;
    ref_queue_t posted;
    ref_queue_t unexp;
    profile_t prof;
    uint64_t rng;
    uint64_t seed;
    size_t op;
} diff_t;

typedef struct query {
    uint32_t src;
    uint64_t tag;
    uint64_t ignore;
} query_t;

/* Each seed draws its own shape: few or many sources and tags, more posts
 * or more arrivals, so queue depths and match rates differ between seeds. */
static profile_t profile_from_seed(uint64_t seed)
{
    uint64_t s = seed ^ 0x6a09e667f3bcc909ULL;
    profile_t p;

    p.n_src = 1 + (uint32_t)rng_below(&s, 6);
    p.n_tag = 1 + rng_below(&s, 12);
    p.any_src_pct = 10 + (unsigned)rng_below(&s, 31);
    p.big_tag_pct = (unsigned)rng_below(&s, 4);
    p.post_pct = 40 + (unsigned)rng_below(&s, 21);
    return p;
}

/* ------------------------------------------------------------ generators */

static uint64_t gen_tag(diff_t *d)
{
    uint64_t tag;

    if (rng_chance(&d->rng, d->prof.big_tag_pct))
        return rng_next(&d->rng);
    tag = rng_below(&d->rng, d->prof.n_tag);
    if (rng_chance(&d->rng, 10))
        tag |= (uint64_t)1 << 63;
    if (rng_chance(&d->rng, 5))
        tag |= (uint64_t)1 << 40;
    return tag;
}

static uint64_t gen_mask(diff_t *d)
{
    uint64_t r = rng_below(&d->rng, 100);

    if (r < 45)
        return TMX_TAG_EXACT;
    if (r < 65)
        return TMX_TAG_ANY;
    if (r < 96)
        return common_masks[rng_below(&d->rng, ARRAY_LEN(common_masks))];
    return rng_next(&d->rng) & rng_next(&d->rng);
}

static uint32_t gen_src(diff_t *d)
{
    return (uint32_t)rng_below(&d->rng, d->prof.n_src);
}

/* Bits under the mask are sometimes set, as they must not count. */
static query_t gen_query(diff_t *d)
{
    query_t q;

    q.src = rng_chance(&d->rng, d->prof.any_src_pct) ? TMX_ANY_SOURCE : gen_src(d);
    q.ignore = gen_mask(d);
    q.tag = gen_tag(d);
    if (rng_chance(&d->rng, 20))
        q.tag ^= rng_next(&d->rng) & q.ignore;
    return q;
}

/* A query built from a stored message, so that it surely matches one. */
static query_t gen_query_hitting(diff_t *d)
{
    const ref_entry_t *e = &d->unexp.v[ref_random_live(&d->unexp, &d->rng)];
    query_t q;

    q.src = rng_chance(&d->rng, 30) ? TMX_ANY_SOURCE : e->src;
    q.ignore = gen_mask(d);
    q.tag = e->tag ^ (rng_next(&d->rng) & q.ignore);
    return q;
}

/* ------------------------------------------------------------ comparison */

static void fail_recv(diff_t *d, const char *what, uint32_t src, uint64_t tag,
                      const match_recv_t *got, size_t want)
{
    const match_recv_t *w = want == NONE ? NULL : d->posted.v[want].obj;

    total_mismatches++;
    fail_msg("seed %#" PRIx64 " pending_max %zu op %zu: %s message (src %" PRIu32 ", tag %#" PRIx64
             ") took receive %p (seq %" PRIu64 "), expected %p (seq %" PRIu64 ")",
             d->seed, d->m.pending_max, d->op, what, src, tag, (const void *)got, got ? got->seq : 0,
             (const void *)w, w ? w->seq : 0);
}

static void fail_msg_found(diff_t *d, const char *what, query_t q, const match_msg_t *got,
                           size_t want)
{
    const match_msg_t *w = want == NONE ? NULL : d->unexp.v[want].obj;

    total_mismatches++;
    fail_msg("seed %#" PRIx64 " pending_max %zu op %zu: %s receive (src %" PRIu32 ", tag %#" PRIx64
             ", ignore %#" PRIx64 ") found message %p (seq %" PRIu64 "), expected %p (seq %" PRIu64
             ")",
             d->seed, d->m.pending_max, d->op, what, q.src, q.tag, q.ignore, (const void *)got, got ? got->seq : 0,
             (const void *)w, w ? w->seq : 0);
}

/* The engine's answer to a message, checked; returns the reference index. */
static size_t find_recv_checked(diff_t *d, const char *what, uint32_t src, uint64_t tag)
{
    match_recv_t *got = match_find_recv(&d->m, src, tag);
    size_t want = ref_find_recv(&d->posted, src, tag);

    total_finds++;
    if ((want == NONE ? NULL : d->posted.v[want].obj) != got)
        fail_recv(d, what, src, tag, got, want);
    total_matched += want != NONE;
    return want;
}

static size_t find_msg_checked(diff_t *d, const char *what, query_t q)
{
    match_msg_t *got = match_find_msg(&d->m, q.src, q.tag, q.ignore);
    size_t want = ref_find_msg(&d->unexp, q.src, q.tag, q.ignore);

    total_finds++;
    if ((want == NONE ? NULL : d->unexp.v[want].obj) != got)
        fail_msg_found(d, what, q, got, want);
    total_matched += want != NONE;
    return want;
}

/* ----------------------------------------------------- removal and storage */

static void take_recv(diff_t *d, size_t i)
{
    match_recv_t *r = d->posted.v[i].obj;

    match_remove_recv(&d->m, r);
    assert_false(match_recv_is_posted(r));
    ref_kill(&d->posted, i);
    free(r);
}

static void take_msg(diff_t *d, size_t i)
{
    match_msg_t *msg = d->unexp.v[i].obj;

    match_remove_msg(&d->m, msg);
    assert_false(match_msg_is_stored(msg));
    ref_kill(&d->unexp, i);
    free(msg);
}

/* Entries are allocated one by one so that ASan catches any use the engine
 * makes of an entry after it was removed. */
static void store_recv(diff_t *d, query_t q)
{
    match_recv_t *r = calloc(1, sizeof(*r));

    assert_non_null(r);
    r->src = q.src;
    r->tag = q.tag;
    r->ignore = q.ignore;
    assert_int_equal(match_post(&d->m, r), TMX_OK);
    ref_push(&d->posted, (ref_entry_t){r, q.tag, q.ignore, q.src});
}

static void store_msg(diff_t *d, uint32_t src, uint64_t tag)
{
    match_msg_t *msg = calloc(1, sizeof(*msg));

    assert_non_null(msg);
    msg->src = src;
    msg->tag = tag;
    assert_int_equal(match_add_msg(&d->m, msg), TMX_OK);
    ref_push(&d->unexp, (ref_entry_t){msg, tag, 0, src});
}

/* ------------------------------------------------------------ operations */

/* A receive first looks for an unexpected message, as tmx_trecv does. */
static void op_post(diff_t *d)
{
    query_t q = gen_query(d);
    size_t i = find_msg_checked(d, "posting", q);

    if (i != NONE)
        take_msg(d, i);
    else
        store_recv(d, q);
}

static void op_arrive(diff_t *d)
{
    uint32_t src = gen_src(d);
    uint64_t tag = gen_tag(d);
    size_t i = find_recv_checked(d, "arriving", src, tag);

    if (i != NONE)
        take_recv(d, i);
    else
        store_msg(d, src, tag);
}

static query_t probe_query(diff_t *d)
{
    if (d->unexp.live > 0 && rng_chance(&d->rng, 50))
        return gen_query_hitting(d);
    return gen_query(d);
}

static void op_probe(diff_t *d)
{
    size_t i = find_msg_checked(d, "probing", probe_query(d));

    if (i != NONE)
        assert_true(match_msg_is_stored(d->unexp.v[i].obj));
}

static void op_claim(diff_t *d)
{
    size_t i = find_msg_checked(d, "claiming", probe_query(d));

    if (i != NONE)
        take_msg(d, i);
}

static void op_cancel(diff_t *d)
{
    if (d->posted.live > 0)
        take_recv(d, ref_random_live(&d->posted, &d->rng));
}

static void drain(diff_t *d)
{
    while (d->posted.live > DEPTH_LOW)
        op_cancel(d);
    while (d->unexp.live > DEPTH_LOW) {
        size_t i = find_msg_checked(d, "draining", gen_query_hitting(d));
        take_msg(d, i);
    }
}

static void step(diff_t *d)
{
    uint64_t r = rng_below(&d->rng, 100);

    if (r < 80 && rng_chance(&d->rng, d->prof.post_pct))
        op_post(d);
    else if (r < 80)
        op_arrive(d);
    else if (r < 87)
        op_probe(d);
    else if (r < 94)
        op_claim(d);
    else
        op_cancel(d);
    if (d->posted.live > DEPTH_MAX || d->unexp.live > DEPTH_MAX)
        drain(d);
    assert_int_equal(d->m.n_posted, d->posted.live);
    assert_int_equal(d->m.n_unexp, d->unexp.live);
    total_ops++;
}

/* Empties both sides (checking the global arrival order on the way out)
 * and checks that no bin, mask or pooled object was left behind. */
static void finish(diff_t *d)
{
    static const query_t any_any = {TMX_ANY_SOURCE, 0, TMX_TAG_ANY};

    while (d->posted.live > 0)
        op_cancel(d);
    while (d->unexp.live > 0)
        take_msg(d, find_msg_checked(d, "emptying", any_any));
    assert_int_equal(d->m.n_pending, 0);
    assert_int_equal(d->m.posted.n_bins, d->m.posted.n_idle);
    assert_true(d->m.posted.n_idle <= MATCH_IDLE_BINS);
    assert_int_equal(d->m.unexp.n_bins, 0);
    assert_true(d->m.n_masks <= MATCH_MASKS_KEPT);
    assert_int_equal(d->m.bin_pool.in_use, d->m.posted.n_idle);
}

/* Each seed runs three engines: every receive in a bin at once, a short
 * pending list (indexed often, so that bins and list mix), and tmx's own. */
static const size_t pending_maxes[] = {0, 3, MATCH_PENDING_MAX};

static void run_seed(void **state)
{
    uint64_t seed = *(const uint64_t *)*state;

    for (size_t k = 0; k < ARRAY_LEN(pending_maxes); k++) {
        diff_t *d = calloc(1, sizeof(*d));

        assert_non_null(d);
        assert_int_equal(match_init(&d->m), TMX_OK);
        d->m.pending_max = pending_maxes[k];
        d->seed = seed;
        d->rng = seed;
        d->prof = profile_from_seed(seed);
        for (d->op = 0; d->op < OPS_PER_SEED; d->op++)
            step(d);
        finish(d);
        match_fini(&d->m);
        free(d->posted.v);
        free(d->unexp.v);
        free(d);
    }
    printf("seed %#" PRIx64 ": %" PRIu64 " operations, %" PRIu64 " finds checked (%" PRIu64
           " matched), %" PRIu64 " mismatches\n",
           seed, total_ops, total_finds, total_matched, total_mismatches);
}

/* ------------------------------------------------------------------ main */

static size_t seeds_to_run(uint64_t *out, size_t max)
{
    const char *env = unit_env("TMX_TEST_SEED");
    size_t n = 0;

    if (env != NULL && *env != '\0') {
        out[0] = strtoull(env, NULL, 0);
        return 1;
    }
    for (; n < ARRAY_LEN(seeds) && n < max; n++)
        out[n] = seeds[n];
    return n;
}

int main(int argc, char **argv)
{
    static uint64_t run[ARRAY_LEN(seeds)];
    static char names[ARRAY_LEN(seeds)][40];
    struct CMUnitTest tests[ARRAY_LEN(seeds)] = {{0}};
    size_t n = seeds_to_run(run, ARRAY_LEN(seeds));

    for (size_t i = 0; i < n; i++) {
        snprintf(names[i], sizeof(names[i]), "seed %#" PRIx64, run[i]);
        tests[i].name = names[i];
        tests[i].test_func = run_seed;
        tests[i].initial_state = &run[i];
    }
    return unit_main(argc, argv, &(const unit_group_t){"match_diff", tests, n, NULL, NULL}, 1);
}
