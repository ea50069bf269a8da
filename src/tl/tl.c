#include "tl/tl.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/hash.h"
#include "util/log.h"

static const tl_ops_t *const tl_all[] = {&tl_self_ops, &tl_shm_ops, &tl_udp_ops};

const char *const tl_names[] = {"self", "shm", "udp", NULL};

const tl_ops_t *tl_find(const char *name)
{
    for (size_t i = 0; i < sizeof(tl_all) / sizeof(tl_all[0]); i++) {
        if (strcmp(tl_all[i]->name, name) == 0)
            return tl_all[i];
    }
    return NULL;
}

int tl_sweep(uint64_t job_key)
{
    int n = 0;

    for (size_t i = 0; i < sizeof(tl_all) / sizeof(tl_all[0]); i++) {
        if (tl_all[i]->sweep != NULL)
            n += tl_all[i]->sweep(job_key);
    }
    return n;
}

tl_iface_t *tl_ifaces[TL_IFACE_MAX];
static pthread_mutex_t tl_ifaces_lock = PTHREAD_MUTEX_INITIALIZER;

tmx_status_t tl_iface_register(tl_iface_t *iface)
{
    tmx_status_t st = TMX_ERR_NO_SPACE;

    pthread_mutex_lock(&tl_ifaces_lock);
    for (uint32_t i = 0; i < TL_IFACE_MAX; i++) {
        if (tl_ifaces[i] == NULL) {
            iface->num = (uint16_t)i;
            tl_ifaces[i] = iface;
            st = TMX_OK;
            break;
        }
    }
    pthread_mutex_unlock(&tl_ifaces_lock);
    if (st != TMX_OK)
        util_error("%s: %d transports are open in this process, the most", iface->ops->name, TL_IFACE_MAX);
    return st;
}

void tl_iface_unregister(tl_iface_t *iface)
{
    pthread_mutex_lock(&tl_ifaces_lock);
    if (tl_ifaces[iface->num] == iface)
        tl_ifaces[iface->num] = NULL;
    pthread_mutex_unlock(&tl_ifaces_lock);
}

tmx_status_t tl_get_kind_check(const tl_iface_t *iface, unsigned kind)
{
    if (kind != 0 && (kind & (kind - 1)) == 0 && (kind & iface->get_kinds) == kind)
        return TMX_OK;
    util_error("%s: read mechanism 0x%x not offered (offered: 0x%x)", iface->ops->name, kind,
               iface->get_kinds);
    return TMX_ERR_INVALID;
}

tmx_status_t tl_no_get(tl_ep_t *ep, void *dst, size_t len, uint64_t raddr, uint64_t rkey,
                       unsigned kind, tl_get_op_t *op)
{
    util_error("transport %s cannot read remote memory", tl_ep_iface(ep)->ops->name);
    return TMX_ERR_UNSUPPORTED;
}

tmx_status_t tl_put_kind_check(const tl_iface_t *iface, unsigned kind)
{
    if (kind != 0 && (kind & (kind - 1)) == 0 && (kind & iface->put_kinds) == kind)
        return TMX_OK;
    util_error("%s: write mechanism 0x%x not offered (offered: 0x%x)", iface->ops->name, kind,
               iface->put_kinds);
    return TMX_ERR_INVALID;
}

tmx_status_t tl_no_put(tl_ep_t *ep, const void *src, size_t len, uint64_t raddr, uint64_t rkey,
                       uint64_t lkey, unsigned kind)
{
    util_error("transport %s cannot write remote memory", tl_ep_iface(ep)->ops->name);
    return TMX_ERR_UNSUPPORTED;
}

void tl_no_wait(tl_iface_t *iface, int64_t timeout_us)
{
}

int tl_no_wait_arm(tl_iface_t *iface, struct pollfd *pfd, int64_t *cap_us)
{
    return TL_WAIT_NONE;
}

void tl_no_wait_done(tl_iface_t *iface, const struct pollfd *pfd)
{
}

void tl_no_check_peers(tl_iface_t *iface)
{
}

static void muted_recv(void *arg, uint64_t src_uuid, const void *data, size_t len)
{
}

static void muted_fail(void *arg, uint64_t uuid, int clean)
{
}

/* A context that is closing lends nothing: to a peer reading from it, its
 * sender is going, which is how the read ends there. */
static tmx_status_t muted_mem_check(void *arg, uint64_t addr, uint64_t len, uint64_t rkey)
{
    return TMX_ERR_PEER_FAILED;
}

static tmx_status_t muted_put_data(void *arg, uint64_t src_uuid, uint64_t addr, uint64_t rkey,
                                   const void *data, size_t len)
{
    return TMX_ERR_NOT_FOUND;
}

static void muted_put_done(void *arg, uint64_t lkey, tmx_status_t status)
{
}

static void *muted_begin(void *arg, uint64_t src_uuid, const void *first, size_t first_len, size_t total)
{
    return NULL;
}

static void muted_more(void *arg, void *sink, const void *piece, size_t len)
{
}

static void muted_end(void *arg, void *sink, int how)
{
}

/* A packet under way when the iface is muted ends in these too: its sink
 * is the layer above's to free (it frees what it holds at teardown). */
static const tl_stream_cb_t muted_stream = {muted_begin, muted_more, muted_end};

void tl_iface_mute(tl_iface_t *iface)
{
    iface->recv_cb = muted_recv;
    iface->stream = &muted_stream;
    iface->fail_cb = muted_fail;
    iface->mem_check = muted_mem_check;
    iface->put_data = muted_put_data;
    iface->put_done = muted_put_done;
}

void tl_put_cbs_set(tl_iface_t *iface, const tl_iface_params_t *params)
{
    iface->put_data = params->put_data != NULL ? params->put_data : muted_put_data;
    iface->put_done = params->put_done != NULL ? params->put_done : muted_put_done;
}

tmx_status_t tl_always_reachable(tl_iface_t *iface, const void *addr, size_t len)
{
    return TMX_OK;
}

tmx_status_t tl_address_put(void *buf, size_t *len, const void *addr, size_t n)
{
    if (*len < n)
        return TMX_ERR_NO_SPACE;
    memcpy(buf, addr, n);
    *len = n;
    return TMX_OK;
}

static uint64_t hash_bytes(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = util_hash64(h ^ (unsigned char)s[i]);
    return h;
}

uint64_t tl_host_id(void)
{
    char buf[256] = "";
    uint64_t h = 0x746d78;
    struct stat st;
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

    if (f != NULL) {
        if (fgets(buf, sizeof(buf), f) != NULL)
            h = hash_bytes(h, buf, strlen(buf));
        fclose(f);
    }
    if (gethostname(buf, sizeof(buf)) == 0)
        h = hash_bytes(h, buf, strnlen(buf, sizeof(buf)));
    if (stat("/proc/self/ns/net", &st) == 0)
        h = util_hash64(h ^ (uint64_t)st.st_ino);
    return h;
}
