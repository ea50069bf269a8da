/*
 * perf_match (built with the tests, not installed): what one match costs
 * as the queues grow.
 *
 * Each measurement holds one queue (posted receives or unexpected messages)
 * at depth D: D-1 filler entries that the probe does not match, then per
 * iteration one matching entry added at the tail and at once found and
 * removed. The target is the newest entry, the worst case for a list
 * scanned from the oldest. The same workload runs through a plain linear
 * list with the same predicate (match_matches), as the baseline.
 *
 * An any-any receive matches every stored message, so on the unexpected
 * side there are no fillers it skips: it takes the oldest message and the
 * queue turns over. A list finds the oldest at its head, so the baseline
 * is O(1) there and is not expected to grow. Fillers have distinct sources
 * and tags, so there every match in tmx works on bins of its own: the cost
 * of keeping all keys indexed, with no sharing to hide it.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "match/match.h"

#define PERF_MAX_DEPTHS 32
#define PERF_MAX_DEPTH ((size_t)1 << 22)
#define PERF_MAX_ITERS ((size_t)1000000000)
#define PERF_MAX_REPS ((size_t)1000)
#define PERF_DEFAULT_ITERS ((size_t)200000)
#define PERF_DEFAULT_REPS ((size_t)5)

/* Past this depth the baseline runs fewer iterations, in proportion, so
 * each of its runs scans about as many entries as at this depth. */
#define PERF_BASE_FULL_DEPTH ((size_t)16)
#define PERF_BASE_MIN_ITERS ((size_t)20)

/* The probe message. Filler k (1 <= k < D) has tag k and, unless it is an
 * any-source receive, source k: it never shares the probe's source or tag,
 * and fillers share no bins with each other. */
#define PROBE_SRC ((uint32_t)0)
#define PROBE_TAG ((uint64_t)0)

#define PERF_WARMUP_ITERS 64

static const size_t default_depths[] = {1, 16, 256, 4096, 65536};

typedef enum perf_side { PERF_POSTED, PERF_UNEXP, PERF_N_SIDES } perf_side_t;

static const char *const side_names[PERF_N_SIDES] = {"posted", "unexpected"};

/* The probe receive of a pattern, and the receives that fill its posted
 * queue. Fillers use the probe's wildcards, except for any-any, which
 * would match the probe message; its queue is filled with exact receives. */
typedef struct perf_pattern {
    const char *name;
    uint32_t src;
    uint64_t ignore;
    int fill_any_source;
    uint64_t fill_ignore;
} perf_pattern_t;

static const perf_pattern_t patterns[] = {
    {"exact", PROBE_SRC, TMX_TAG_EXACT, 0, TMX_TAG_EXACT},
    {"any_source", TMX_ANY_SOURCE, TMX_TAG_EXACT, 1, TMX_TAG_EXACT},
    {"any_tag", PROBE_SRC, TMX_TAG_ANY, 0, TMX_TAG_ANY},
    {"any_any", TMX_ANY_SOURCE, TMX_TAG_ANY, 0, TMX_TAG_EXACT},
};

#define PERF_N_PATTERNS (sizeof(patterns) / sizeof(patterns[0]))

typedef struct perf_opts {
    size_t depths[PERF_MAX_DEPTHS];
    size_t n_depths;
    size_t iters;
    size_t reps;
    int csv;
} perf_opts_t;

typedef struct perf_case {
    const perf_pattern_t *pat;
    perf_side_t side;
    size_t depth;
    int turnover; /* the match takes the oldest entry, not the newest */
} perf_case_t;

typedef struct perf_result {
    double tmx_ns;
    double base_ns;
} perf_result_t;

/* The baseline's entry: a receive or a message, kept in one list per side
 * in post or arrival order. */
typedef struct lin_entry {
    util_dlist_t link;
    uint64_t tag;
    uint64_t ignore;
    uint32_t src;
} lin_entry_t;

/* Slot 0 of each array is the probe; on turnover the probe is whichever
 * slot the last match emptied, kept per queue. */
