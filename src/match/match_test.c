/*
 * Small, exhaustive cases for the matching engine: every wildcard kind on
 * both sides, ordering across bins, removal, bin reuse, table growth and a
 * full enumeration of small universes against match_matches().
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "unit.h"

#include "match/match.h"
#include "tmx.h"

#define ANY TMX_ANY_SOURCE
#define ALL TMX_TAG_ANY
#define BIT63 ((uint64_t)1 << 63)
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define GROWTH_N 100000

/* ------------------------------------------------------------- fixtures */

/* Two engines: one that puts every receive into a bin at once, so that
 * the tests reach the bins with few receives, and one as tmx runs it,
 * with receives first in the pending list (MATCH_PENDING_MAX). */
static int setup_max(void **state, size_t pending_max)
{
    match_engine_t *m = malloc(sizeof(*m));

    if (m == NULL || match_init(m) != TMX_OK) {
        free(m);
        return -1;
    }
    m->pending_max = pending_max;
    *state = m;
    return 0;
}

static int setup(void **state)
{
    return setup_max(state, 0);
}

static int setup_pending(void **state)
{
    return setup_max(state, MATCH_PENDING_MAX);
}

static int teardown(void **state)
{
    match_engine_t *m = *state;

    match_fini(m);
    free(m);
    return 0;
}

static void post(match_engine_t *m, match_recv_t *r, uint32_t src, uint64_t tag, uint64_t ignore)
{
    r->src = src;
    r->tag = tag;
    r->ignore = ignore;
    assert_int_equal(match_post(m, r), TMX_OK);
    assert_true(match_recv_is_posted(r));
}

static void add(match_engine_t *m, match_msg_t *msg, uint32_t src, uint64_t tag)
{
    msg->src = src;
    msg->tag = tag;
    assert_int_equal(match_add_msg(m, msg), TMX_OK);
    assert_true(match_msg_is_stored(msg));
}

/* A receive arrives: finds and takes the message it must get. */
static void claim_expect(match_engine_t *m, uint32_t src, uint64_t tag, uint64_t ignore,
                         match_msg_t *want)
{
    match_msg_t *got = match_find_msg(m, src, tag, ignore);

    assert_ptr_equal(got, want);
    if (got != NULL) {
        match_remove_msg(m, got);
        assert_false(match_msg_is_stored(got));
    }
}

/* A message arrives: finds and takes the receive it must complete. */
static void arrive_expect(match_engine_t *m, uint32_t src, uint64_t tag, match_recv_t *want)
{
    match_recv_t *got = match_find_recv(m, src, tag);

    assert_ptr_equal(got, want);
    if (got != NULL) {
        match_remove_recv(m, got);
        assert_false(match_recv_is_posted(got));
    }
}

/* Nothing stored and nothing left behind in the tables or the pool but
 * the idle posted bins and unused masks kept for reuse, within bounds. */
static void assert_empty(const match_engine_t *m)
{
    assert_int_equal(m->n_posted, 0);
    assert_int_equal(m->n_pending, 0);
    assert_true(util_dlist_empty(&m->pending));
    assert_int_equal(m->n_unexp, 0);
    assert_int_equal(m->posted.n_bins, m->posted.n_idle);
    assert_true(m->posted.n_idle <= MATCH_IDLE_BINS);
    assert_int_equal(m->unexp.n_bins, 0);
    assert_true(m->n_masks <= MATCH_MASKS_KEPT);
    for (size_t i = 0; i < m->n_masks; i++)
        assert_true(m->masks[i].n_src == 0 && m->masks[i].n_any == 0);
    assert_int_equal(m->bin_pool.in_use, m->posted.n_idle);
}

/* ----------------------------------------------------- one kind, one side */

typedef struct key {
    uint32_t src;
    uint64_t tag;
} msg_key_t;

/* A receive of one wildcard kind, messages it matches and ones it must not. */
typedef struct kind_case {
    uint32_t src;
    uint64_t tag;
    uint64_t ignore;
    msg_key_t hit[3];
    size_t n_hit;
    msg_key_t miss[3];
    size_t n_miss;
} kind_case_t;

static const kind_case_t k_exact = {
    .src = 2, .tag = 0x35, .ignore = 0,
    .hit = {{2, 0x35}}, .n_hit = 1,
    .miss = {{3, 0x35}, {2, 0x34}, {2, 0x35 | BIT63}}, .n_miss = 3,
};

static const kind_case_t k_any_src = {
    .src = ANY, .tag = 0x35, .ignore = 0,
    .hit = {{0, 0x35}, {2, 0x35}, {7, 0x35}}, .n_hit = 3,
    .miss = {{2, 0x34}, {0, 0x135}, {7, 0x35 | BIT63}}, .n_miss = 3,
};

static const kind_case_t k_any_tag = {
    .src = 2, .tag = 0x35, .ignore = ALL,
    .hit = {{2, 0}, {2, 0x35}, {2, ALL}}, .n_hit = 3,
    .miss = {{3, 0x35}, {0, 0}, {1, ALL}}, .n_miss = 3,
};

static const kind_case_t k_any_any = {
    .src = ANY, .tag = 0x35, .ignore = ALL,
    .hit = {{0, 0}, {5, 0x35}, {9, ALL}}, .n_hit = 3,
    .n_miss = 0,
};

/* The receive's own tag carries junk under the mask: it must not count. */
static const kind_case_t k_partial = {
    .src = 2, .tag = 0x3a, .ignore = 0x0f,
    .hit = {{2, 0x30}, {2, 0x3f}, {2, 0x35}}, .n_hit = 3,
    .miss = {{2, 0x25}, {3, 0x35}, {2, 0x135}}, .n_miss = 3,
};

static const kind_case_t k_partial_any_src = {
    .src = ANY, .tag = 0x05, .ignore = 0xf0 | BIT63,
    .hit = {{1, 0x05}, {4, 0xf5 | BIT63}, {0, 0x65}}, .n_hit = 3,
    .miss = {{1, 0x04}, {1, 0x105}, {4, 0x15 | ((uint64_t)1 << 62)}}, .n_miss = 3,
};

static void assert_case_consistent(const kind_case_t *k)
{
    for (size_t i = 0; i < k->n_hit; i++)
        assert_true(match_matches(k->src, k->tag, k->ignore, k->hit[i].src, k->hit[i].tag));
    for (size_t i = 0; i < k->n_miss; i++)
        assert_false(match_matches(k->src, k->tag, k->ignore, k->miss[i].src, k->miss[i].tag));
}

static void check_posted_kind(match_engine_t *m, const kind_case_t *k)
{
    match_recv_t r;

    assert_case_consistent(k);
    post(m, &r, k->src, k->tag, k->ignore);
    for (size_t i = 0; i < k->n_hit; i++)
        assert_ptr_equal(match_find_recv(m, k->hit[i].src, k->hit[i].tag), &r);
    for (size_t i = 0; i < k->n_miss; i++)
        assert_null(match_find_recv(m, k->miss[i].src, k->miss[i].tag));
    assert_int_equal(m->n_posted, 1);
    match_remove_recv(m, &r);
    assert_empty(m);
}

