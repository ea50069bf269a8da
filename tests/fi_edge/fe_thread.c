/*
 * Threads. FI_THREAD_SAFE (advertised): threads posting and reading CQs of
 * one domain at once, and inserting into the AV while another sends.
 * FI_THREAD_FID and FI_THREAD_ENDPOINT: fi_domain(3) lets "one thread
 * initiate a data transfer on an endpoint while another thread reads from
 * a completion queue associated with the endpoint".
 */
#include "fe_common.h"

#include <pthread.h>
#include <stdatomic.h>

#define CAPS (FI_TAGGED | FI_MSG | FI_DIRECTED_RECV | FI_SOURCE)
#define N 20000

static fe_t f;
static fe_ep_t a, b;
static atomic_int stop, tx_done, rx_done, errors;

static void pair_open(enum fi_threading th)
{
    fe_open(&f, fe_hints(CAPS, th), FI_AV_TABLE);
    CHECK(f.info->domain_attr->threading == th, "threading %d (asked %d)", f.info->domain_attr->threading, th);
    fe_ep_open(&f, &a, FI_CQ_FORMAT_TAGGED, 0);
    fe_ep_open(&f, &b, FI_CQ_FORMAT_TAGGED, 0);
    fe_ep_insert(&f, &a);
    fe_ep_insert(&f, &b);
}

/* a sends N tagged messages to b; a's tx CQ is read by another thread */
static void *sender(void *arg)
{
    uint64_t v;
    for (int i = 0; i < N && !stop; i++) {
        v = (uint64_t)i;
        ssize_t r;
        while ((r = fi_tsend(a.ep, &v, sizeof(v), NULL, b.addr, 1, (void *)(intptr_t)(i + 1))) == -FI_EAGAIN)
            ;
        if (r != 0) {
            atomic_fetch_add(&errors, 1);
            break;
        }
    }
    return arg;
}

static void *tx_reader(void *arg)
{
    struct fi_cq_tagged_entry e[16];
    struct fi_cq_err_entry err;
    while (!stop && atomic_load(&tx_done) < N) {
        ssize_t r = fi_cq_read(a.cq, e, 16);
        if (r > 0)
            atomic_fetch_add(&tx_done, (int)r);
        else if (r == -FI_EAVAIL) {
            fi_cq_readerr(a.cq, &err, 0);
            atomic_fetch_add(&errors, 1);
        }
    }
    return arg;
}

/* b: receives in order (tag 1, FI_ORDER_SAS), reads its own CQ */
static void *receiver(void *arg)
{
    static uint64_t buf[64];
    struct fi_cq_tagged_entry e[16];
    struct fi_cq_err_entry err;
    int posted = 0, seen = 0;
    uint64_t expect = 0;
    while (!stop && seen < N) {
        while (posted < N && posted - seen < 64) {
            if (fi_trecv(b.ep, &buf[posted % 64], 8, NULL, FI_ADDR_UNSPEC, 1, 0,
                         &buf[posted % 64]) != 0)
                break;
            posted++;
        }
        ssize_t r = fi_cq_read(b.cq, e, 16);
        for (ssize_t k = 0; k < r; k++) {
            uint64_t got = *(uint64_t *)e[k].op_context;
            if (got != expect)
                atomic_fetch_add(&errors, 1);
            expect++;
            seen++;
        }
        if (r == -FI_EAVAIL) {
            fi_cq_readerr(b.cq, &err, 0);
            atomic_fetch_add(&errors, 1);
            seen++;
        }
    }
    atomic_store(&rx_done, seen);
    return arg;
}

/* Clears the counts and the stop flag for a new run. */
static void counts_reset(void)
{
    atomic_store(&stop, 0);
    atomic_store(&tx_done, 0);
    atomic_store(&rx_done, 0);
    atomic_store(&errors, 0);
}

/* Waits up to secs for every send and receive to complete, then stops
 * the threads. */
static void traffic_wait(int secs)
{
    int64_t end = fe_now_ms() + secs * 1000;

    while (fe_now_ms() < end && (atomic_load(&rx_done) < N || atomic_load(&tx_done) < N))
        usleep(10000);
    atomic_store(&stop, 1);
}

/* Closes both endpoints and the fabric. */
static void pair_end(void)
{
    fe_ep_close(&a);
    fe_ep_close(&b);
    fe_close(&f);
}

static void run_three(enum fi_threading th, int secs)
{
    pthread_t t1, t2, t3;
    counts_reset();
    pair_open(th);
    pthread_create(&t3, NULL, receiver, NULL);
    pthread_create(&t2, NULL, tx_reader, NULL);
    pthread_create(&t1, NULL, sender, NULL);
    traffic_wait(secs);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    pthread_join(t3, NULL);
    CHECK(atomic_load(&tx_done) == N && atomic_load(&rx_done) == N && atomic_load(&errors) == 0,
          "threading %d: %d sends completed, %d received in order, %d errors (of %d)", th,
          atomic_load(&tx_done), atomic_load(&rx_done), atomic_load(&errors), N);
    pair_end();
}

static void safe_three(void)
{
    run_three(FI_THREAD_SAFE, 30);
}