typedef struct perf_fixture {
    const perf_case_t *c;
    size_t tmx_free;
    size_t lin_free;
    match_engine_t engine;
    match_recv_t *recvs;
    match_msg_t *msgs;
    util_dlist_t list;
    lin_entry_t *entries;
} perf_fixture_t;

/* ------------------------------------------------------------ timing */

static double now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* An any-any receive on the unexpected side matches every filler. */
static int is_turnover(const perf_pattern_t *pat, int side)
{
    return side == PERF_UNEXP && pat->src == TMX_ANY_SOURCE && pat->ignore == TMX_TAG_ANY;
}

static size_t slot_after(size_t slot, size_t depth)
{
    return slot + 1 < depth ? slot + 1 : 0;
}

/* The slot the match must return: the probe just added, or on turnover
 * the oldest entry, which sits in the slot after the free one. */
static size_t slot_taken(const perf_case_t *c, size_t free_slot)
{
    return c->turnover ? slot_after(free_slot, c->depth) : free_slot;
}

/* ---------------------------------------------------- filler entries */

static void fill_key_recv(const perf_pattern_t *pat, size_t k, uint32_t *src, uint64_t *tag,
                          uint64_t *ignore)
{
    *src = k == 0 ? pat->src : pat->fill_any_source ? TMX_ANY_SOURCE : (uint32_t)k;
    *tag = k == 0 ? PROBE_TAG : (uint64_t)k;
    *ignore = k == 0 ? pat->ignore : pat->fill_ignore;
}

static void fill_key_msg(size_t k, uint32_t *src, uint64_t *tag)
{
    *src = k == 0 ? PROBE_SRC : (uint32_t)k;
    *tag = k == 0 ? PROBE_TAG : (uint64_t)k;
}

static void fill_keys(perf_fixture_t *fx)
{
    for (size_t k = 0; k < fx->c->depth; k++) {
        lin_entry_t *e = &fx->entries[k];
        if (fx->c->side == PERF_POSTED) {
            fill_key_recv(fx->c->pat, k, &e->src, &e->tag, &e->ignore);
            fx->recvs[k].src = e->src;
            fx->recvs[k].tag = e->tag;
            fx->recvs[k].ignore = e->ignore;
        } else {
            fill_key_msg(k, &e->src, &e->tag);
            e->ignore = 0;
            fx->msgs[k].src = e->src;
            fx->msgs[k].tag = e->tag;
        }
    }
}

static tmx_status_t fill_queues(perf_fixture_t *fx)
{
    for (size_t k = 1; k < fx->c->depth; k++) {
        tmx_status_t st = fx->c->side == PERF_POSTED ? match_post(&fx->engine, &fx->recvs[k])
                                                      : match_add_msg(&fx->engine, &fx->msgs[k]);
        if (st != TMX_OK)
            return st;
        util_dlist_push_tail(&fx->list, &fx->entries[k].link);
    }
    return TMX_OK;
}

static void fixture_fini(perf_fixture_t *fx)
{
    match_fini(&fx->engine);
    free(fx->recvs);
    free(fx->msgs);
    free(fx->entries);
}

static tmx_status_t fixture_init(perf_fixture_t *fx, const perf_case_t *c)
{
    memset(fx, 0, sizeof(*fx));
    fx->c = c;
    util_dlist_init(&fx->list);
    if (match_init(&fx->engine) != TMX_OK)
        return TMX_ERR_NOMEM;
    fx->recvs = calloc(c->depth, sizeof(*fx->recvs));
    fx->msgs = calloc(c->depth, sizeof(*fx->msgs));
    fx->entries = calloc(c->depth, sizeof(*fx->entries));
    if (fx->recvs == NULL || fx->msgs == NULL || fx->entries == NULL) {
        fixture_fini(fx);
        return TMX_ERR_NOMEM;
    }
    fill_keys(fx);
    return TMX_OK;
}

/* --------------------------------------------------------- timed runs */

/* Each run returns ns per match, or -1 when a match fails or returns the
 * wrong entry, which would make the timing meaningless. */