/* Each hit alone, then each hit behind every miss so that the partial-mask
 * path has to skip older messages. */
static void check_unexp_kind(match_engine_t *m, const kind_case_t *k)
{
    match_msg_t miss[3];
    match_msg_t hit;

    assert_case_consistent(k);
    for (size_t i = 0; i < k->n_hit; i++) {
        add(m, &hit, k->hit[i].src, k->hit[i].tag);
        claim_expect(m, k->src, k->tag, k->ignore, &hit);
    }
    for (size_t i = 0; i < k->n_miss; i++)
        add(m, &miss[i], k->miss[i].src, k->miss[i].tag);
    assert_null(match_find_msg(m, k->src, k->tag, k->ignore));
    for (size_t i = 0; i < k->n_hit; i++) {
        add(m, &hit, k->hit[i].src, k->hit[i].tag);
        claim_expect(m, k->src, k->tag, k->ignore, &hit);
    }
    for (size_t i = 0; i < k->n_miss; i++)
        match_remove_msg(m, &miss[i]);
    assert_empty(m);
}

static void test_posted_exact(void **state)
{
    check_posted_kind(*state, &k_exact);
}

static void test_posted_any_src(void **state)
{
    check_posted_kind(*state, &k_any_src);
}

static void test_posted_any_tag(void **state)
{
    check_posted_kind(*state, &k_any_tag);
}

static void test_posted_any_any(void **state)
{
    check_posted_kind(*state, &k_any_any);
}

static void test_posted_partial(void **state)
{
    check_posted_kind(*state, &k_partial);
}

static void test_posted_partial_any_src(void **state)
{
    check_posted_kind(*state, &k_partial_any_src);
}

static void test_unexp_exact(void **state)
{
    check_unexp_kind(*state, &k_exact);
}

static void test_unexp_any_src(void **state)
{
    check_unexp_kind(*state, &k_any_src);
}

static void test_unexp_any_tag(void **state)
{
    check_unexp_kind(*state, &k_any_tag);
}

static void test_unexp_any_any(void **state)
{
    check_unexp_kind(*state, &k_any_any);
}

static void test_unexp_partial(void **state)
{
    check_unexp_kind(*state, &k_partial);
}

static void test_unexp_partial_any_src(void **state)
{
    check_unexp_kind(*state, &k_partial_any_src);
}

/* ------------------------------------------------------------ non-matching */

static void test_empty_finds_nothing(void **state)
{
    match_engine_t *m = *state;

    assert_null(match_find_recv(m, 0, 0));
    assert_null(match_find_msg(m, 0, 0, 0));
    assert_null(match_find_msg(m, ANY, 0, 0));
    assert_null(match_find_msg(m, 0, 0, ALL));
    assert_null(match_find_msg(m, ANY, 0, ALL));
    assert_null(match_find_msg(m, 0, 0, 0xf));
    assert_empty(m);
}

static void test_posted_other_source_not_found(void **state)
{
    match_engine_t *m = *state;
    match_recv_t r;

    post(m, &r, 1, 7, ALL);
    assert_null(match_find_recv(m, 0, 7));
    assert_null(match_find_recv(m, 2, 7));
    match_remove_recv(m, &r);
}

/* High tag bits take part in matching as much as the low ones. */
static void test_posted_high_bit_differs(void **state)
{
    match_engine_t *m = *state;
    match_recv_t r;

    post(m, &r, ANY, 7, 0);
    assert_null(match_find_recv(m, 0, 7 | BIT63));
    assert_null(match_find_recv(m, 0, 7 | ((uint64_t)1 << 32)));
    match_remove_recv(m, &r);
}

static void test_unexp_other_source_not_found(void **state)
{
    match_engine_t *m = *state;
    match_msg_t msg;

    add(m, &msg, 1, 7);
    assert_null(match_find_msg(m, 0, 7, 0));
    assert_null(match_find_msg(m, 2, 0, ALL));
    assert_null(match_find_msg(m, 0, 7, 0x3));
    match_remove_msg(m, &msg);
}

static void test_unexp_high_bit_differs(void **state)
{
    match_engine_t *m = *state;
    match_msg_t msg;

    add(m, &msg, 1, 7 | BIT63);
    assert_null(match_find_msg(m, 1, 7, 0));
    assert_null(match_find_msg(m, ANY, 7, 0));
    assert_null(match_find_msg(m, 1, 7, 0xff));
    assert_ptr_equal(match_find_msg(m, 1, 7, BIT63), &msg);
    match_remove_msg(m, &msg);
}

/* A named-source mask must not be consulted for ANY receives and back. */
static void test_posted_mask_counts_per_source_kind(void **state)
{
    match_engine_t *m = *state;
    match_recv_t named, any;

    post(m, &named, 2, 0x10, 0xf);
    post(m, &any, ANY, 0x10, 0xf);
    match_remove_recv(m, &named);
    arrive_expect(m, 3, 0x1f, &any);
    assert_empty(m);
}

/* ------------------------------------------------- ordering, posted side */

static void test_posted_fifo_same_bin(void **state)
{
    match_engine_t *m = *state;
    match_recv_t r[3];

    for (int i = 0; i < 3; i++)
        post(m, &r[i], 2, 5, 0);
    for (int i = 0; i < 3; i++)
        arrive_expect(m, 2, 5, &r[i]);
    arrive_expect(m, 2, 5, NULL);
    assert_empty(m);
}

static void test_posted_older_wildcard_beats_newer_exact(void **state)
{
    match_engine_t *m = *state;
    match_recv_t exact0, any, exact1;

    post(m, &exact0, 2, 5, 0);
    post(m, &any, ANY, 0, ALL);
    post(m, &exact1, 2, 5, 0);
    arrive_expect(m, 2, 5, &exact0);
    arrive_expect(m, 2, 5, &any);
    arrive_expect(m, 2, 5, &exact1);
    assert_empty(m);
}

static void test_posted_skips_older_nonmatching(void **state)
{
    match_engine_t *m = *state;
    match_recv_t other, any;

    post(m, &other, 3, 0x35, 0);
    post(m, &any, ANY, 0, ALL);
    arrive_expect(m, 2, 0x35, &any);
    arrive_expect(m, 3, 0x35, &other);
    assert_empty(m);
}

/* Six receives of different kinds, all matching message (2, 0x35). */
static const struct {
    uint32_t src;
    uint64_t tag;
    uint64_t ignore;
} all_kinds[] = {
    {2, 0x35, 0}, {ANY, 0x35, 0}, {2, 0, ALL}, {ANY, 0, ALL}, {2, 0x3a, 0x0f}, {ANY, 0x05, 0xf0 | BIT63},
};

#define N_KINDS ARRAY_LEN(all_kinds)

