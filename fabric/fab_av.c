/*
 * Address vectors. Entry i holds a peer's fi name; every endpoint bound to
 * the AV adds the entries to its tmx context in the same order, so entry i
 * is tmx peer i there and fi_addr_t values are tmx peer numbers, for
 * FI_AV_MAP and FI_AV_TABLE alike. tmx cannot forget a peer: fi_av_remove
 * only marks the entry unusable. A name inserted again gets its entry's
 * fi_addr back, as libfabric's own AVs do: a second tmx peer for one
 * process would report that process's messages under the first number
 * only, so a receive directed at the second would never match (Open MPI
 * inserts the remote group of an intercommunicator again).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fab.h"

/* ------------------------------------------------------------ fi names */

/* Folds runs of zero bytes (the tmx blob is mostly padding) so that a
 * blob with several transports fits in FI_NAME_MAX bytes. */
int fab_name_encode(const void *blob, size_t len, unsigned char *name)
{
    const unsigned char *b = blob;
    size_t o = 1;

    memset(name, 0, FAB_ADDR_LEN);
    for (size_t i = 0; i < len;) {
        size_t run = 0;
        while (i + run < len && b[i + run] == 0 && run < 255)
            run++;
        if (o + (run > 0 ? 2 : 1) > FAB_ADDR_LEN)
            return -FI_EOVERFLOW;
        if (run > 0) {
            name[o++] = 0;
            name[o++] = (unsigned char)run;
            i += run;
        } else {
            name[o++] = b[i++];
        }
    }
    name[0] = (unsigned char)(o - 1);
    return 0;
}

int fab_name_decode(const unsigned char *name, void *blob, size_t *len)
{
    unsigned char *b = blob;
    size_t n = name[0], o = 0;

    if (n == 0 || n > FAB_ADDR_LEN - 1)
        return -FI_EINVAL;
    for (size_t i = 1; i <= n;) {
        size_t run = name[i] == 0 ? (i + 1 <= n ? name[i + 1] : 0) : 1;
        if (run == 0 || o + run > TMX_ADDRESS_MAX)
            return -FI_EINVAL;
        if (name[i] == 0) {
            memset(b + o, 0, run);
            i += 2;
        } else {
            b[o] = name[i++];
        }
        o += run;
    }
    *len = o;
    return 0;
}

/* ------------------------------------------------------------- entries */

static int ep_add_peer(fab_ep_t *ep, const unsigned char *name, size_t index)
{
    unsigned char blob[TMX_ADDRESS_MAX];
    size_t len;
    tmx_peer_t peer;
    tmx_status_t st;

    if (fab_name_decode(name, blob, &len) != 0) {
        FAB_WARN(FI_LOG_AV, "AV entry %zu is not a tmx address\n", index);
        return -FI_EINVAL;
    }
    st = tmx_peer_add(ep->tmx, blob, len, &peer);
    if (st != TMX_OK) {
        FAB_WARN(FI_LOG_AV, "tmx_peer_add for AV entry %zu: %s\n", index, tmx_strerror(st));
        return -fab_errno(st);
    }
    if (peer != index) {
        FAB_WARN(FI_LOG_AV, "AV entry %zu became tmx peer %u\n", index, peer);
        return -FI_EOTHER;
    }
    return 0;
}

static int av_reserve(fab_av_t *av, size_t more)
{
    size_t cap = av->cap ? av->cap : 64;
    fab_av_entry_t *e;

    while (cap < av->n + more)
        cap *= 2;
    if (cap == av->cap)
        return 0;
    if ((e = realloc(av->ent, cap * sizeof(*e))) == NULL)
        return -FI_ENOMEM;
    av->ent = e;
    av->cap = cap;
    return 0;
}

/* Checks a name before it takes a slot: a well-formed tmx address. A
 * slot is the tmx peer number of every bound endpoint, so a name that
 * took one and then failed would shift the numbers of all later ones. */
static int name_ok(const unsigned char *name)
{
    unsigned char blob[TMX_ADDRESS_MAX];
    size_t len;

    return fab_name_decode(name, blob, &len) == 0 && tmx_address_check(blob, len) == TMX_OK;
}

/* The entry holding name, or av->n; in an FI_AV_MAP, a removed one too
 * (an FI_AV_TABLE gives each insertion the next index, fi_av(3)). Linear:
 * the AV is filled once per job and names differ early (their first bytes
 * hold the host's address). */
static size_t av_find(const fab_av_t *av, const unsigned char *name)
{
    size_t i;

    for (i = 0; i < av->n; i++) {
        if ((av->ent[i].valid || av->type == FI_AV_MAP) &&
            memcmp(av->ent[i].name, name, (size_t)name[0] + 1) == 0)
            break;
    }
    return i;
}

