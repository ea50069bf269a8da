/*
 * Shared helpers of the fi_edge programs: self-checking edge-case tests of
 * the tmx libfabric provider. Each program prints one line per check
 * ("ok" / "FAIL") and exits 1 if any check failed.
 * Build: cc -O0 -g -o X X.c -lfabric -lpthread
 * Run:   FI_PROVIDER_PATH=<build>/fabric FI_PROVIDER=tmx ./X
 */
#ifndef FE_COMMON_H
#define FE_COMMON_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

static int fe_fails;

#define CHECK(cond, ...)                                                               \
    do {                                                                               \
        if (cond) {                                                                    \
            printf("ok   %s:%d ", __FILE__, __LINE__);                                 \
        } else {                                                                       \
            printf("FAIL %s:%d ", __FILE__, __LINE__);                                 \
            fe_fails++;                                                                \
        }                                                                              \
        printf(__VA_ARGS__);                                                           \
        printf("\n");                                                                  \
        fflush(stdout);                                                                \
    } while (0)

#define CHECK_RET(expr, want)                                                          \
    do {                                                                               \
        long _r = (long)(expr);                                                        \
        CHECK(_r == (long)(want), "%s = %ld (%s), want %ld", #expr, _r,                \
              _r < 0 ? fi_strerror((int)-_r) : "", (long)(want));                      \
    } while (0)

#define MUST(expr)                                                                     \
    do {                                                                               \
        long _r = (long)(expr);                                                        \
        if (_r != 0) {                                                                 \
            printf("FATAL %s:%d %s = %ld (%s)\n", __FILE__, __LINE__, #expr, _r,       \
                   fi_strerror((int)-_r));                                             \
            exit(2);                                                                   \
        }                                                                              \
    } while (0)

static inline int64_t fe_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct fe {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
} fe_t;

typedef struct fe_ep {
    struct fid_ep *ep;
    struct fid_cq *cq;
    fi_addr_t addr;             /* its address in the shared AV */
} fe_ep_t;

static inline struct fi_info *fe_hints(uint64_t caps, enum fi_threading th)
{
    struct fi_info *h = fi_allocinfo();
    h->fabric_attr->prov_name = strdup("tmx");
    h->ep_attr->type = FI_EP_RDM;
    h->caps = caps;
    h->domain_attr->threading = th;
    return h;
}

static inline void fe_open(fe_t *f, struct fi_info *hints, enum fi_av_type avt)
{
    struct fi_av_attr aa = {.type = avt};
    MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &f->info));
    fi_freeinfo(hints);
    MUST(fi_fabric(f->info->fabric_attr, &f->fabric, NULL));
    MUST(fi_domain(f->fabric, f->info, &f->domain, NULL));
    MUST(fi_av_open(f->domain, &aa, &f->av, NULL));
}

static inline void fe_close(fe_t *f)
{
    MUST(fi_close(&f->av->fid));
    MUST(fi_close(&f->domain->fid));
    MUST(fi_close(&f->fabric->fid));
    fi_freeinfo(f->info);
}

static inline void fe_ep_open(fe_t *f, fe_ep_t *e, enum fi_cq_format fmt, uint64_t bind_flags)
{
    struct fi_cq_attr ca = {.format = fmt, .wait_obj = FI_WAIT_UNSPEC};
    MUST(fi_endpoint(f->domain, f->info, &e->ep, NULL));
    MUST(fi_cq_open(f->domain, &ca, &e->cq, NULL));
    MUST(fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV | bind_flags));
    MUST(fi_ep_bind(e->ep, &f->av->fid, 0));
    MUST(fi_enable(e->ep));
}

static inline void fe_ep_insert(fe_t *f, fe_ep_t *e)
{
    char name[FI_NAME_MAX];
    size_t len = sizeof(name);
    MUST(fi_getname(&e->ep->fid, name, &len));
    if (fi_av_insert(f->av, name, 1, &e->addr, 0, NULL) != 1) {
        printf("FATAL fi_av_insert of an endpoint's name\n");
        exit(2);
    }
}