static bool next_permutation(size_t *p, size_t n)
{
    size_t i = n - 1, j = n - 1;

    while (i > 0 && p[i - 1] >= p[i])
        i--;
    if (i == 0)
        return false;
    while (p[j] <= p[i - 1])
        j--;
    size_t t = p[i - 1];
    p[i - 1] = p[j];
    p[j] = t;
    for (j = n - 1; i < j; i++, j--) {
        t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    return true;
}

static void check_post_order(match_engine_t *m, const size_t *perm)
{
    match_recv_t r[N_KINDS];

    for (size_t i = 0; i < N_KINDS; i++)
        post(m, &r[i], all_kinds[perm[i]].src, all_kinds[perm[i]].tag, all_kinds[perm[i]].ignore);
    for (size_t i = 0; i < N_KINDS; i++)
        arrive_expect(m, 2, 0x35, &r[i]);
    assert_empty(m);
}

/* Whatever bins and masks the receives live in, post order decides. */
static void test_posted_order_every_permutation_of_kinds(void **state)
{
    size_t perm[N_KINDS];
    size_t count = 0;

    for (size_t i = 0; i < N_KINDS; i++)
        perm[i] = i;
    do {
        check_post_order(*state, perm);
        count++;
    } while (next_permutation(perm, N_KINDS));
    assert_int_equal(count, 720);
}

/* --------------------------------------------- ordering, unexpected side */

static void test_unexp_fifo_same_key(void **state)
{
    match_engine_t *m = *state;
    match_msg_t msg[3];

    for (int i = 0; i < 3; i++)
        add(m, &msg[i], 2, 5);
    for (int i = 0; i < 3; i++)
        claim_expect(m, 2, 5, 0, &msg[i]);
    claim_expect(m, 2, 5, 0, NULL);
    assert_empty(m);
}

static void test_unexp_any_src_earliest(void **state)
{
    match_engine_t *m = *state;
    match_msg_t msg[4];

    add(m, &msg[0], 1, 5);
    add(m, &msg[1], 2, 6);
    add(m, &msg[2], 2, 5);
    add(m, &msg[3], 0, 5);
    claim_expect(m, ANY, 5, 0, &msg[0]);
    claim_expect(m, ANY, 5, 0, &msg[2]);
    claim_expect(m, ANY, 5, 0, &msg[3]);
    claim_expect(m, ANY, 5, 0, NULL);
    claim_expect(m, 2, 6, 0, &msg[1]);
    assert_empty(m);
}

static void test_unexp_any_tag_source_order(void **state)
{
    match_engine_t *m = *state;
    match_msg_t msg[4];

    add(m, &msg[0], 1, 7);
    add(m, &msg[1], 2, 3);
    add(m, &msg[2], 1, 2);
    add(m, &msg[3], 1, ALL);
    claim_expect(m, 1, 0, ALL, &msg[0]);
    claim_expect(m, 1, 0, ALL, &msg[2]);
    claim_expect(m, 1, 0, ALL, &msg[3]);
    claim_expect(m, 1, 0, ALL, NULL);
    claim_expect(m, 2, 0, ALL, &msg[1]);
    assert_empty(m);
}

static void test_unexp_any_any_arrival_order(void **state)
{
    match_engine_t *m = *state;
    match_msg_t msg[5];
    const msg_key_t keys[5] = {{3, 9}, {0, 0}, {3, 1}, {1, ALL}, {0, 0}};

    for (int i = 0; i < 5; i++)
        add(m, &msg[i], keys[i].src, keys[i].tag);
    for (int i = 0; i < 5; i++)
        claim_expect(m, ANY, 0, ALL, &msg[i]);
    assert_empty(m);
}

static void test_unexp_partial_skips_nonmatching(void **state)
{
    match_engine_t *m = *state;
    match_msg_t msg[4];

    add(m, &msg[0], 2, 0x40);
    add(m, &msg[1], 2, 0x31);
    add(m, &msg[2], 3, 0x32);
    add(m, &msg[3], 2, 0x3f);
    claim_expect(m, 2, 0x30, 0x0f, &msg[1]);
    claim_expect(m, 2, 0x30, 0x0f, &msg[3]);
    claim_expect(m, 2, 0x30, 0x0f, NULL);
    claim_expect(m, ANY, 0x30, 0x0f, &msg[2]);
    claim_expect(m, ANY, 0x30, 0x0f, NULL);
    claim_expect(m, 2, 0x40, 0, &msg[0]);
    assert_empty(m);
}

static void test_unexp_per_source_order_interleaved(void **state)
{
    match_engine_t *m = *state;
    match_msg_t msg[9];

    /* Source s sends tags 2, 1, 0, so tag order disagrees with arrival. */
    for (int i = 0; i < 9; i++)
        add(m, &msg[i], (uint32_t)(i % 3), (uint64_t)(2 - i / 3));
    for (int s = 2; s >= 0; s--) {
        for (int k = 0; k < 3; k++)
            claim_expect(m, (uint32_t)s, 0, ALL, &msg[k * 3 + s]);
    }
    assert_empty(m);
}

/* A claim through one bin must leave the message's other bins coherent. */
static void test_unexp_exact_after_wildcard_claim(void **state)
{
    match_engine_t *m = *state;
    match_msg_t msg[3];

    add(m, &msg[0], 2, 5);
    add(m, &msg[1], 1, 5);
    add(m, &msg[2], 2, 5);
    claim_expect(m, ANY, 0, ALL, &msg[0]);
    claim_expect(m, 2, 5, 0, &msg[2]);
    claim_expect(m, 2, 0, ALL, NULL);
    claim_expect(m, ANY, 5, 0, &msg[1]);
    assert_empty(m);
}

/* ----------------------------------------------------------------- removal */

static void test_cancel_head_passes_to_next(void **state)
{
    match_engine_t *m = *state;
    match_recv_t r[2];

    post(m, &r[0], 2, 5, 0);
    post(m, &r[1], 2, 5, 0);
    match_remove_recv(m, &r[0]);
    assert_false(match_recv_is_posted(&r[0]));
    assert_int_equal(m->n_posted, 1);
    arrive_expect(m, 2, 5, &r[1]);
    assert_empty(m);
}

static void test_cancel_middle_keeps_order(void **state)
{
    match_engine_t *m = *state;
    match_recv_t r[3];

    post(m, &r[0], ANY, 0, ALL);
    post(m, &r[1], 2, 5, 0);
    post(m, &r[2], ANY, 5, 0);
    match_remove_recv(m, &r[1]);
    arrive_expect(m, 2, 5, &r[0]);
    arrive_expect(m, 2, 5, &r[2]);
    arrive_expect(m, 2, 5, NULL);
    assert_empty(m);
}

static void test_cancel_last_of_mask_forgets_mask(void **state)
{
    match_engine_t *m = *state;
    match_recv_t r;

    post(m, &r, 1, 0x100, 0xff);
    assert_int_equal(m->n_masks, 1);
    match_remove_recv(m, &r);
    assert_null(match_find_recv(m, 1, 0x100));
    assert_empty(m);
}

static void test_claim_removes_from_every_bin(void **state)
{
    match_engine_t *m = *state;
    match_msg_t msg;

    add(m, &msg, 2, 5);
    /* Bins are made by the first lookup that needs them. */
    assert_int_equal(m->unexp.n_bins, 0);
    assert_ptr_equal(match_find_msg(m, 2, 5, 0), &msg);
    assert_int_equal(m->unexp.n_bins, MATCH_LINK_BINS);
    claim_expect(m, 2, 5, 0, &msg);
    assert_null(match_find_msg(m, 2, 5, 0));
    assert_null(match_find_msg(m, ANY, 5, 0));
    assert_null(match_find_msg(m, 2, 0, ALL));
    assert_null(match_find_msg(m, ANY, 0, ALL));
    assert_null(match_find_msg(m, 2, 4, 1));
    assert_empty(m);
}

static void test_probe_leaves_message(void **state)
{
    match_engine_t *m = *state;
    match_msg_t msg;

    add(m, &msg, 2, 5);
    assert_ptr_equal(match_find_msg(m, 2, 5, 0), &msg);
    assert_ptr_equal(match_find_msg(m, 2, 5, 0), &msg);
    assert_ptr_equal(match_find_msg(m, ANY, 4, 1), &msg);
    assert_ptr_equal(match_find_msg(m, ANY, 0, ALL), &msg);
    assert_true(match_msg_is_stored(&msg));
    assert_int_equal(m->n_unexp, 1);
    claim_expect(m, 2, 0, ALL, &msg);
    assert_empty(m);
}

static void test_probe_then_claim_exposes_next(void **state)
{
    match_engine_t *m = *state;
    match_msg_t msg[2];

    add(m, &msg[0], 2, 5);
    add(m, &msg[1], 3, 5);
    assert_ptr_equal(match_find_msg(m, ANY, 5, 0), &msg[0]);
    claim_expect(m, 2, 5, 0, &msg[0]);
    assert_ptr_equal(match_find_msg(m, ANY, 5, 0), &msg[1]);
    claim_expect(m, ANY, 1, 0xf, &msg[1]);
    assert_empty(m);
}

/* ------------------------------------------------------ the pending list */

/* Receives wait unindexed until more than MATCH_PENDING_MAX are posted;
 * then all go into bins in post order, and matching still takes the
 * oldest, whether it is in a bin or still pending. */
static void test_pending_then_indexed(void **state)
{
    match_engine_t *m = *state;
    match_recv_t r[3 * MATCH_PENDING_MAX];
    size_t n = ARRAY_LEN(r);

    for (size_t i = 0; i < MATCH_PENDING_MAX; i++)
        post(m, &r[i], 1, 7, 0);
    assert_int_equal(m->n_pending, MATCH_PENDING_MAX);
    assert_int_equal(m->posted.n_bins, 0);
    for (size_t i = MATCH_PENDING_MAX; i < n; i++)
        post(m, &r[i], i % 2 ? ANY : 1, 7, i % 3 ? 0 : ALL);
    assert_true(m->n_pending <= MATCH_PENDING_MAX);
    assert_true(m->posted.n_bins > 0);
    for (size_t i = 0; i < n; i++)
        arrive_expect(m, 1, 7, &r[i]);
    assert_empty(m);
}

/* A pending receive older than every indexed one cannot exist, but a
 * newer pending one must lose to an older indexed one on another key. */
static void test_indexed_older_beats_pending(void **state)
{
    match_engine_t *m = *state;
    match_recv_t wild, exact;

    post(m, &wild, ANY, 0, ALL);
    match_index_posted(m);
    assert_int_equal(m->n_pending, 0);
    post(m, &exact, 2, 5, 0);
    assert_int_equal(m->n_pending, 1);
    arrive_expect(m, 2, 5, &wild);
    arrive_expect(m, 2, 5, &exact);
    arrive_expect(m, 2, 5, NULL);
    assert_empty(m);
}

/* Cancelling a pending receive takes it out of the list, not a bin. */
static void test_pending_cancel(void **state)
{
    match_engine_t *m = *state;
    match_recv_t r[3];

    for (int i = 0; i < 3; i++)
        post(m, &r[i], 4, 9, 0);
    match_remove_recv(m, &r[1]);
    assert_false(match_recv_is_posted(&r[1]));
    assert_int_equal(m->n_pending, 2);
    arrive_expect(m, 4, 9, &r[0]);
    arrive_expect(m, 4, 9, &r[2]);
    assert_empty(m);
}

/* A window of receives on one key (one source, one mask, one masked tag:
 * the bits under the mask may differ) stays in the list past
 * MATCH_PENDING_MAX, with no bin; a message of another key matches none of
 * them, one of that key takes the oldest; a receive on another key then
 * puts the whole window into bins, in order, and the oldest still wins. */
static void test_pending_one_key_window(void **state)
{
    match_engine_t *m = *state;
    match_recv_t r[4 * MATCH_PENDING_MAX], other, any;
    size_t n = ARRAY_LEN(r);

    for (size_t i = 0; i < n; i++)
        post(m, &r[i], 3, 0x50 | (i & 0xf), 0xf);
    assert_int_equal(m->n_pending, n);
    assert_int_equal(m->posted.n_bins, 0);
    assert_false(match_any_source_posted(m));
    arrive_expect(m, 4, 0x51, NULL);
    arrive_expect(m, 3, 0x61, NULL);
    arrive_expect(m, 3, 0x5e, &r[0]);
    match_remove_recv(m, &r[5]); /* cancelled in the middle */
    assert_int_equal(m->n_pending, n - 2);
    post(m, &other, 3, 0x51, 0); /* another mask: the window goes into its bin */
    assert_int_equal(m->n_pending, 1);
    assert_int_equal(m->posted.n_bins, 1);
    for (size_t i = 1; i < n; i++) {
        if (i != 5)
            arrive_expect(m, 3, 0x51, &r[i]);
    }
    arrive_expect(m, 3, 0x51, &other);
    assert_empty(m);

    /* a window of any-source receives: seen as such, and a receive on
     * another key after a short one-key list joins it unindexed */
    for (size_t i = 0; i < 2 * MATCH_PENDING_MAX; i++)
        post(m, &r[i], ANY, 9, 0);
    assert_true(match_any_source_posted(m));
    arrive_expect(m, 7, 9, &r[0]);
    for (size_t i = 1; i < 2 * MATCH_PENDING_MAX; i++)
        arrive_expect(m, 1, 9, &r[i]);
    assert_false(match_any_source_posted(m));
    post(m, &r[0], 2, 9, 0);
    post(m, &any, ANY, 9, 0);
    assert_int_equal(m->n_pending, 2);
    assert_true(match_any_source_posted(m));
    arrive_expect(m, 1, 9, &any);
    arrive_expect(m, 2, 9, &r[0]);
    assert_empty(m);
}

/* Takes every bin the pool has and lets it grow no more: the next bin
 * the engine asks for finds no memory. */
static size_t bins_exhaust(match_engine_t *m, void **held, size_t cap)
{
    size_t n = 0;

    util_pool_set_limit(&m->bin_pool, m->bin_pool.n_chunks);
    while (n < cap && (held[n] = util_pool_get(&m->bin_pool)) != NULL)
        n++;
    assert_true(n < cap);
    return n;
}

static void bins_release(match_engine_t *m, void **held, size_t n)
{
    while (n > 0)
        util_pool_put(&m->bin_pool, held[--n]);
    util_pool_set_limit(&m->bin_pool, 0);
}

/* Out of memory when a receive on another key comes: the long window
 * still goes into its bin (set aside when it passed MATCH_PENDING_MAX),
 * so arrivals do not scan it; and a window that found no memory to set
 * aside as it passed the bound stays correct, only slower. */
static void test_pending_one_key_window_nomem(void **state)
{
    match_engine_t *m = *state;
    match_recv_t r[4 * MATCH_PENDING_MAX], other;
    size_t n = ARRAY_LEN(r), k;
    static void *held[4096];

    for (size_t i = 0; i < n; i++)
        post(m, &r[i], 6, 40, 0);
    k = bins_exhaust(m, held, ARRAY_LEN(held));
    post(m, &other, 6, 41, 0);
    assert_int_equal(m->n_pending, 1);
    assert_int_equal(m->posted.n_bins, 1);
    arrive_expect(m, 6, 41, &other);
    for (size_t i = 0; i < n; i++)
        arrive_expect(m, 6, 40, &r[i]);
    bins_release(m, held, k);
    assert_empty(m);

    /* nothing to set aside as the window passes the bound */
    for (size_t i = 0; i < MATCH_PENDING_MAX; i++)
        post(m, &r[i], 6, 40, 0);
    k = bins_exhaust(m, held, ARRAY_LEN(held));
    for (size_t i = MATCH_PENDING_MAX; i < n; i++)
        post(m, &r[i], 6, 40, 0);
    post(m, &other, 6, 41, 0);
    arrive_expect(m, 6, 41, &other);
    arrive_expect(m, 6, 42, NULL);
    for (size_t i = 0; i < n; i++)
        arrive_expect(m, 6, 40, &r[i]);
    bins_release(m, held, k);
    assert_empty(m);
}

/* A wildcard receive is seen whether it waits in the list or in a bin. */
static void test_any_source_posted(void **state)
{
    match_engine_t *m = *state;
    match_recv_t named, any;

    assert_false(match_any_source_posted(m));
    post(m, &named, 3, 1, 0);
    assert_false(match_any_source_posted(m));
    post(m, &any, ANY, 1, 0);
    assert_true(match_any_source_posted(m));
    match_index_posted(m);
    assert_true(match_any_source_posted(m));
    match_remove_recv(m, &any);
    assert_false(match_any_source_posted(m));
    match_remove_recv(m, &named);
    assert_empty(m);
}

/* -------------------------------------------------------------- bin reuse */

/* Emptied bins are kept for reuse, but no more than MATCH_IDLE_BINS: a
 * stream of distinct tags does not grow the table. */
static void test_idle_bins_bounded(void **state)
{
    match_engine_t *m = *state;
    match_recv_t r;

    for (uint64_t tag = 0; tag < 10 * MATCH_IDLE_BINS; tag++) {
        post(m, &r, 3, tag, 0);
        arrive_expect(m, 3, tag, &r);
        assert_null(match_find_recv(m, 3, tag));
    }
    assert_int_equal(m->posted.n_idle, MATCH_IDLE_BINS);
    assert_empty(m);
    /* an idle bin found again serves its key like a new one */
    post(m, &r, 3, 10 * MATCH_IDLE_BINS - 1, 0);
    assert_int_equal(m->posted.n_idle, MATCH_IDLE_BINS - 1);
    arrive_expect(m, 3, 10 * MATCH_IDLE_BINS - 1, &r);
    assert_empty(m);
}

/* Receives that stay posted on as many keys as idle bins are kept, and a
 * stream of new keys beside them: the idle bins stay (the array grows
 * once), not emptied each time the array could halve. */
static void test_idle_bins_kept_beside_posted(void **state)
{
    match_engine_t *m = *state;
    match_recv_t stay[MATCH_IDLE_BINS], r;
    size_t grown = 0;

    for (uint64_t i = 0; i < MATCH_IDLE_BINS; i++)
        post(m, &stay[i], 1, 1000000 + i, 0);
    for (uint64_t tag = 0; tag < 20 * MATCH_IDLE_BINS; tag++) {
        post(m, &r, 3, tag, 0);
        arrive_expect(m, 3, tag, &r);
        if (tag == 2 * MATCH_IDLE_BINS)
            grown = m->posted.n_buckets;
        if (tag > 2 * MATCH_IDLE_BINS) {
            assert_int_equal(m->posted.n_idle, MATCH_IDLE_BINS);
            assert_int_equal(m->posted.n_buckets, grown);
        }
    }
    for (uint64_t i = 0; i < MATCH_IDLE_BINS; i++)
        arrive_expect(m, 1, 1000000 + i, &stay[i]);
    assert_empty(m);
}

static void test_posted_bin_reused(void **state)
{
    match_engine_t *m = *state;
    match_recv_t r[2];

    for (int round = 0; round < 3; round++) {
        post(m, &r[0], 2, 5, 0x1);
        post(m, &r[1], 2, 4, 0x1);
        assert_int_equal(m->posted.n_bins, 1);
        arrive_expect(m, 2, 5, &r[0]);
        arrive_expect(m, 2, 4, &r[1]);
        assert_empty(m);
    }
}

/* A refilled bin's new head is younger than the heads of other bins. */
static void test_posted_refilled_bin_is_younger(void **state)
{
    match_engine_t *m = *state;
    match_recv_t exact0, any, exact1;

    post(m, &exact0, 2, 5, 0);
    post(m, &any, ANY, 0, ALL);
    match_remove_recv(m, &exact0);
    post(m, &exact1, 2, 5, 0);
    arrive_expect(m, 2, 5, &any);
    arrive_expect(m, 2, 5, &exact1);
    assert_empty(m);
}

static void test_unexp_bin_reused(void **state)
{
    match_engine_t *m = *state;
    match_msg_t msg[2];

    for (int round = 0; round < 3; round++) {
        add(m, &msg[0], 2, 5);
        add(m, &msg[1], 2, 5);
        claim_expect(m, 2, 5, 0, &msg[0]);
        claim_expect(m, 2, 5, 0, &msg[1]);
        assert_empty(m);
    }
}

static void test_unexp_refilled_bin_is_younger(void **state)
{
    match_engine_t *m = *state;
    match_msg_t msg[3];

    add(m, &msg[0], 2, 5);
    add(m, &msg[1], 2, 6);
    claim_expect(m, 2, 5, 0, &msg[0]);
    add(m, &msg[2], 2, 5);
    claim_expect(m, 2, 0, ALL, &msg[1]);
    claim_expect(m, 2, 0, ALL, &msg[2]);
    assert_empty(m);
}

/* ----------------------------------------------------------------- growth */

static const uint64_t growth_masks[] = {0, ALL, 0x1, 0xff00, BIT63};

static void fill_posted(match_engine_t *m, match_recv_t *r, size_t n, bool mixed)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t ignore = mixed ? growth_masks[i % ARRAY_LEN(growth_masks)] : 0;
        uint32_t src = mixed && i % 3 == 0 ? ANY : (uint32_t)(i % 7);
        post(m, &r[i], src, (uint64_t)i << 16, ignore);
    }
    assert_int_equal(m->n_posted, n);
}

