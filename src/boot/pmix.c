/*
 * Joining a job started by a launcher that speaks PMIx (Open MPI's mpirun,
 * Slurm's srun --mpi=pmix, PRRTE): the same steps as with tmxrun's
 * key-value service (job.c), through Debian's libpmix: PMIx_Init gives the
 * rank and namespace, PMIX_JOB_SIZE the size; each rank puts its address
 * under its own name (PMIx keys are per process), commits, and a fence
 * that collects the data makes every address available to PMIx_Get. The
 * barrier is a fence too.
 *
 * PMIx runs a progress thread of its own in the client; its callbacks only
 * set a flag that the waiting thread polls, calling the context's idle
 * function meanwhile, as with tmxrun's fence.
 *
 * Built only where libpmix was found (TMX_HAVE_PMIX); without it, a
 * process started under PMIx is told so once and does not join.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "boot/boot.h"
#include "boot/job.h"
#include "core/config.h"
#include "util/log.h"

#define PMIX_ADDR_KEY "tmx.addr"

int boot_pmix_env(void)
{
    return config_launcher("PMIX_NAMESPACE") != NULL && config_launcher("PMIX_RANK") != NULL;
}

#ifndef TMX_HAVE_PMIX

tmx_status_t boot_pmix_join(tmx_context_h ctx, boot_job_t *job)
{
    static _Atomic int told;

    (void)ctx;
    (void)job;
    if (!atomic_exchange(&told, 1))
        util_warn("boot: started by a PMIx launcher, but this tmx was built without libpmix: not "
                  "joining the job (rebuild with libpmix-dev installed, or start it with tmxrun)");
    return TMX_ERR_NOT_FOUND;
}

tmx_status_t boot_pmix_barrier(boot_job_t *job, void (*idle)(void *arg), void *arg)
{
    (void)job;
    (void)idle;
    (void)arg;
    return TMX_ERR_UNSUPPORTED;
}

void boot_pmix_leave(boot_job_t *job)
{
    (void)job;
}

#else /* TMX_HAVE_PMIX */

#include <pmix.h>

/* PMIx_Init and PMIx_Finalize are counted by libpmix: each context that
 * joins holds one count, so an MPI library in the same process keeps its
 * own. The process's identity is the same for all. */
static pmix_proc_t pmix_me;

static tmx_status_t pmix_fail(const char *what, pmix_status_t rc)
{
    util_error("boot: %s: %s", what, PMIx_Error_string(rc));
    return rc == PMIX_ERR_LOST_CONNECTION || rc == PMIX_ERR_UNREACH ? TMX_ERR_PEER_FAILED : TMX_ERR_IO;
}

static tmx_status_t put_address(tmx_context_h ctx, const char *key)
{
    unsigned char addr[TMX_ADDRESS_MAX];
    size_t len = sizeof(addr);
    pmix_value_t v;
    pmix_status_t rc;
    tmx_status_t st = tmx_address(ctx, addr, &len);

    if (st != TMX_OK)
        return st;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = (char *)addr;
    v.data.bo.size = len;
    rc = PMIx_Put(PMIX_GLOBAL, key, &v);
    v.data.bo.bytes = NULL; /* ours, on the stack: PMIx_Put copied it */
    v.data.bo.size = 0;
    if (rc != PMIX_SUCCESS)
        return pmix_fail("PMIx_Put of our address", rc);
    if ((rc = PMIx_Commit()) != PMIX_SUCCESS)
        return pmix_fail("PMIx_Commit", rc);
    return TMX_OK;
}

static tmx_status_t add_rank(tmx_context_h ctx, const char *key, uint32_t rank)
{
    pmix_proc_t p;
    pmix_value_t *v = NULL;
    pmix_status_t rc;
    tmx_peer_t peer;
    tmx_status_t st;

    PMIX_LOAD_PROCID(&p, pmix_me.nspace, rank);
    if ((rc = PMIx_Get(&p, key, NULL, 0, &v)) != PMIX_SUCCESS)
        return pmix_fail("PMIx_Get of a rank's address", rc);
    if (v->type != PMIX_BYTE_OBJECT || v->data.bo.size == 0 || v->data.bo.size > TMX_ADDRESS_MAX) {
        util_error("boot: rank %u's address under PMIx is not an address (type %d, %zu bytes)", rank,
                   (int)v->type, v->type == PMIX_BYTE_OBJECT ? v->data.bo.size : 0);
        PMIX_VALUE_RELEASE(v);
        return TMX_ERR_PROTO;
    }
    st = tmx_peer_add(ctx, v->data.bo.bytes, v->data.bo.size, &peer);
    PMIX_VALUE_RELEASE(v);
    if (st == TMX_OK && peer != rank) {
        util_error("boot: rank %u became peer %u; peers must be added by the launcher only", rank, peer);
        st = TMX_ERR_INVALID;
    }
    return st;
}