/* Fills e from one inserted address of the AV's format; *used gets its
 * size. An IPv4 name only takes e->sa here: 1 says it is still to be
 * resolved to its endpoint's tmx name (fab_ns_resolve). */
static int entry_from_sa(fab_av_entry_t *e, const struct sockaddr_in *sa)
{
    if (sa->sin_family != AF_INET || sa->sin_port == 0) {
        FAB_WARN(FI_LOG_AV, "fi_av_insert: not an IPv4 address with a port\n");
        return -FI_EINVAL;
    }
    e->sa = *sa;
    return 1;
}

static int entry_from_str(fab_av_entry_t *e, const char *s)
{
    struct sockaddr_in sa;
    size_t n = strnlen(s, 2 * FAB_ADDR_LEN + 8);

    if (strncmp(s, "tmx://", 6) == 0 && n % 2 == 0 && (n - 6) / 2 <= FAB_ADDR_LEN) {
        memset(e->name, 0, FAB_ADDR_LEN);
        for (size_t i = 0; i < (n - 6) / 2; i++) {
            unsigned v;
            if (sscanf(s + 6 + 2 * i, "%2x", &v) != 1)
                return -FI_EINVAL;
            e->name[i] = (unsigned char)v;
        }
        return 0;
    }
    if (fab_str_to_sa(s, &sa) != 0) {
        FAB_WARN(FI_LOG_AV, "fi_av_insert: \"%.64s\" is neither tmx:// nor fi_sockaddr_in://\n", s);
        return -FI_EINVAL;
    }
    return entry_from_sa(e, &sa);
}

static int entry_parse(const fab_av_t *av, const unsigned char *p, fab_av_entry_t *e, size_t *used)
{
    memset(e, 0, sizeof(*e));
    switch (av->addr_format) {
    case FI_SOCKADDR_IN: {
        struct sockaddr_in sa;
        memcpy(&sa, p, sizeof(sa));
        *used = sizeof(sa);
        return entry_from_sa(e, &sa);
    }
    case FI_ADDR_STR:
        *used = strlen((const char *)p) + 1;
        return entry_from_str(e, (const char *)p);
    default:
        *used = FAB_ADDR_LEN;
        memcpy(e->name, p, FAB_ADDR_LEN);
        return 0;
    }
}

/* Adds the parsed entry e, or finds it already there. */
static int av_insert_one(fab_av_t *av, const fab_av_entry_t *e, fi_addr_t *out)
{
    size_t i;

    if (!name_ok(e->name)) {
        FAB_WARN(FI_LOG_AV, "fi_av_insert: address %zu is not a tmx address\n", av->n);
        return -FI_EINVAL;
    }
    /* An address inserted again, in an FI_AV_MAP even after
     * fi_av_remove, gets its slot back: tmx reports a process's messages
     * under the first number it was added with, and a second slot would
     * never see them (an FI_AV_TABLE's new index does not, docs). */
    if ((i = av_find(av, e->name)) < av->n) {
        av->ent[i].valid++;
        *out = i;
        return 0;
    }
    i = av->n;
    av->ent[i] = *e;
    av->ent[i].valid = 1;
    av->n++;
    for (int k = 0; k < av->n_eps; k++) {
        if (ep_add_peer(av->eps[k], av->ent[i].name, i) != 0) {
            av->ent[i].valid = 0;
            if (k == 0)
                av->n--; /* no endpoint took it: the slot is free again */
            else
                av->ent[i].name[0] = 0; /* half added: never found again */
            return -FI_EINVAL;
        }
    }
    *out = i;
    return 0;
}

/* The announcements of the AV's named endpoints, copied under the lock
 * so that a resolution, which may wait seconds, runs without it (the
 * domain's other threads go on meanwhile). NULL with *n 0 for an AV of
 * tmx names, or without memory (the queries are then anonymous). */
static fab_ns_self_t *av_selves(const fab_av_t *av, int *n)
{
    fab_ns_self_t *selves;

    *n = 0;
    if (av->addr_format == FI_FORMAT_UNSPEC || av->n_eps == 0 ||
        (selves = malloc((size_t)av->n_eps * sizeof(*selves))) == NULL)
        return NULL;
    for (int k = 0; k < av->n_eps; k++)
        *n += fab_ns_self_of(av->eps[k], &selves[*n]);
    return selves;
}

/* Parses count addresses into e[] (ret[i] 1 for an IPv4 name still to
 * resolve), then resolves all IPv4 names together: inserting many names
 * of endpoints that are gone waits once, not once per name. Called
 * without the lock. */