static void test_growth_posted_exact(void **state)
{
    match_engine_t *m = *state;
    match_recv_t *r = calloc(GROWTH_N, sizeof(*r));

    assert_non_null(r);
    /* twice: a burst grows the array again after the last one's shrink */
    for (int round = 0; round < 2; round++) {
        fill_posted(m, r, GROWTH_N, false);
        assert_true(m->posted.n_buckets >= GROWTH_N);
        for (size_t i = 0; i < GROWTH_N; i++)
            arrive_expect(m, (uint32_t)(i % 7), (uint64_t)i << 16, &r[i]);
        assert_empty(m);
        /* the burst's bins went, idle ones too as far as the array
         * needed: it is back at its first size, whatever the burst's */
        assert_int_equal(m->posted.n_buckets, 128);
        assert_true(m->posted.n_idle <= MATCH_IDLE_BINS);
    }
    free(r);
}

/* Mixed kinds removed newest first, to unlink from bin tails too. */
static void test_growth_posted_mixed_cancel(void **state)
{
    match_engine_t *m = *state;
    match_recv_t *r = calloc(GROWTH_N, sizeof(*r));

    assert_non_null(r);
    fill_posted(m, r, GROWTH_N, true);
    assert_int_equal(m->n_masks, ARRAY_LEN(growth_masks));
    for (size_t i = GROWTH_N; i-- > 0;) {
        match_remove_recv(m, &r[i]);
        assert_int_equal(m->n_posted, i);
    }
    assert_empty(m);
    /* the bins beyond the idle ones went, and the array with them */
    assert_true(m->posted.n_bins <= MATCH_IDLE_BINS);
    assert_int_equal(m->posted.n_buckets, 128);
    free(r);
}