typedef struct fence_wait {
    _Atomic int done;
    _Atomic int status;
} fence_wait_t;

static void fence_done(pmix_status_t status, void *cbdata)
{
    fence_wait_t *w = cbdata;

    atomic_store(&w->status, status);
    atomic_store_explicit(&w->done, 1, memory_order_release);
}

/* A fence of every rank of our namespace, collecting what they put if
 * collect; idle is called about every millisecond while it waits. */
static tmx_status_t fence(int collect, void (*idle)(void *arg), void *arg)
{
    fence_wait_t w = {0, PMIX_SUCCESS};
    pmix_info_t info;
    bool yes = true;
    pmix_status_t rc;

    PMIX_INFO_CONSTRUCT(&info);
    if (collect)
        PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
    rc = PMIx_Fence_nb(NULL, 0, collect ? &info : NULL, collect ? 1 : 0, fence_done, &w);
    if (rc == PMIX_OPERATION_SUCCEEDED)
        return TMX_OK;
    if (rc != PMIX_SUCCESS)
        return pmix_fail("PMIx_Fence_nb", rc);
    while (!atomic_load_explicit(&w.done, memory_order_acquire)) {
        struct timespec ms = {0, 1000000};
        if (idle != NULL)
            idle(arg);
        nanosleep(&ms, NULL);
    }
    rc = atomic_load(&w.status);
    return rc == PMIX_SUCCESS ? TMX_OK : pmix_fail("PMIx fence", rc);
}

tmx_status_t boot_pmix_join(tmx_context_h ctx, boot_job_t *job)
{
    pmix_proc_t wild;
    pmix_value_t *v = NULL;
    pmix_status_t rc;
    tmx_status_t st;
    char key[32];

    if ((rc = PMIx_Init(&pmix_me, NULL, 0)) != PMIX_SUCCESS)
        return pmix_fail("started by a PMIx launcher, but PMIx_Init failed", rc);
    /* taken once joining can start: a failed start uses up no generation */
    snprintf(key, sizeof(key), "%s.%u", PMIX_ADDR_KEY, boot_job_next_gen());
    PMIX_LOAD_PROCID(&wild, pmix_me.nspace, PMIX_RANK_WILDCARD);
    if ((rc = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &v)) != PMIX_SUCCESS) {
        st = pmix_fail("PMIx_Get of the job's size", rc);
        goto err_fini;
    }
    if (v->type != PMIX_UINT32 || v->data.uint32 == 0 || pmix_me.rank >= v->data.uint32) {
        util_error("boot: PMIx gives rank %u and a job size that does not hold it (type %d)", pmix_me.rank,
                   (int)v->type);
        PMIX_VALUE_RELEASE(v);
        st = TMX_ERR_PROTO;
        goto err_fini;
    }
    job->rank = pmix_me.rank;
    job->size = v->data.uint32;
    job->jobid = boot_job_key(1);
    PMIX_VALUE_RELEASE(v);
    if ((st = put_address(ctx, key)) != TMX_OK || (st = fence(1, NULL, NULL)) != TMX_OK)
        goto err_fini;
    for (uint32_t i = 0; i < job->size && st == TMX_OK; i++)
        st = add_rank(ctx, key, i);
    if (st != TMX_OK)
        goto err_fini;
    job->kind = BOOT_JOB_PMIX;
    util_debug("boot: rank %u of %u joined PMIx namespace %s", job->rank, job->size, pmix_me.nspace);
    return TMX_OK;

err_fini:
    util_error("boot: rank %u could not join the PMIx job: %s", pmix_me.rank, tmx_strerror(st));
    PMIx_Finalize(NULL, 0);
    job->rank = job->size = 0;
    return st;
}

tmx_status_t boot_pmix_barrier(boot_job_t *job, void (*idle)(void *arg), void *arg)
{
    (void)job;
    return fence(0, idle, arg);
}

void boot_pmix_leave(boot_job_t *job)
{
    (void)job;
    PMIx_Finalize(NULL, 0);
}

#endif /* TMX_HAVE_PMIX */