static double tmx_posted_run(perf_fixture_t *fx, size_t iters)
{
    match_recv_t *probe = &fx->recvs[0];
    double t0 = now_ns();

    for (size_t i = 0; i < iters; i++) {
        if (match_post(&fx->engine, probe) != TMX_OK)
            return -1;
        if (match_find_recv(&fx->engine, PROBE_SRC, PROBE_TAG) != probe)
            return -1;
        match_remove_recv(&fx->engine, probe);
    }
    return (now_ns() - t0) / (double)iters;
}

static double tmx_unexp_run(perf_fixture_t *fx, size_t iters)
{
    const perf_pattern_t *pat = fx->c->pat;
    double t0 = now_ns();

    for (size_t i = 0; i < iters; i++) {
        match_msg_t *want = &fx->msgs[slot_taken(fx->c, fx->tmx_free)];
        if (match_add_msg(&fx->engine, &fx->msgs[fx->tmx_free]) != TMX_OK)
            return -1;
        if (match_find_msg(&fx->engine, pat->src, PROBE_TAG, pat->ignore) != want)
            return -1;
        match_remove_msg(&fx->engine, want);
        fx->tmx_free = (size_t)(want - fx->msgs);
    }
    return (now_ns() - t0) / (double)iters;
}

static lin_entry_t *lin_find_recv(const util_dlist_t *list, uint32_t src, uint64_t tag)
{
    util_dlist_t *pos;

    util_dlist_foreach(pos, list) {
        lin_entry_t *r = util_container_of(pos, lin_entry_t, link);
        if (match_matches(r->src, r->tag, r->ignore, src, tag))
            return r;
    }
    return NULL;
}

static lin_entry_t *lin_find_msg(const util_dlist_t *list, uint32_t src, uint64_t tag,
                                 uint64_t ignore)
{
    util_dlist_t *pos;

    util_dlist_foreach(pos, list) {
        lin_entry_t *msg = util_container_of(pos, lin_entry_t, link);
        if (match_matches(src, tag, ignore, msg->src, msg->tag))
            return msg;
    }
    return NULL;
}

static double lin_posted_run(perf_fixture_t *fx, size_t iters)
{
    lin_entry_t *probe = &fx->entries[0];
    double t0 = now_ns();

    for (size_t i = 0; i < iters; i++) {
        util_dlist_push_tail(&fx->list, &probe->link);
        if (lin_find_recv(&fx->list, PROBE_SRC, PROBE_TAG) != probe)
            return -1;
        util_dlist_unlink(&probe->link);
    }
    return (now_ns() - t0) / (double)iters;
}

static double lin_unexp_run(perf_fixture_t *fx, size_t iters)
{
    const perf_pattern_t *pat = fx->c->pat;
    double t0 = now_ns();

    for (size_t i = 0; i < iters; i++) {
        lin_entry_t *want = &fx->entries[slot_taken(fx->c, fx->lin_free)];
        util_dlist_push_tail(&fx->list, &fx->entries[fx->lin_free].link);
        if (lin_find_msg(&fx->list, pat->src, PROBE_TAG, pat->ignore) != want)
            return -1;
        util_dlist_unlink(&want->link);
        fx->lin_free = (size_t)(want - fx->entries);
    }
    return (now_ns() - t0) / (double)iters;
}

typedef double (*perf_run_fn)(perf_fixture_t *fx, size_t iters);

static const perf_run_fn tmx_runs[PERF_N_SIDES] = {tmx_posted_run, tmx_unexp_run};
static const perf_run_fn lin_runs[PERF_N_SIDES] = {lin_posted_run, lin_unexp_run};

/* -------------------------------------------------------- measurement */

/* On turnover the baseline takes its list head without scanning, so it
 * keeps every iteration. */
static size_t base_iters(const perf_case_t *c, size_t iters)
{
    size_t n = c->turnover || c->depth <= PERF_BASE_FULL_DEPTH
                   ? iters
                   : iters / (c->depth / PERF_BASE_FULL_DEPTH);

    return n < PERF_BASE_MIN_ITERS ? PERF_BASE_MIN_ITERS : n;
}