static void test_growth_unexp_distinct_tags(void **state)
{
    match_engine_t *m = *state;
    match_msg_t *msg = calloc(GROWTH_N, sizeof(*msg));

    assert_non_null(msg);
    for (size_t i = 0; i < GROWTH_N; i++)
        add(m, &msg[i], (uint32_t)(i % 5), i);
    assert_int_equal(m->n_unexp, GROWTH_N);
    for (size_t i = 0; i < GROWTH_N; i += 1000)
        assert_ptr_equal(match_find_msg(m, (uint32_t)(i % 5), i, 0), &msg[i]);
    assert_true(m->unexp.n_buckets >= GROWTH_N);
    for (size_t i = 0; i < GROWTH_N; i++) {
        claim_expect(m, ANY, 0, ALL, &msg[i]);
        /* the bucket array shrinks as the bins go, never below half full / 4 */
        assert_true(m->unexp.n_bins > m->unexp.n_buckets / 16 || m->unexp.n_buckets <= 128);
    }
    assert_empty(m);
    assert_int_equal(m->unexp.n_buckets, 128); /* where shrinking stops */
    free(msg);
}

static void test_growth_unexp_one_key(void **state)
{
    match_engine_t *m = *state;
    match_msg_t *msg = calloc(GROWTH_N, sizeof(*msg));

    assert_non_null(msg);
    for (size_t i = 0; i < GROWTH_N; i++)
        add(m, &msg[i], 4, 77);
    assert_ptr_equal(match_find_msg(m, 4, 77, 0), &msg[0]);
    assert_int_equal(m->unexp.n_bins, MATCH_LINK_BINS);
    for (size_t i = 0; i < GROWTH_N; i++) {
        claim_expect(m, 4, 77, 0, &msg[i]);
        assert_int_equal(m->n_unexp, GROWTH_N - 1 - i);
    }
    assert_empty(m);
    free(msg);
}

