/* A context's membership in a launched job. */
#ifndef TMX_BOOT_JOB_H
#define TMX_BOOT_JOB_H

#include <stdint.h>

#include "tmx.h"

struct boot_kvs;

typedef struct boot_job {
    struct boot_kvs *kvs;   /* NULL when not in a job */
    uint32_t rank;
    uint32_t size;
    uint64_t jobid;
} boot_job_t;

/* Joins the job described by the environment: TMX_ERR_NOT_FOUND (silent)
 * when the process was not launched by tmxrun; on other errors the job
 * state is left empty. Adds every rank as a peer, in rank order. */
tmx_status_t boot_job_join(tmx_context_h ctx, boot_job_t *job);

void boot_job_leave(boot_job_t *job);

#endif