/* The minimum: noise (interrupts, frequency changes, other processes)
 * only ever adds time. */
static double keep_min(double best, double ns)
{
    return best < 0 || ns < best ? ns : best;
}

static int fixture_ready(perf_fixture_t *fx, const perf_case_t *c)
{
    if (fixture_init(fx, c) != TMX_OK)
        goto err_report;
    if (fill_queues(fx) != TMX_OK)
        goto err_fini;
    return 0;

err_fini:
    fixture_fini(fx);
err_report:
    fprintf(stderr, "perf_match: out of memory at depth %zu\n", c->depth);
    return -1;
}

/* One timed run of each engine on a freshly filled queue, folded into the
 * minimum kept in res. */
static int measure_once(const perf_case_t *c, const perf_opts_t *o, perf_result_t *res)
{
    perf_fixture_t fx;
    double tmx_ns;
    double base_ns;

    if (fixture_ready(&fx, c) != 0)
        return -1;
    /* An untimed warm-up: caches, and the engine's one-time lazy indexing
     * of the prefilled unexpected queue, are not the steady state. */
    tmx_ns = tmx_runs[c->side](&fx, PERF_WARMUP_ITERS);
    if (tmx_ns >= 0)
        tmx_ns = tmx_runs[c->side](&fx, o->iters);
    base_ns = lin_runs[c->side](&fx, base_iters(c, o->iters));
    fixture_fini(&fx);
    if (tmx_ns < 0 || base_ns < 0) {
        fprintf(stderr, "perf_match: %s %s depth %zu: %s matched the wrong entry or failed\n",
                c->pat->name, side_names[c->side], c->depth, tmx_ns < 0 ? "tmx" : "baseline");
        return -1;
    }
    res->tmx_ns = keep_min(res->tmx_ns, tmx_ns);
    res->base_ns = keep_min(res->base_ns, base_ns);
    return 0;
}

/* Cases in the order print_growth() reads the results. */
static void build_cases(const perf_opts_t *o, perf_case_t *cases, perf_result_t *results)
{
    size_t i = 0;

    for (size_t p = 0; p < PERF_N_PATTERNS; p++) {
        for (int s = 0; s < PERF_N_SIDES; s++) {
            for (size_t d = 0; d < o->n_depths; d++, i++) {
                const perf_pattern_t *pat = &patterns[p];
                perf_case_t c = {pat, (perf_side_t)s, o->depths[d], is_turnover(pat, s)};
                cases[i] = c;
                results[i].tmx_ns = -1;
                results[i].base_ns = -1;
            }
        }
    }
}

/* Sweeps over every case once per repetition, so that a burst of noise
 * from elsewhere on the machine spoils one run of a few cases rather than
 * every run of one case. */
static int measure_all(const perf_opts_t *o, const perf_case_t *cases, perf_result_t *results,
                       size_t n)
{
    int tty = isatty(STDERR_FILENO);

    for (size_t r = 0; r < o->reps; r++) {
        for (size_t i = 0; i < n; i++) {
            if (measure_once(&cases[i], o, &results[i]) != 0)
                return -1;
        }
        if (tty)
            fprintf(stderr, "perf_match: sweep %zu of %zu done\n", r + 1, o->reps);
    }
    return 0;
}

/* ------------------------------------------------------------- output */

static void print_header(const perf_opts_t *o)
{
    if (o->csv) {
        printf("pattern,side,depth,ns_per_match,baseline_ns_per_match\n");
        return;
    }
    printf("perf_match: best of %zu runs of %zu matches"
           " (baseline: fewer where it scans past depth %zu)\n\n",
           o->reps, o->iters, PERF_BASE_FULL_DEPTH);
    printf("%-10s  %-10s  %7s  %12s  %17s  %12s\n", "pattern", "side", "depth", "tmx ns/match",
           "baseline ns/match", "baseline/tmx");
}