/* ------------------------------------------------------------------- fini */

/* Stored entries are forgotten; fini must free every bin and bucket array
 * (ASan's leak check) and leave an engine that init can reuse. */
static void test_fini_with_entries_stored(void **state)
{
    match_engine_t *m = *state;
    match_recv_t *r = calloc(1000, sizeof(*r));
    match_msg_t *msg = calloc(1000, sizeof(*msg));

    assert_non_null(r);
    assert_non_null(msg);
    fill_posted(m, r, 1000, true);
    for (size_t i = 0; i < 1000; i++)
        add(m, &msg[i], (uint32_t)(i % 3), i);
    match_fini(m);
    free(r);
    free(msg);
    assert_int_equal(match_init(m), TMX_OK);
    assert_empty(m);
}

/* -------------------------------------------------------------- enumeration */

typedef struct universe {
    const uint32_t *srcs; /* message sources; receives also use ANY */
    size_t n_srcs;
    const uint64_t *tags;
    size_t n_tags;
    const uint64_t *masks;
    size_t n_masks;
} universe_t;

typedef struct recv_key {
    uint32_t src;
    uint64_t tag;
    uint64_t ignore;
} recv_key_t;

static const uint32_t small_srcs[] = {0, 1, 2};
static const uint64_t small_tags[] = {0, 1, 2, 3};
static const uint64_t small_masks[] = {0, 1, 2, 3, ALL};
static const universe_t small = {small_srcs, 3, small_tags, 4, small_masks, 5};

static const uint64_t high_tags[] = {0, 1, BIT63, BIT63 | 1, (uint64_t)1 << 32};
static const uint64_t high_masks[] = {0, 1, BIT63, ~(uint64_t)1, ALL, 0xffffffff00000000};
static const universe_t high = {small_srcs, 3, high_tags, 5, high_masks, 6};

static size_t n_recv_keys(const universe_t *u)
{
    return (u->n_srcs + 1) * u->n_tags * u->n_masks;
}

static recv_key_t recv_key(const universe_t *u, size_t i)
{
    size_t s = i % (u->n_srcs + 1);
    size_t t = i / (u->n_srcs + 1) % u->n_tags;
    size_t k = i / (u->n_srcs + 1) / u->n_tags;

    return (recv_key_t){s == u->n_srcs ? ANY : u->srcs[s], u->tags[t], u->masks[k]};
}