static void av_parse_all(const fab_av_t *av, const unsigned char *p, size_t count,
                         fab_av_entry_t *e, int *ret, const fab_ns_self_t *selves, int n_selves)
{
    fab_ns_name_t *names = NULL;
    size_t nn = 0, k = 0;

    for (size_t i = 0; i < count; i++) {
        size_t used = 0;
        ret[i] = entry_parse(av, p, &e[i], &used);
        p += used;
        nn += ret[i] == 1;
    }
    if (nn == 0)
        return;
    if ((names = calloc(nn, sizeof(*names))) == NULL) {
        for (size_t i = 0; i < count; i++)
            ret[i] = ret[i] == 1 ? -FI_ENOMEM : ret[i];
        return;
    }
    for (size_t i = 0; i < count; i++) {
        if (ret[i] == 1)
            names[k++].to = e[i].sa;
    }
    fab_ns_resolve(names, nn, selves, n_selves);
    k = 0;
    for (size_t i = 0; i < count; i++) {
        if (ret[i] != 1)
            continue;
        ret[i] = names[k].ret;
        if (ret[i] == 0)
            ret[i] = fab_name_encode(names[k].blob, names[k].len, e[i].name);
        k++;
    }
    free(names);
}

static int av_insert(struct fid_av *fid, const void *addr, size_t count, fi_addr_t *fi_addr,
                     uint64_t flags, void *context)
{
    fab_av_t *av = (fab_av_t *)fid;
    fab_av_entry_t *e = NULL;
    fab_ns_self_t *selves;
    int *rets = NULL;
    int done = 0, n_selves, ret;

    if (flags & ~(uint64_t)(FI_MORE | FI_SYNC_ERR)) {
        FAB_WARN(FI_LOG_AV, "fi_av_insert: unsupported flags 0x%llx\n", (unsigned long long)flags);
        return -FI_EBADFLAGS;
    }
    if (count > 0 && addr == NULL)
        return -FI_EINVAL;
    if (count > 0 && ((e = calloc(count, sizeof(*e))) == NULL ||
                      (rets = calloc(count, sizeof(*rets))) == NULL)) {
        free(e);
        return -FI_ENOMEM;
    }
    fab_lock(av->dom);
    selves = av_selves(av, &n_selves);
    fab_unlock(av->dom);
    av_parse_all(av, addr, count, e, rets, selves, n_selves);
    free(selves);
    fab_lock(av->dom);
    if ((ret = av_reserve(av, count)) != 0)
        goto out_unlock;
    for (size_t i = 0; i < count; i++) {
        fi_addr_t a = FI_ADDR_NOTAVAIL;
        if (rets[i] == 0)
            rets[i] = av_insert_one(av, &e[i], &a);
        done += rets[i] == 0;
        if (fi_addr)
            fi_addr[i] = a;
        if ((flags & FI_SYNC_ERR) && context)
            ((int *)context)[i] = -rets[i];
    }
    ret = done;
out_unlock:
    fab_unlock(av->dom);
    free(e);
    free(rets);
    return ret;
}

/* node and service as fi_getinfo takes them (or an FI_ADDR_STR node with
 * no service), into an AV of IPv4 names: the address they resolve to,
 * inserted as fi_av_insert inserts it. An AV of tmx names has nothing
 * they could name. */
static int av_insertsvc(struct fid_av *fid, const char *node, const char *service,
                        fi_addr_t *fi_addr, uint64_t flags, void *context)
{
    fab_av_t *av = (fab_av_t *)fid;
    struct sockaddr_in sa;
    char str[64];
    int ret;

    if (av->addr_format == FI_FORMAT_UNSPEC) {
        FAB_WARN(FI_LOG_AV, "fi_av_insertsvc: an AV of tmx names takes no node and service\n");
        return -FI_ENOSYS;
    }
    if (flags & ~(uint64_t)(FI_MORE | FI_SYNC_ERR)) {
        FAB_WARN(FI_LOG_AV, "fi_av_insertsvc: unsupported flags 0x%llx\n", (unsigned long long)flags);
        return -FI_EBADFLAGS;
    }
    if (node == NULL && service == NULL) {
        FAB_WARN(FI_LOG_AV, "fi_av_insertsvc: no node and no service\n");
        return -FI_EINVAL;
    }
    if ((ret = fab_resolve_node(node, service, 0, &sa)) != 0) {
        FAB_WARN(FI_LOG_AV, "fi_av_insertsvc: %s:%s is no IPv4 address\n", node ? node : "",
                 service ? service : "");
        if (fi_addr)
            *fi_addr = FI_ADDR_NOTAVAIL;
        if ((flags & FI_SYNC_ERR) && context)
            *(int *)context = -ret;
        return 0;
    }
    if (av->addr_format == FI_ADDR_STR) {
        fab_sa_to_str(&sa, str, sizeof(str));
        return av_insert(fid, str, 1, fi_addr, flags, context);
    }
    return av_insert(fid, &sa, 1, fi_addr, flags, context);
}