static void print_row(const perf_case_t *c, const perf_result_t *r, int csv)
{
    const char *name = c->pat->name;
    const char *side = side_names[c->side];

    if (csv) {
        printf("%s,%s,%zu,%.2f,%.2f\n", name, side, c->depth, r->tmx_ns, r->base_ns);
        return;
    }
    printf("%-10s  %-10s  %7zu  %12.1f  %17.1f  %12.2f%s\n", name, side, c->depth, r->tmx_ns,
           r->base_ns, r->base_ns / r->tmx_ns, c->turnover ? " *" : "");
}

static size_t depth_index(const perf_opts_t *o, int largest)
{
    size_t best = 0;

    for (size_t i = 1; i < o->n_depths; i++) {
        if (largest ? o->depths[i] > o->depths[best] : o->depths[i] < o->depths[best])
            best = i;
    }
    return best;
}

/* results[(pattern * PERF_N_SIDES + side) * n_depths + depth index] */
static void print_growth(const perf_opts_t *o, const perf_result_t *results)
{
    size_t lo = depth_index(o, 0);
    size_t hi = depth_index(o, 1);

    printf("\ngrowth: ns/match at depth %zu divided by ns/match at depth %zu\n", o->depths[hi],
           o->depths[lo]);
    printf("%-10s  %-10s  %9s  %9s\n", "pattern", "side", "tmx", "baseline");
    for (size_t p = 0; p < PERF_N_PATTERNS; p++) {
        for (int s = 0; s < PERF_N_SIDES; s++) {
            const perf_result_t *r = &results[(p * PERF_N_SIDES + (size_t)s) * o->n_depths];
            printf("%-10s  %-10s  %8.2fx  %8.1fx%s\n", patterns[p].name, side_names[s],
                   r[hi].tmx_ns / r[lo].tmx_ns, r[hi].base_ns / r[lo].base_ns,
                   is_turnover(&patterns[p], s) ? " *" : "");
        }
    }
}

static void print_footnote(void)
{
    printf("\n* any_any on the unexpected side: every stored message matches an any-any\n"
           "  receive, so it takes the oldest message and the queue turns over. A linear\n"
           "  list finds the oldest at its head, so the baseline is O(1) here by nature\n"
           "  and its growth is not expected. Each message has its own source and tag,\n"
           "  so in tmx each match works on bins that no other stored message shares.\n");
}

/* ------------------------------------------------------------ running */

static void print_results(const perf_opts_t *o, const perf_case_t *cases,
                          const perf_result_t *results, size_t n)
{
    print_header(o);
    for (size_t i = 0; i < n; i++)
        print_row(&cases[i], &results[i], o->csv);
    if (!o->csv) {
        print_growth(o, results);
        print_footnote();
    }
}

static int run_all(const perf_opts_t *o)
{
    size_t n = PERF_N_PATTERNS * PERF_N_SIDES * o->n_depths;
    perf_case_t *cases = calloc(n, sizeof(*cases));
    perf_result_t *results = calloc(n, sizeof(*results));
    int st = 1;

    if (cases == NULL || results == NULL) {
        fprintf(stderr, "perf_match: out of memory\n");
        goto out_free;
    }
    build_cases(o, cases, results);
    if (measure_all(o, cases, results, n) != 0)
        goto out_free;
    print_results(o, cases, results, n);
    st = 0;

out_free:
    free(cases);
    free(results);
    return st;
}

/* ------------------------------------------------------------ options */

static int usage(FILE *f, int status)
{
    fprintf(f,
            "usage: perf_match [-d LIST] [-n ITER] [-r REPS] [--csv]\n"
            "\n"
            "Nanoseconds per match (add an entry, find it, remove it) in the tmx\n"
            "matching engine and in a linear list, for the patterns exact,\n"
            "any_source, any_tag and any_any, on the posted and the unexpected\n"
            "side, with the queue held at each depth.\n"
            "\n"
            "  -d LIST    queue depths, comma-separated (default 1,16,256,4096,65536)\n"
            "  -n ITER    matches per timed run (default %zu); the baseline runs\n"
            "             fewer where it scans past depth %zu\n"
            "  -r REPS    runs per measurement, one in each sweep over all of\n"
            "             them; the best is reported (default %zu)\n"
            "  --csv      print only pattern,side,depth,ns_per_match,\n"
            "             baseline_ns_per_match\n"
            "  -h, --help this text\n",
            PERF_DEFAULT_ITERS, PERF_BASE_FULL_DEPTH, PERF_DEFAULT_REPS);
    return status;
}