static inline void fe_ep_close(fe_ep_t *e)
{
    MUST(fi_close(&e->ep->fid));
    MUST(fi_close(&e->cq->fid));
}

/* Reads one entry of a tagged-format CQ, up to ms; returns fi_cq_readfrom's
 * last result (1, -FI_EAVAIL or -FI_EAGAIN). */
static inline ssize_t fe_cq_wait(struct fid_cq *cq, struct fi_cq_tagged_entry *e, fi_addr_t *src,
                                 int ms)
{
    int64_t end = fe_now_ms() + ms;
    ssize_t r;
    do {
        r = fi_cq_readfrom(cq, e, 1, src);
        if (r != -FI_EAGAIN)
            return r;
    } while (fe_now_ms() < end);
    return r;
}

/* Waits for an error entry: returns fi_cq_readerr's result. */
static inline ssize_t fe_cq_wait_err(struct fid_cq *cq, struct fi_cq_err_entry *err, int ms)
{
    struct fi_cq_tagged_entry e;
    ssize_t r = fe_cq_wait(cq, &e, NULL, ms);
    if (r != -FI_EAVAIL)
        return r == 1 ? -9999 : r;
    memset(err, 0, sizeof(*err));
    return fi_cq_readerr(cq, err, 0);
}

/* Drives both CQs until nothing arrives for ms. Returns entries seen. */
static inline int fe_drain(struct fid_cq *a, struct fid_cq *b, int ms)
{
    struct fi_cq_tagged_entry e[16];
    struct fi_cq_err_entry err;
    int n = 0;
    int64_t end = fe_now_ms() + ms;
    while (fe_now_ms() < end) {
        struct fid_cq *cqs[2] = {a, b};
        for (int i = 0; i < 2; i++) {
            if (cqs[i] == NULL)
                continue;
            ssize_t r = fi_cq_read(cqs[i], e, 16);
            if (r > 0) {
                n += (int)r;
                end = fe_now_ms() + ms;
            } else if (r == -FI_EAVAIL) {
                memset(&err, 0, sizeof(err));
                if (fi_cq_readerr(cqs[i], &err, 0) == 1)
                    n++;
            }
        }
    }
    return n;
}

/* Runs each case in a child process (a crash or hang fails only that case),
 * or only the case named on the command line, in this process (for
 * valgrind or a debugger). */
#include <signal.h>
#include <sys/wait.h>

typedef struct fe_case {
    const char *name;
    void (*fn)(void);
} fe_case_t;

static inline int fe_run(const fe_case_t *cases, int n, int argc, char **argv, int timeout_s)
{
    int bad = 0;

    if (argc > 1) {
        for (int i = 0; i < n; i++) {
            if (strcmp(cases[i].name, argv[1]) == 0) {
                cases[i].fn();
                printf("%s: %s: %d failure(s)\n", fe_fails ? "FAILED" : "PASSED", argv[1], fe_fails);
                return fe_fails ? 1 : 0;
            }
        }
        fprintf(stderr, "no case %s\n", argv[1]);
        return 2;
    }
    for (int i = 0; i < n; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            alarm((unsigned)timeout_s);
            printf("== %s\n", cases[i].name);
            cases[i].fn();
            fflush(stdout);
            _exit(fe_fails ? 1 : 0);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        if (WIFSIGNALED(st)) {
            printf("CASE %s: killed by signal %d%s\n", cases[i].name, WTERMSIG(st),
                   WTERMSIG(st) == SIGALRM ? " (timeout: hang)" : "");
            bad++;
        } else if (WEXITSTATUS(st) != 0) {
            printf("CASE %s: exit %d\n", cases[i].name, WEXITSTATUS(st));
            bad++;
        } else {
            printf("CASE %s: pass\n", cases[i].name);
        }
    }
    printf("%s: %d of %d case(s) failed\n", bad ? "FAILED" : "PASSED", bad, n);
    return bad ? 1 : 0;
}

static inline int fe_done(void)
{
    printf("%s: %d failure(s)\n", fe_fails ? "FAILED" : "PASSED", fe_fails);
    return fe_fails ? 1 : 0;
}

#endif