static int av_insertsym(struct fid_av *av, const char *node, size_t nodecnt, const char *service,
                        size_t svccnt, fi_addr_t *fi_addr, uint64_t flags, void *context)
{
    return -FI_ENOSYS;
}

static int av_remove(struct fid_av *fid, fi_addr_t *fi_addr, size_t count, uint64_t flags)
{
    fab_av_t *av = (fab_av_t *)fid;
    int ret = 0;

    if (fi_addr == NULL && count > 0) {
        FAB_WARN(FI_LOG_AV, "fi_av_remove: NULL addresses\n");
        return -FI_EINVAL;
    }
    if (flags != 0) { /* reserved, fi_av(3): must be 0 */
        FAB_WARN(FI_LOG_AV, "fi_av_remove: flags 0x%llx (none is defined)\n", (unsigned long long)flags);
        return -FI_EINVAL;
    }
    fab_lock(av->dom);
    for (size_t i = 0; i < count; i++) {
        if (!fab_av_valid(av, fi_addr[i])) {
            FAB_WARN(FI_LOG_AV, "fi_av_remove: no entry %llu\n", (unsigned long long)fi_addr[i]);
            ret = -FI_EINVAL;
            continue;
        }
        av->ent[fi_addr[i]].valid--;
    }
    fab_unlock(av->dom);
    return ret;
}

static void av_name_str(const unsigned char *name, char *buf, size_t *len);

/* An entry in the AV's format: the IPv4 name it was inserted with, or
 * the tmx name; cut to *addrlen, which gets the full size (0 either way:
 * a buffer too short is no error for fi_av_lookup). */
static int entry_lookup(const fab_av_t *av, const fab_av_entry_t *e, void *addr, size_t *addrlen)
{
    char str[2 * FAB_ADDR_LEN + 16];
    const void *src = e->name;
    size_t need = FAB_ADDR_LEN, room = addr != NULL ? *addrlen : 0;

    if (av->addr_format == FI_SOCKADDR_IN) {
        src = &e->sa;
        need = sizeof(e->sa);
    } else if (av->addr_format == FI_ADDR_STR) {
        if (e->sa.sin_family == AF_INET) {
            need = (size_t)fab_sa_to_str(&e->sa, str, sizeof(str)) + 1;
        } else {
            need = sizeof(str);
            av_name_str(e->name, str, &need);
        }
        src = str;
    }
    if (room > 0)
        memcpy(addr, src, room < need ? room : need);
    *addrlen = need;
    return 0; /* cut short, as fi_av(3) says: the caller compares *addrlen */
}

static int av_lookup(struct fid_av *fid, fi_addr_t fi_addr, void *addr, size_t *addrlen)
{
    fab_av_t *av = (fab_av_t *)fid;
    int ret = 0;

    if (addrlen == NULL) {
        FAB_WARN(FI_LOG_AV, "fi_av_lookup: NULL length\n");
        return -FI_EINVAL;
    }
    fab_lock(av->dom);
    if (!fab_av_valid(av, fi_addr)) {
        ret = -FI_ENOENT;
    } else {
        ret = entry_lookup(av, &av->ent[fi_addr], addr, addrlen);
    }
    fab_unlock(av->dom);
    return ret;
}

/* "tmx://" and the encoded name in hex, cut to the buffer; *len gets the
 * size the whole string needs. */
static void av_name_str(const unsigned char *name, char *buf, size_t *len)
{
    char tmp[8 + 2 * FAB_ADDR_LEN + 1];
    size_t n = name[0] < FAB_ADDR_LEN ? name[0] + 1u : FAB_ADDR_LEN;
    int o = snprintf(tmp, sizeof(tmp), "tmx://");

    for (size_t i = 0; i < n; i++)
        o += snprintf(tmp + o, sizeof(tmp) - (size_t)o, "%02x", name[i]);
    if (*len > 0)
        snprintf(buf, *len, "%s", tmp);
    *len = (size_t)o + 1;
}