/* Digits only: strtoull alone would accept signs and leading spaces. */
static int parse_size(const char *s, size_t min, size_t max, size_t *out, char **end)
{
    unsigned long long v;

    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    v = strtoull(s, end, 10);
    if (errno != 0 || v < min || v > max)
        return -1;
    *out = (size_t)v;
    return 0;
}

static int parse_number(const char *s, size_t max, size_t *out)
{
    char *end;

    return parse_size(s, 1, max, out, &end) == 0 && *end == '\0' ? 0 : -1;
}

static int parse_depths(const char *s, perf_opts_t *o)
{
    char *end;

    for (o->n_depths = 0; o->n_depths < PERF_MAX_DEPTHS; s = end + 1) {
        if (parse_size(s, 1, PERF_MAX_DEPTH, &o->depths[o->n_depths], &end) != 0)
            return -1;
        o->n_depths++;
        if (*end == '\0')
            return 0;
        if (*end != ',')
            return -1;
    }
    return -1;
}

static int bad_option(const char *what, const char *arg)
{
    fprintf(stderr, "perf_match: %s '%s'\n", what, arg);
    fprintf(stderr, "run 'perf_match --help' for the options\n");
    return 2;
}

static int bad_value(int opt, const char *arg)
{
    if (opt == 'd')
        fprintf(stderr, "perf_match: -d '%s': want up to %d comma-separated depths, "
                "each 1..%zu\n", arg, PERF_MAX_DEPTHS, PERF_MAX_DEPTH);
    else
        fprintf(stderr, "perf_match: -%c '%s': want a whole number 1..%zu\n", opt, arg,
                opt == 'n' ? PERF_MAX_ITERS : PERF_MAX_REPS);
    return 2;
}

static int apply_option(int opt, const char *arg, perf_opts_t *o)
{
    switch (opt) {
    case 'd':
        return parse_depths(arg, o) == 0 ? 0 : bad_value(opt, arg);
    case 'n':
        return parse_number(arg, PERF_MAX_ITERS, &o->iters) == 0 ? 0 : bad_value(opt, arg);
    case 'r':
        return parse_number(arg, PERF_MAX_REPS, &o->reps) == 0 ? 0 : bad_value(opt, arg);
    case 'c':
        o->csv = 1;
        return 0;
    default:
        return 2;
    }
}

static void default_opts(perf_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->n_depths = sizeof(default_depths) / sizeof(default_depths[0]);
    memcpy(o->depths, default_depths, sizeof(default_depths));
    o->iters = PERF_DEFAULT_ITERS;
    o->reps = PERF_DEFAULT_REPS;
}

static const struct option longopts[] = {
    {"csv", no_argument, NULL, 'c'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* Returns 0 to run, 1 after --help, 2 on bad usage (message printed). */
static int parse_opts(int argc, char **argv, perf_opts_t *o)
{
    int opt;

    default_opts(o);
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":d:n:r:h", longopts, NULL)) != -1) {
        if (opt == 'h')
            return 1;
        if (opt == ':')
            return bad_option("option needs a value:", argv[optind - 1]);
        if (opt == '?' && optopt != 0)
            return bad_option("unknown option", (char[]){'-', (char)optopt, '\0'});
        if (opt == '?')
            return bad_option("unknown option", argv[optind - 1]);
        if (apply_option(opt, optarg, o) != 0)
            return 2;
    }
    if (optind < argc)
        return bad_option("unexpected argument", argv[optind]);
    return 0;
}

int main(int argc, char **argv)
{
    perf_opts_t o;
    int st = parse_opts(argc, argv, &o);

    if (st == 1)
        return usage(stdout, 0);
    if (st != 0)
        return st;
    return run_all(&o);
}