static size_t n_msg_keys(const universe_t *u)
{
    return u->n_srcs * u->n_tags;
}

static msg_key_t msg_key(const universe_t *u, size_t i)
{
    return (msg_key_t){u->srcs[i % u->n_srcs], u->tags[i / u->n_srcs]};
}

static bool key_matches(recv_key_t r, msg_key_t k)
{
    return match_matches(r.src, r.tag, r.ignore, k.src, k.tag);
}

static void enum_pairs_posted(match_engine_t *m, const universe_t *u)
{
    for (size_t i = 0; i < n_recv_keys(u); i++) {
        recv_key_t rk = recv_key(u, i);
        match_recv_t r;
        post(m, &r, rk.src, rk.tag, rk.ignore);
        for (size_t j = 0; j < n_msg_keys(u); j++) {
            msg_key_t k = msg_key(u, j);
            assert_ptr_equal(match_find_recv(m, k.src, k.tag), key_matches(rk, k) ? &r : NULL);
        }
        match_remove_recv(m, &r);
        assert_empty(m);
    }
}

static void enum_pairs_unexp(match_engine_t *m, const universe_t *u)
{
    for (size_t j = 0; j < n_msg_keys(u); j++) {
        msg_key_t k = msg_key(u, j);
        match_msg_t msg;
        add(m, &msg, k.src, k.tag);
        for (size_t i = 0; i < n_recv_keys(u); i++) {
            recv_key_t rk = recv_key(u, i);
            assert_ptr_equal(match_find_msg(m, rk.src, rk.tag, rk.ignore),
                             key_matches(rk, k) ? &msg : NULL);
        }
        match_remove_msg(m, &msg);
        assert_empty(m);
    }
}

/* A fixed shuffle, so stored order differs from enumeration order. */
static void shuffle(size_t *order, size_t n)
{
    uint64_t x = 0x2545f4914f6cdd1dULL;

    for (size_t i = 0; i < n; i++)
        order[i] = i;
    for (size_t i = n; i > 1; i--) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t j = (size_t)(x % i);
        size_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
}

/* The reference: linear scan of live receives in post order. */
static match_recv_t *ref_first_recv(match_recv_t *r, const bool *live, size_t n, msg_key_t k)
{
    for (size_t i = 0; i < n; i++) {
        recv_key_t rk = {r[i].src, r[i].tag, r[i].ignore};
        if (live[i] && key_matches(rk, k))
            return &r[i];
    }
    return NULL;
}

/* Stores the receive keys twice over, in shuffled post order. */
static void post_all(match_engine_t *m, const universe_t *u, match_recv_t *r, bool *live, size_t n)
{
    size_t *order = malloc(n * sizeof(*order));

    assert_non_null(order);
    shuffle(order, n);
    for (size_t i = 0; i < n; i++) {
        recv_key_t rk = recv_key(u, order[i] % n_recv_keys(u));
        post(m, &r[i], rk.src, rk.tag, rk.ignore);
        live[i] = true;
    }
    free(order);
}

/* Every message key arrives once; true if any took a receive. */
static bool arrive_round(match_engine_t *m, const universe_t *u, match_recv_t *r, bool *live,
                         size_t n)
{
    bool progress = false;

    for (size_t j = 0; j < n_msg_keys(u); j++) {
        msg_key_t k = msg_key(u, j);
        match_recv_t *want = ref_first_recv(r, live, n, k);
        arrive_expect(m, k.src, k.tag, want);
        if (want != NULL) {
            live[want - r] = false;
            progress = true;
        }
    }
    return progress;
}

/* Every receive key posted at once, then every message key arrives again
 * and again until nothing matches; then the rest are canceled. */
static void enum_all_posted(match_engine_t *m, const universe_t *u)
{
    size_t n = 2 * n_recv_keys(u);
    match_recv_t *r = calloc(n, sizeof(*r));
    bool *live = calloc(n, sizeof(*live));

    assert_true(r != NULL && live != NULL);
    post_all(m, u, r, live, n);
    while (arrive_round(m, u, r, live, n))
        ;
    for (size_t i = 0; i < n; i++) {
        if (live[i])
            match_remove_recv(m, &r[i]);
    }
    assert_empty(m);
    free(r);
    free(live);
}

static match_msg_t *ref_first_msg(match_msg_t *msg, const bool *live, size_t n, recv_key_t rk)
{
    for (size_t i = 0; i < n; i++) {
        if (live[i] && key_matches(rk, (msg_key_t){msg[i].src, msg[i].tag}))
            return &msg[i];
    }
    return NULL;
}

/* Stores the message keys three times over, in shuffled arrival order. */
static void add_all(match_engine_t *m, const universe_t *u, match_msg_t *msg, bool *live, size_t n)
{
    size_t *order = malloc(n * sizeof(*order));

    assert_non_null(order);
    shuffle(order, n);
    for (size_t i = 0; i < n; i++) {
        msg_key_t k = msg_key(u, order[i] % n_msg_keys(u));
        add(m, &msg[i], k.src, k.tag);
        live[i] = true;
    }
    free(order);
}

static void probe_round(match_engine_t *m, const universe_t *u, match_msg_t *msg, bool *live,
                        size_t n)
{
    for (size_t i = 0; i < n_recv_keys(u); i++) {
        recv_key_t rk = recv_key(u, i);
        assert_ptr_equal(match_find_msg(m, rk.src, rk.tag, rk.ignore), ref_first_msg(msg, live, n, rk));
    }
}

/* Every receive key claims once; true if any took a message. */
static bool claim_round(match_engine_t *m, const universe_t *u, match_msg_t *msg, bool *live,
                        size_t n)
{
    bool progress = false;

    for (size_t i = 0; i < n_recv_keys(u); i++) {
        recv_key_t rk = recv_key(u, i);
        match_msg_t *want = ref_first_msg(msg, live, n, rk);
        claim_expect(m, rk.src, rk.tag, rk.ignore, want);
        if (want != NULL) {
            live[want - msg] = false;
            progress = true;
        }
    }
    return progress;
}

/* Every message key stored at once, probed by every receive key, then
 * claimed by every receive key again and again until none is left. */
static void enum_all_unexp(match_engine_t *m, const universe_t *u)
{
    size_t n = 3 * n_msg_keys(u);
    match_msg_t *msg = calloc(n, sizeof(*msg));
    bool *live = calloc(n, sizeof(*live));

    assert_true(msg != NULL && live != NULL);
    add_all(m, u, msg, live, n);
    probe_round(m, u, msg, live, n);
    while (claim_round(m, u, msg, live, n))
        ;
    assert_empty(m);
    free(msg);
    free(live);
}

static void test_enum_pairs_posted_small(void **state)
{
    enum_pairs_posted(*state, &small);
}

static void test_enum_pairs_unexp_small(void **state)
{
    enum_pairs_unexp(*state, &small);
}

static void test_enum_all_posted_small(void **state)
{
    enum_all_posted(*state, &small);
}