/* An address of the AV's format as a string. */
static const char *av_straddr(struct fid_av *fid, const void *addr, char *buf, size_t *len)
{
    fab_av_t *av = (fab_av_t *)fid;
    char tmp[64];
    size_t need;

    if (addr == NULL || len == NULL || (buf == NULL && *len > 0)) {
        FAB_WARN(FI_LOG_AV, "fi_av_straddr: NULL %s\n", addr == NULL ? "address" : len == NULL ? "length" : "buffer");
        return NULL;
    }
    if (av->addr_format == FI_ADDR_STR) {
        need = strlen(addr) + 1;
        if (*len > 0)
            snprintf(buf, *len, "%s", (const char *)addr);
        *len = need;
        return buf;
    }
    if (av->addr_format == FI_SOCKADDR_IN) {
        struct sockaddr_in sa;
        memcpy(&sa, addr, sizeof(sa));
        need = (size_t)fab_sa_to_str(&sa, tmp, sizeof(tmp)) + 1;
        if (*len > 0)
            snprintf(buf, *len, "%s", tmp);
        *len = need;
        return buf;
    }
    av_name_str(addr, buf, len);
    return buf;
}

static int no_av_set(struct fid_av *av, struct fi_av_set_attr *attr, struct fid_av_set **set,
                     void *context)
{
    return -FI_ENOSYS;
}

static struct fi_ops_av av_ops = {
    .size = sizeof(struct fi_ops_av),
    .insert = av_insert,
    .insertsvc = av_insertsvc,
    .insertsym = av_insertsym,
    .remove = av_remove,
    .lookup = av_lookup,
    .straddr = av_straddr,
    .av_set = no_av_set,
};

/* ------------------------------------------------------- endpoints bound */

/* Gives a newly bound endpoint every entry so far, so that its peer
 * numbers line up with the AV's. */
int fab_av_attach(fab_av_t *av, fab_ep_t *ep)
{
    int ret = 0;

    fab_lock(av->dom);
    if ((ret = fab_eps_reserve(&av->eps, av->n_eps, &av->cap_eps)) != 0)
        goto out_unlock;
    for (size_t i = 0; i < av->n && ret == 0; i++)
        ret = ep_add_peer(ep, av->ent[i].name, i);
    if (ret == 0) {
        av->eps[av->n_eps++] = ep;
        atomic_fetch_add(&av->refs, 1);
    }
out_unlock:
    fab_unlock(av->dom);
    return ret;
}

void fab_av_detach(fab_av_t *av, fab_ep_t *ep)
{
    fab_lock(av->dom);
    for (int k = 0; k < av->n_eps; k++) {
        if (av->eps[k] == ep) {
            av->eps[k] = av->eps[--av->n_eps];
            atomic_fetch_sub(&av->refs, 1);
            break;
        }
    }
    fab_unlock(av->dom);
}

static int av_close(struct fid *fid)
{
    fab_av_t *av = (fab_av_t *)fid;

    if (atomic_load(&av->refs) != 0) {
        FAB_WARN(FI_LOG_AV, "AV closed while %d endpoints use it\n", atomic_load(&av->refs));
        return -FI_EBUSY;
    }
    atomic_fetch_sub(&av->dom->refs, 1);
    free(av->eps);
    free(av->ent);
    free(av);
    return 0;
}

static struct fi_ops av_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = av_close,
    .bind = fab_no_bind,
    .control = fab_no_control,
    .ops_open = fab_no_ops_open,
    .tostr = fab_no_tostr,
    .ops_set = fab_no_ops_set,
};

int fab_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **out,
                void *context)
{
    fab_domain_t *dom = (fab_domain_t *)domain;
    fab_av_t *av;

    if (attr == NULL)
        return -FI_EINVAL;
    if (attr->type != FI_AV_UNSPEC && attr->type != FI_AV_MAP && attr->type != FI_AV_TABLE) {
        FAB_WARN(FI_LOG_AV, "unknown AV type %d\n", attr->type);
        return -FI_EINVAL;
    }
    if (attr->flags & (FI_EVENT | FI_SYMMETRIC) || attr->name != NULL || attr->rx_ctx_bits) {
        FAB_WARN(FI_LOG_AV, "AV events, symmetric, named or scalable AVs are not offered\n");
        return -FI_ENOSYS;
    }
    if ((av = calloc(1, sizeof(*av))) == NULL)
        return -FI_ENOMEM;
    av->type = attr->type == FI_AV_UNSPEC ? FI_AV_MAP : attr->type;
    av->addr_format = dom->info->addr_format;
    attr->type = av->type;
    av->dom = dom;
    av->fid.fid.fclass = FI_CLASS_AV;
    av->fid.fid.context = context;
    av->fid.fid.ops = &av_fi_ops;
    av->fid.ops = &av_ops;
    atomic_fetch_add(&dom->refs, 1);
    *out = &av->fid;
    return 0;
}