static void fid_three(void)
{
    run_three(FI_THREAD_FID, 30);
}

static void endpoint_three(void)
{
    run_three(FI_THREAD_ENDPOINT, 30);
}

/* FI_THREAD_SAFE: one thread inserts addresses (the AV grows) while
 * another sends. */
static void *inserter(void *arg)
{
    char name[FI_NAME_MAX];
    size_t len = sizeof(name);
    fi_getname(&b.ep->fid, name, &len);
    for (int i = 0; i < 2000 && !stop; i++) {
        fi_addr_t x;
        if (fi_av_insert(f.av, name, 1, &x, 0, NULL) != 1)
            atomic_fetch_add(&errors, 1);
        if (fi_av_remove(f.av, &x, 1, 0) != 0)
            atomic_fetch_add(&errors, 1);
    }
    return arg;
}

static void safe_av(void)
{
    pthread_t t1, t2, t3;
    counts_reset();
    pair_open(FI_THREAD_SAFE);
    pthread_create(&t3, NULL, receiver, NULL);
    pthread_create(&t2, NULL, tx_reader, NULL);
    pthread_create(&t1, NULL, sender, NULL);
    pthread_t ti;
    pthread_create(&ti, NULL, inserter, NULL);
    traffic_wait(30);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    pthread_join(t3, NULL);
    pthread_join(ti, NULL);
    CHECK(atomic_load(&tx_done) == N && atomic_load(&rx_done) == N && atomic_load(&errors) == 0,
          "AV inserts beside traffic: %d sent, %d received, %d errors", atomic_load(&tx_done),
          atomic_load(&rx_done), atomic_load(&errors));
    pair_end();
}

/* FI_THREAD_COMPLETION: the application serialises only the objects that
 * share a completion structure (an endpoint with its CQ); the AV is not
 * one of them (fi_domain(3)). One thread drives a with its CQ, one b with
 * its, and a third inserts into their AV names it has not seen yet, so
 * that the AV and every bound endpoint's peers grow under the traffic
 * (a use of freed memory for ASan and TSan builds while the provider took
 * no lock). Several rounds, each from a small AV. */
#define COMPLETION_NAMES 32

static char completion_names[COMPLETION_NAMES][FI_NAME_MAX];

static void *a_side(void *arg)
{
    struct fi_cq_tagged_entry e[16];
    struct fi_cq_err_entry err;
    uint64_t v = 0;
    int i = 0;
    while (!stop && (i < N || atomic_load(&tx_done) < N)) {
        ssize_t r = i < N ? fi_tsend(a.ep, &v, sizeof(v), NULL, b.addr, 1, NULL) : -FI_EAGAIN;
        if (r == 0)
            v = (uint64_t)++i;
        else if (r != -FI_EAGAIN)
            atomic_fetch_add(&errors, 1), i = N;
        r = fi_cq_read(a.cq, e, 16);
        if (r > 0)
            atomic_fetch_add(&tx_done, (int)r);
        else if (r == -FI_EAVAIL)
            fi_cq_readerr(a.cq, &err, 0), atomic_fetch_add(&errors, 1);
    }
    return arg;
}

static void *new_names_inserter(void *arg)
{
    for (int i = 0; i < 600 && !stop; i++) {
        fi_addr_t x;
        if (fi_av_insert(f.av, completion_names[i % COMPLETION_NAMES], 1, &x, 0, NULL) != 1 ||
            fi_av_remove(f.av, &x, 1, 0) != 0)
            atomic_fetch_add(&errors, 1);
    }
    return arg;
}

static void completion_av(void)
{
    for (int round = 0; round < 4; round++) {
        pthread_t t1, t2, t3;
        counts_reset();
        pair_open(FI_THREAD_COMPLETION);
        for (int k = 0; k < COMPLETION_NAMES; k++) {
            struct fid_ep *ep;
            size_t len = FI_NAME_MAX;
            MUST(fi_endpoint(f.domain, f.info, &ep, NULL));
            MUST(fi_getname(&ep->fid, completion_names[k], &len));
            MUST(fi_close(&ep->fid));
        }
        pthread_create(&t3, NULL, receiver, NULL);
        pthread_create(&t1, NULL, a_side, NULL);
        pthread_create(&t2, NULL, new_names_inserter, NULL);
        traffic_wait(20);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
        pthread_join(t3, NULL);
        CHECK(atomic_load(&tx_done) == N && atomic_load(&rx_done) == N && atomic_load(&errors) == 0,
              "round %d: AV inserts beside two threads' traffic: %d sent, %d received, %d errors",
              round, atomic_load(&tx_done), atomic_load(&rx_done), atomic_load(&errors));
        pair_end();
    }
}

int main(int argc, char **argv)
{
    static const fe_case_t cases[] = {
        {"safe_three", safe_three},
        {"safe_av", safe_av},
        {"fid_three", fid_three},
        {"endpoint_three", endpoint_three},
        {"completion_av", completion_av},
    };
    return fe_run(cases, sizeof(cases) / sizeof(cases[0]), argc, argv, 60);
}