static void test_enum_all_unexp_small(void **state)
{
    enum_all_unexp(*state, &small);
}

static void test_enum_pairs_posted_high_bits(void **state)
{
    enum_pairs_posted(*state, &high);
}

static void test_enum_pairs_unexp_high_bits(void **state)
{
    enum_pairs_unexp(*state, &high);
}

static void test_enum_all_posted_high_bits(void **state)
{
    enum_all_posted(*state, &high);
}

static void test_enum_all_unexp_high_bits(void **state)
{
    enum_all_unexp(*state, &high);
}

/* A receive given another source (a process known by a second number)
 * keeps its place in the post order: against receives of its new key
 * posted after it, and against wildcards. */
static void test_recv_set_src_keeps_order(void **state)
{
    match_engine_t *m = *state;
    match_recv_t r[7];

    post(m, &r[0], 7, 1, 0);
    post(m, &r[1], ANY, 1, 0);
    post(m, &r[2], 9, 1, 0);
    post(m, &r[3], 7, 2, ALL);
    post(m, &r[4], 7, 4, 0);
    post(m, &r[5], 7, 4, 0);
    for (int i = 0; i < 6; i++) {
        if (r[i].src == 7)
            assert_int_equal(match_recv_set_src(m, &r[i], 9), TMX_OK);
    }
    arrive_expect(m, 7, 1, &r[1]);
    arrive_expect(m, 7, 4, NULL);
    arrive_expect(m, 9, 1, &r[0]);
    arrive_expect(m, 9, 1, &r[2]);
    arrive_expect(m, 9, 5, &r[3]);
    arrive_expect(m, 9, 4, &r[4]);
    arrive_expect(m, 9, 4, &r[5]);
    assert_empty(m);
    /* a window of one receive, and of one key */
    post(m, &r[6], 7, 3, 0);
    assert_int_equal(match_recv_set_src(m, &r[6], 9), TMX_OK);
    arrive_expect(m, 7, 3, NULL);
    arrive_expect(m, 9, 3, &r[6]);
    for (int i = 0; i < 3; i++)
        post(m, &r[i], 7, 3, 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(match_recv_set_src(m, &r[i], 9), TMX_OK);
    post(m, &r[3], 9, 3, 0);
    for (int i = 0; i < 4; i++)
        arrive_expect(m, 9, 3, &r[i]);
    assert_empty(m);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
#define TP(f) cmocka_unit_test_setup_teardown(f, setup_pending, teardown)

int main(int argc, char **argv)
{
    /* Every test on the pending-list engine but those that look into the
     * bins themselves (mask counts, idle bins). */
    const struct CMUnitTest pending[] = {
        TP(test_posted_exact),
        TP(test_posted_any_src),
        TP(test_posted_any_tag),
        TP(test_posted_any_any),
        TP(test_posted_partial),
        TP(test_posted_partial_any_src),
        TP(test_empty_finds_nothing),
        TP(test_posted_other_source_not_found),
        TP(test_posted_high_bit_differs),
        TP(test_posted_mask_counts_per_source_kind),
        TP(test_posted_fifo_same_bin),
        TP(test_posted_older_wildcard_beats_newer_exact),
        TP(test_posted_skips_older_nonmatching),
        TP(test_posted_order_every_permutation_of_kinds),
        TP(test_cancel_head_passes_to_next),
        TP(test_cancel_middle_keeps_order),
        TP(test_posted_refilled_bin_is_younger),
        TP(test_growth_posted_exact),
        TP(test_growth_posted_mixed_cancel),
        TP(test_fini_with_entries_stored),
        TP(test_enum_pairs_posted_small),
        TP(test_enum_all_posted_small),
        TP(test_enum_pairs_posted_high_bits),
        TP(test_enum_all_posted_high_bits),
        TP(test_pending_then_indexed),
        TP(test_indexed_older_beats_pending),
        TP(test_pending_cancel),
        TP(test_pending_one_key_window),
        TP(test_pending_one_key_window_nomem),
        TP(test_any_source_posted),
        TP(test_recv_set_src_keeps_order),
    };
    const struct CMUnitTest tests[] = {
        T(test_posted_exact),
        T(test_posted_any_src),
        T(test_posted_any_tag),
        T(test_posted_any_any),
        T(test_posted_partial),
        T(test_posted_partial_any_src),
        T(test_unexp_exact),
        T(test_unexp_any_src),
        T(test_unexp_any_tag),
        T(test_unexp_any_any),
        T(test_unexp_partial),
        T(test_unexp_partial_any_src),
        T(test_empty_finds_nothing),
        T(test_posted_other_source_not_found),
        T(test_posted_high_bit_differs),
        T(test_unexp_other_source_not_found),
        T(test_unexp_high_bit_differs),
        T(test_posted_mask_counts_per_source_kind),
        T(test_posted_fifo_same_bin),
        T(test_posted_older_wildcard_beats_newer_exact),
        T(test_posted_skips_older_nonmatching),
        T(test_posted_order_every_permutation_of_kinds),
        T(test_unexp_fifo_same_key),
        T(test_unexp_any_src_earliest),
        T(test_unexp_any_tag_source_order),
        T(test_unexp_any_any_arrival_order),
        T(test_unexp_partial_skips_nonmatching),
        T(test_unexp_per_source_order_interleaved),
        T(test_unexp_exact_after_wildcard_claim),
        T(test_cancel_head_passes_to_next),
        T(test_cancel_middle_keeps_order),
        T(test_cancel_last_of_mask_forgets_mask),
        T(test_claim_removes_from_every_bin),
        T(test_any_source_posted),
        T(test_probe_leaves_message),
        T(test_probe_then_claim_exposes_next),
        T(test_posted_bin_reused),
        T(test_idle_bins_bounded),
        T(test_idle_bins_kept_beside_posted),
        T(test_posted_refilled_bin_is_younger),
        T(test_unexp_bin_reused),
        T(test_unexp_refilled_bin_is_younger),
        T(test_growth_posted_exact),
        T(test_growth_posted_mixed_cancel),
        T(test_growth_unexp_distinct_tags),
        T(test_growth_unexp_one_key),
        T(test_fini_with_entries_stored),
        T(test_enum_pairs_posted_small),
        T(test_enum_pairs_unexp_small),
        T(test_enum_all_posted_small),
        T(test_enum_all_unexp_small),
        T(test_enum_pairs_posted_high_bits),
        T(test_enum_pairs_unexp_high_bits),
        T(test_enum_all_posted_high_bits),
        T(test_enum_all_unexp_high_bits),
        T(test_recv_set_src_keeps_order),
    };

    const unit_group_t groups[] = {
        {"match, every receive in a bin", tests, sizeof(tests) / sizeof(tests[0]), NULL, NULL},
        {"match, pending list first", pending, sizeof(pending) / sizeof(pending[0]), NULL, NULL},
    };

    return unit_main(argc, argv, groups, 2);
}
