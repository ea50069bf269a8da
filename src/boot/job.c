/*
 * Joining a job: a context created inside a process started by tmxrun
 * publishes its address through the launcher's key-value service, waits
 * for every rank at a fence, and adds the ranks in order, so that peer i
 * is rank i. Endpoints are still created on first use only. A process
 * started by a PMIx launcher does the same through PMIx (pmix.c).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boot/boot.h"
#include "boot/job.h"
#include "core/config.h"
#include "util/log.h"

/* Joins of this process so far: each context that joins publishes under
 * keys of its own, so that a later context's PUT cannot replace the
 * address a slower rank has yet to GET for an earlier one. Every rank
 * creates its contexts in the same order, so the n-th join of each rank
 * names the same set of keys. */
static _Atomic unsigned join_gen;

unsigned boot_job_next_gen(void)
{
    return join_gen++;
}

static tmx_status_t publish(tmx_context_h ctx, boot_kvs_t *kvs, unsigned gen, uint32_t rank)
{
    unsigned char addr[TMX_ADDRESS_MAX];
    char hex[2 * TMX_ADDRESS_MAX + 1], key[32];
    size_t len = sizeof(addr);
    tmx_status_t st = tmx_address(ctx, addr, &len);

    if (st != TMX_OK || (st = boot_hex_encode(addr, len, hex, sizeof(hex))) != TMX_OK)
        return st;
    snprintf(key, sizeof(key), "tmx.addr.%u.%u", gen, rank);
    return boot_kvs_put(kvs, key, hex);
}

static tmx_status_t add_rank(tmx_context_h ctx, boot_kvs_t *kvs, unsigned gen, uint32_t rank)
{
    unsigned char addr[TMX_ADDRESS_MAX];
    char hex[2 * TMX_ADDRESS_MAX + 1], key[32];
    size_t len;
    tmx_peer_t peer;
    tmx_status_t st;

    snprintf(key, sizeof(key), "tmx.addr.%u.%u", gen, rank);
    if ((st = boot_kvs_get(kvs, key, hex, sizeof(hex))) != TMX_OK)
        return st;
    if ((st = boot_hex_decode(hex, addr, sizeof(addr), &len)) != TMX_OK)
        return st;
    if ((st = tmx_peer_add(ctx, addr, len, &peer)) != TMX_OK)
        return st;
    if (peer != rank) {
        util_error("boot: rank %u became peer %u; peers must be added by the launcher only", rank, peer);
        return TMX_ERR_INVALID;
    }
    return TMX_OK;
}

tmx_status_t boot_job_join(tmx_context_h ctx, boot_job_t *job)
{
    boot_env_t env;
    unsigned gen;
    tmx_status_t st = boot_env(&env);

    /* tmxrun clears the PMIx variables of its ranks: with both set, a PMIx
     * launcher was started by a rank (mpirun inside tmxrun), and its job
     * is the nearer one. */
    if ((st == TMX_ERR_NOT_FOUND || st == TMX_OK) && boot_pmix_env())
        return boot_pmix_join(ctx, job);
    if (st != TMX_OK)
        return st;
    if ((st = boot_kvs_connect(env.kvs_addr, &job->kvs)) != TMX_OK)
        return st;
    job->kind = BOOT_JOB_KVS;
    job->rank = env.rank;
    job->size = env.size;
    job->jobid = env.jobid;
    gen = boot_job_next_gen();
    if ((st = publish(ctx, job->kvs, gen, env.rank)) != TMX_OK || (st = boot_kvs_fence(job->kvs)) != TMX_OK)
        goto err_close;
    for (uint32_t i = 0; i < env.size && st == TMX_OK; i++)
        st = add_rank(ctx, job->kvs, gen, i);
    if (st != TMX_OK)
        goto err_close;
    util_debug("boot: rank %u of %u joined job %016llx", env.rank, env.size, (unsigned long long)env.jobid);
    return TMX_OK;

err_close:
    util_error("boot: rank %u could not join the job: %s", env.rank, tmx_strerror(st));
    boot_kvs_close(job->kvs);
    job->kvs = NULL;
    job->kind = BOOT_JOB_NONE;
    return st;
}

tmx_status_t boot_job_barrier(boot_job_t *job, void (*idle)(void *arg), void *arg)
{
    tmx_status_t st;

    if (job->kind == BOOT_JOB_PMIX)
        return boot_pmix_barrier(job, idle, arg);
    boot_kvs_set_idle(job->kvs, idle, arg);
    st = boot_kvs_fence(job->kvs);
    boot_kvs_set_idle(job->kvs, NULL, NULL);
    return st;
}

void boot_job_leave(boot_job_t *job)
{
    if (job->kind == BOOT_JOB_PMIX)
        boot_pmix_leave(job);
    boot_kvs_close(job->kvs);
    job->kvs = NULL;
    job->kind = BOOT_JOB_NONE;
}

/* FNV-1a, 64 bits. */
static uint64_t hash64(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

uint64_t boot_job_key(int join)
{
    boot_env_t env;
    const char *ns;

    if (join && boot_pmix_env() && (ns = config_launcher("PMIX_NAMESPACE")) != NULL)
        return hash64(ns) | 1; /* the nearer launcher, as boot_job_join decides */
    if (boot_env(&env) == TMX_OK)
        return env.jobid;
    return 0;
}
