/* A context's membership in a launched job: started by tmxrun (its
 * key-value service, boot.h) or by a launcher that speaks PMIx (Open MPI's
 * mpirun, Slurm's srun --mpi=pmix; pmix.c, where tmx was built with
 * libpmix). */
#ifndef TMX_BOOT_JOB_H
#define TMX_BOOT_JOB_H

#include <stdint.h>

#include "tmx.h"

struct boot_kvs;

enum boot_job_kind {
    BOOT_JOB_NONE = 0,      /* not in a job */
    BOOT_JOB_KVS,           /* tmxrun's key-value service */
    BOOT_JOB_PMIX           /* a PMIx server of the launcher */
};

typedef struct boot_job {
    int kind;               /* enum boot_job_kind */
    struct boot_kvs *kvs;   /* BOOT_JOB_KVS: the connection */
    uint32_t rank;
    uint32_t size;
    uint64_t jobid;
} boot_job_t;

/* Joins the job described by the environment: tmxrun's (TMX_KVS and the
 * other TMX_ variables) or, failing those, a PMIx launcher's (PMIX_RANK
 * and PMIX_NAMESPACE). TMX_ERR_NOT_FOUND (silent) when the process was
 * started by neither; on other errors the job state is left empty. Adds
 * every rank as a peer, in rank order. */
tmx_status_t boot_job_join(tmx_context_h ctx, boot_job_t *job);

/* Whether the context is in a job. */
static inline int boot_job_in(const boot_job_t *job)
{
    return job->kind != BOOT_JOB_NONE;
}

/* Blocks until every rank has called it, calling idle(arg) about every
 * millisecond meanwhile. TMX_ERR_PEER_FAILED if a rank failed. */
tmx_status_t boot_job_barrier(boot_job_t *job, void (*idle)(void *arg), void *arg);

void boot_job_leave(boot_job_t *job);

/* The key that udp datagrams of this process's job carry, known before
 * joining: TMX_JOBID under tmxrun; under a PMIx launcher (and if join is
 * set: a context that will join) a hash of PMIX_NAMESPACE; else 0. */
uint64_t boot_job_key(int join);

/* The ordinal of this join among the process's joins (0, 1, ...): each
 * joining context publishes its address under keys of its own, so that a
 * later context cannot replace an address another rank has yet to read. */
unsigned boot_job_next_gen(void);

/* PMIx (pmix.c): the same for a PMIx job. boot_pmix_env says whether the
 * environment names one; without libpmix, joining one is refused with
 * TMX_ERR_UNSUPPORTED (logged once). */
int boot_pmix_env(void);
tmx_status_t boot_pmix_join(tmx_context_h ctx, boot_job_t *job);
tmx_status_t boot_pmix_barrier(boot_job_t *job, void (*idle)(void *arg), void *arg);
void boot_pmix_leave(boot_job_t *job);

#endif
