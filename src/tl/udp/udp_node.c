/*
 * One UDP port per node (DESIGN.md, "Per-node state"; seed 002): the
 * processes of a job on one host bind the same port with SO_REUSEPORT,
 * and a classic BPF program attached to the port's group steers each
 * datagram by the node index in its header (dst_index, seed 002's "SRQ
 * number") to the socket of the process that holds the index.
 *
 * The program returns a slot of the group, and the kernel keeps the
 * group's sockets in an array: a socket that joins takes the next slot,
 * and one that closes has the last socket moved into its slot. So the
 * node keeps a table, a small file in /dev/shm named after the network
 * namespace, address and port, locked with flock: for each index, the
 * slot of its socket and its process. Every change happens under the lock
 * and ends with the program rebuilt from the table and attached again:
 *
 *   - join: a socket binds and takes slot n, the table's count; the
 *     process takes the lowest free index;
 *   - a clean close: the program is first rebuilt as if the socket were
 *     gone (the last socket's index mapped to the closing one's slot),
 *     then the socket closes;
 *   - a death: the kernel closes the socket of a process that died at
 *     any time, without the lock. A member that finds a process of the
 *     table dead (a check every second while it waits, or at once when a
 *     datagram for another index reaches it) removes it: one death moves
 *     the last socket into its slot, which the table follows; after
 *     several, which survivor went where is not known, and each survivor
 *     whose slot may have changed is marked unsure and finds its slot
 *     itself.
 *
 * A process finds its slot by probing: it sends its own port a probe for
 * each slot below the count, which the program steers to that slot
 * whatever the table says, and sees which one comes back (udp_wire.h,
 * udp_probe_t). It does so when it joins and whenever it is marked unsure.
 * Until then, and in every other moment the program is stale, a datagram
 * may reach the wrong process: every receiver checks the index in the
 * header and drops what is not its own, so a wrong steering costs a
 * retransmission, never a misdelivery. A datagram for an index no process
 * holds (its process died) is answered with a NOBODY notice, the
 * equivalent of the ICMP refusal a port of its own would have brought.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tl/udp/udp.h"
#include "util/crc32c.h"
#include "util/log.h"

#define NODE_MAGIC 0x746d786eu   /* "tmxn" */
#define NODE_VERSION 2
#define NODE_PORT_BASE 20000     /* below the kernel's ephemeral ports */
#define NODE_PORT_SPAN 12000
#define NODE_CHECK_US 1000000    /* liveness of the node's processes, while waiting */
#define NODE_RECHECK_US 10000    /* at most this often on a misrouted datagram */
#define NODE_PROBE_WAIT_US 50000 /* for our own probe to come back */
#define NODE_PROBE_TRIES 8       /* probes lost on the way (a lossy firewall
                                    drops them too) are sent again */
#define NODE_SLOT_NONE (-1)
#define NODE_SLOT_UNSURE (-2)    /* alive, slot unknown: it probes */

/* The node's table (one per namespace, address and port), shared by its
 * members through a mapped file and changed only under flock. */
typedef struct udp_node_table {
    uint32_t magic;              /* NODE_MAGIC */
    uint32_t version;            /* NODE_VERSION */
    uint64_t job_key;            /* the job whose processes share the port */
    uint32_t n;                  /* sockets in the port's group */
    uint32_t gen;                /* bumped at every change: a member marked
                                    unsure looks when it sees it move */
    int32_t slot[UDP_NODE_MAX];  /* by index: the slot, NODE_SLOT_NONE for a
                                    free index, NODE_SLOT_UNSURE */
    int32_t pid[UDP_NODE_MAX];   /* by index: the process */
    uint64_t start[UDP_NODE_MAX]; /* its start time (a pid used again is
                                     another process) */
    uint16_t lane_port[UDP_LANES_MAX]; /* the node's lanes (0: not yet) */
} udp_node_table_t;

static int fallback_logged[2]; /* info, warn: each said once */

static void lanes_open_locked(udp_iface_t *ui);

/* Says once per process why its contexts have ports of their own: a
 * warning where the port was to be shared and could not be, else (the
 * setting, a context outside a job) for information. */
static void node_fallback_at(int level, const char *why, int err)
{
    if (__atomic_exchange_n(&fallback_logged[level == UTIL_LOG_WARN], 1, __ATOMIC_RELAXED))
        return;
    if (err != 0)
        util_log(level, "udp: a port per process, not one per node: %s (%s)", why, strerror(err));
    else
        util_log(level, "udp: a port per process, not one per node: %s", why);
}

static void node_fallback(const char *why, int err)
{
    node_fallback_at(UTIL_LOG_WARN, why, err);
}

/* The port a job's processes share: a hash of its key, away from the
 * ports the kernel hands out. Another job may hold it: then ports per
 * process. */
uint16_t udp_node_port(uint64_t job_key)
{
    uint64_t h = job_key * 0x9e3779b97f4a7c15ull;

    return (uint16_t)(NODE_PORT_BASE + (h >> 32) % NODE_PORT_SPAN);
}

/* --------------------------------------------------------------- table */

static int node_lock(udp_node_t *nd)
{
    return flock(nd->fd, LOCK_EX) == 0 ? 0 : -1;
}

static void node_unlock(udp_node_t *nd)
{
    (void)flock(nd->fd, LOCK_UN);
}

/* Opens, locks and maps the table file, creating it when needed. A file
 * unlinked by its last member while we waited for the lock is left for a
 * new one. Returns with the lock held. */
static int table_open(udp_node_t *nd)
{
    struct stat st;

    for (int tries = 0; tries < 8; tries++) {
        nd->fd = open(nd->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (nd->fd < 0)
            return -1;
        if (node_lock(nd) != 0 || fstat(nd->fd, &st) != 0)
            goto err_close;
        if (st.st_nlink == 0) { /* unlinked meanwhile */
            close(nd->fd);
            continue;
        }
        if ((size_t)st.st_size < sizeof(udp_node_table_t) && ftruncate(nd->fd, sizeof(udp_node_table_t)) != 0)
            goto err_close;
        nd->tab = mmap(NULL, sizeof(udp_node_table_t), PROT_READ | PROT_WRITE, MAP_SHARED, nd->fd, 0);
        if (nd->tab == MAP_FAILED)
            goto err_close;
        return 0;
    }
    errno = EAGAIN;
    return -1;

err_close:
    close(nd->fd);
    nd->fd = -1;
    return -1;
}

static void table_close(udp_node_t *nd)
{
    if (nd->tab != NULL)
        munmap(nd->tab, sizeof(udp_node_table_t));
    nd->tab = NULL;
    if (nd->fd >= 0)
        close(nd->fd); /* drops the lock */
    nd->fd = -1;
}

static void table_reset(udp_node_table_t *t, uint64_t job_key)
{
    t->magic = NODE_MAGIC;
    t->version = NODE_VERSION;
    t->job_key = job_key;
    t->n = 0;
    t->gen++;
    for (int i = 0; i < UDP_NODE_MAX; i++)
        t->slot[i] = NODE_SLOT_NONE;
    memset(t->lane_port, 0, sizeof(t->lane_port));
}

/* A process's start time from /proc, 0 if it is gone or a zombie (its
 * sockets are closed then). */
static uint64_t proc_start(int32_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long long start = 0;
    char state = 0;
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    if ((p = strrchr(buf, ')')) == NULL)
        return 0;
    /* after the name: state, then fields 4 to 21, then starttime (22) */
    if (sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
               &state, &start) != 2 || state == 'Z' || state == 'X' || state == 'x')
        return 0;
    return start;
}

static int member_alive(const udp_node_table_t *t, int i)
{
    return t->start[i] != 0 && proc_start(t->pid[i]) == t->start[i];
}

/* The index whose socket holds slot s, or -1 (unknown or none). */
static int index_at(const udp_node_table_t *t, int32_t s)
{
    for (int i = 0; i < UDP_NODE_MAX; i++) {
        if (t->slot[i] == s)
            return i;
    }
    return -1;
}

/* Marks unsure every member at slot from or beyond: after a change the
 * table cannot follow, each of them may be anywhere. */
static void table_unsure_from(udp_node_table_t *t, int32_t from)
{
    for (int i = 0; i < UDP_NODE_MAX; i++) {
        if (t->slot[i] >= from)
            t->slot[i] = NODE_SLOT_UNSURE;
    }
}

/* Removes the processes that died. Their sockets are closed (a zombie's
 * are), each having moved the last socket into its slot: after one death
 * that socket is known, after several each survivor that was beyond the
 * new count is somewhere in the freed slots, and finds where by probing.
 * Returns the number removed. */
static int table_purge(udp_node_table_t *t)
{
    unsigned char dead_at[UDP_NODE_MAX];
    int dead = 0, dead_i = -1, known = 1;

    for (int i = 0; i < UDP_NODE_MAX; i++) {
        dead_at[i] = t->slot[i] != NODE_SLOT_NONE && !member_alive(t, i);
        if (dead_at[i]) {
            dead++;
            dead_i = i;
        }
    }
    if (dead == 0)
        return 0;
    if (dead == 1 && t->slot[dead_i] >= 0 && t->n > 0) {
        int last = index_at(t, (int32_t)t->n - 1);
        if (last >= 0 && last != dead_i)
            t->slot[last] = t->slot[dead_i];
        else if (last < 0 && t->slot[dead_i] != (int32_t)t->n - 1)
            known = 0; /* the last one is unsure itself */
    } else {
        known = 0;
    }
    t->n = t->n >= (uint32_t)dead ? t->n - (uint32_t)dead : 0;
    for (int i = 0; i < UDP_NODE_MAX; i++) {
        if (dead_at[i])
            t->slot[i] = NODE_SLOT_NONE;
    }
    if (!known)
        table_unsure_from(t, (int32_t)t->n);
    t->gen++;
    return dead;
}

static int table_members(const udp_node_table_t *t)
{
    int n = 0;

    for (int i = 0; i < UDP_NODE_MAX; i++)
        n += t->slot[i] != NODE_SLOT_NONE;
    return n;
}

/* ------------------------------------------------------------- program */

#define BPF_INS(c, k) ((struct sock_filter){(c), 0, 0, (k)})
#define BPF_JMP_K(c, k, t, f) ((struct sock_filter){(c), (t), (f), (k)})

/* The steering program of the table: a probe goes to the slot it names; a
 * datagram to the slot of its dst_index (while every index below the
 * count holds its own slot, the index is the slot: two instructions);
 * an index of no known slot to none (out of range: the kernel hashes,
 * and the member it reaches answers NOBODY or drops it). A datagram too
 * short for the load ends the program, which returns 0: slot 0 drops it. */
static int prog_build(const udp_node_table_t *t, struct sock_filter *f)
{
    int n = 0, ident = 1;

    f[n++] = BPF_INS(BPF_LD | BPF_B | BPF_ABS, 0);
    f[n++] = BPF_JMP_K(BPF_JMP | BPF_JEQ | BPF_K, UDP_PROBE_MAGIC, 0, 2);
    f[n++] = BPF_INS(BPF_LD | BPF_H | BPF_ABS, offsetof(udp_probe_t, slot));
    f[n++] = BPF_INS(BPF_RET | BPF_A, 0);
    f[n++] = BPF_INS(BPF_LD | BPF_H | BPF_ABS, offsetof(udp_hdr_t, dst_index));
    for (uint32_t i = 0; i < t->n && i < UDP_NODE_MAX; i++)
        ident &= t->slot[i] == (int32_t)i;
    if (ident && t->n <= UDP_NODE_MAX) {
        f[n++] = BPF_INS(BPF_RET | BPF_A, 0); /* an index beyond the count is out of range too */
        return n;
    }
    for (int i = 0; i < UDP_NODE_MAX; i++) {
        if (t->slot[i] < 0)
            continue;
        f[n++] = BPF_JMP_K(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)i, 0, 1);
        f[n++] = BPF_INS(BPF_RET | BPF_K, (uint32_t)t->slot[i]);
    }
    f[n++] = BPF_INS(BPF_RET | BPF_K, 0xffffffffu);
    return n;
}

static int prog_attach(const udp_node_table_t *t, int fd)
{
    static_assert(6 + 2 * UDP_NODE_MAX <= BPF_MAXINSNS, "the steering program fits");
    struct sock_filter *f = malloc((6 + 2 * UDP_NODE_MAX) * sizeof(*f));
    struct sock_fprog prog;
    int rc;

    if (f == NULL) {
        errno = ENOMEM;
        return -1;
    }
    memset(&prog, 0, sizeof(prog)); /* its padding too: the kernel is handed the whole struct */
    prog.len = (unsigned short)prog_build(t, f);
    prog.filter = f;
    rc = setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof(prog));
    free(f);
    return rc;
}

/* -------------------------------------------------------------- probes */

/* Whether buf is a probe of ours; counts it. Others' probes (a stale
 * program, a hashed one) are ignored. */
int udp_node_probe_input(udp_iface_t *ui, const unsigned char *buf, size_t len)
{
    udp_probe_t p;

    if (len != sizeof(p) || buf[0] != UDP_PROBE_MAGIC)
        return len > 0 && buf[0] == UDP_PROBE_MAGIC;
    memcpy(&p, buf, sizeof(p));
    if (ui->node.tab != NULL && le64toh(p.nonce) == ui->node.nonce) {
        ui->node.hits++;
        ui->node.hit_slot = ntohs(p.slot);
    }
    return 1;
}

/* Reads the socket until our probe came back (and what else is already
 * there): other datagrams are handed on when deliver is set (a context
 * in use), else dropped (one that has just bound: nobody knows it yet). */
static void probe_read(udp_iface_t *ui, int deliver)
{
    uint64_t end = udp_now_us() + NODE_PROBE_WAIT_US;
    struct sockaddr_in from;

    for (;;) {
        socklen_t fl = sizeof(from);
        ssize_t n = recvfrom(ui->sock.fd, ui->sock.rbufs, 65536, MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
        uint64_t now;
        if (n >= 0) {
            if (!udp_node_probe_input(ui, ui->sock.rbufs, (size_t)n) && deliver) {
                ui->rx_now_us = udp_now_us();
                ui->stats.dgrams_in++;
                udp_buf_input(ui, ui->sock.rbufs, (size_t)n, udp_gro_guess(ui->sock.rbufs, (size_t)n), &from);
            }
            continue;
        }
        if (errno != EAGAIN && errno != EINTR)
            return;
        if (ui->node.hits > 0 || (now = udp_now_us()) >= end)
            return;
        struct pollfd pfd = {ui->sock.fd, POLLIN, 0};
        (void)poll(&pfd, 1, (int)((end - now + 999) / 1000));
    }
}

/* Our socket's slot, by a probe to each slot below n: -1 if none came
 * back, or more than one (a slot beyond the group's end is hashed, and
 * may reach us). */
static int probe_slot(udp_iface_t *ui, uint32_t n, int deliver)
{
    udp_probe_t p = {UDP_PROBE_MAGIC, 0, 0, 0, 0};

    for (int tries = 0; tries < NODE_PROBE_TRIES; tries++) {
        /* a new nonce each time: a late answer to an earlier round is not counted */
        ui->node.nonce = ui->uuid ^ (++ui->node.probes * 0x9e3779b97f4a7c15ull);
        p.nonce = htole64(ui->node.nonce);
        ui->node.hits = 0;
        for (uint32_t s = 0; s < n; s++) {
            p.slot = htons((uint16_t)s);
            (void)sendto(ui->sock.fd, &p, sizeof(p), 0, (struct sockaddr *)&ui->sock.self_sa,
                         sizeof(ui->sock.self_sa));
        }
        probe_read(ui, deliver);
        if (ui->node.hits != 0)
            break;
    }
    return ui->node.hits == 1 ? ui->node.hit_slot : -1;
}

/* Under the lock: our slot found again if unsure, and the program
 * rebuilt. */
static void node_settle(udp_iface_t *ui, int deliver)
{
    udp_node_table_t *t = ui->node.tab;
    int s;

    if (t->slot[ui->sock.index] == NODE_SLOT_UNSURE && t->n > 0 && (s = probe_slot(ui, t->n, deliver)) >= 0) {
        int other = index_at(t, s);
        if (other >= 0) /* it was wrong about that one */
            t->slot[other] = NODE_SLOT_UNSURE;
        t->slot[ui->sock.index] = s;
        t->gen++;
    }
    if (prog_attach(t, ui->sock.fd) != 0)
        util_warn("udp: cannot attach the steering program to port %u again: %s",
                  ntohs(ui->sock.self_sa.sin_port), strerror(errno));
    ui->node.gen = t->gen;
}

/* ---------------------------------------------------------------- join */

static void node_path(udp_iface_t *ui, uint16_t port)
{
    struct stat st;
    unsigned long long ns = stat("/proc/self/ns/net", &st) == 0 ? (unsigned long long)st.st_ino : 0;

    snprintf(ui->node.path, sizeof(ui->node.path), "/dev/shm/tmx-udp-%llx-%08x-%u", ns,
             ntohl(ui->sock.self_sa.sin_addr.s_addr), port);
}

/* Tables whose processes all died (a job killed whole leaves its table
 * behind, and the namespace it was in may be gone) are removed by the next
 * process that joins a port, in any namespace, and by a launcher once its
 * job ended (tmx_host_sweep, its job's only: job_key; 0 for any). A table
 * in use is locked only briefly: one busy now is skipped. skip, if not
 * NULL, is the caller's own. Returns the number removed. */
static int node_sweep(const char *skip, uint64_t job_key)
{
    static const char prefix[] = "tmx-udp-";
    char path[sizeof("/dev/shm/") + 256];
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    int removed = 0;

    if (d == NULL)
        return 0;
    while ((e = readdir(d)) != NULL) {
        udp_node_t nd = {.fd = -1};
        struct stat st;
        if (strncmp(e->d_name, prefix, sizeof(prefix) - 1) != 0)
            continue;
        snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
        if ((skip != NULL && strcmp(path, skip) == 0) || (nd.fd = open(path, O_RDWR | O_CLOEXEC)) < 0)
            continue;
        /* a table its creator has not yet sized (it sizes it under the
         * lock, which it may not hold yet) is not swept: mapping it would
         * fault (SIGBUS) on the first read */
        if (flock(nd.fd, LOCK_EX | LOCK_NB) == 0 && fstat(nd.fd, &st) == 0 &&
            (size_t)st.st_size >= sizeof(udp_node_table_t) &&
            (nd.tab = mmap(NULL, sizeof(udp_node_table_t), PROT_READ | PROT_WRITE, MAP_SHARED, nd.fd, 0)) != MAP_FAILED) {
            if (nd.tab->magic == NODE_MAGIC && nd.tab->version == NODE_VERSION &&
                (job_key == 0 || nd.tab->job_key == job_key)) {
                table_purge(nd.tab);
                if (table_members(nd.tab) == 0 && unlink(path) == 0)
                    removed++;
            }
            table_close(&nd);
        } else {
            close(nd.fd);
        }
    }
    closedir(d);
    return removed;
}

int udp_node_sweep(uint64_t job_key)
{
    return node_sweep(NULL, job_key);
}

/* The lowest free index, or -1. */
static int free_index(const udp_node_table_t *t)
{
    for (int i = 0; i < UDP_NODE_MAX; i++) {
        if (t->slot[i] == NODE_SLOT_NONE)
            return i;
    }
    return -1;
}

/* Binds fd to the node's port and takes an index, under the lock. */
static int node_join(udp_iface_t *ui, int fd, const struct sockaddr_in *sa)
{
    udp_node_table_t *t = ui->node.tab;
    int one = 1, i, s;

    if (t->magic != NODE_MAGIC || t->version != NODE_VERSION)
        table_reset(t, ui->job_key);
    table_purge(t);
    if (table_members(t) == 0)
        table_reset(t, ui->job_key);
    if (t->job_key != ui->job_key) {
        node_fallback("another job shares this node's port", 0);
        return -1;
    }
    if ((i = free_index(t)) < 0) {
        node_fallback("the node's port has no free index", 0);
        return -1;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0 ||
        bind(fd, (const struct sockaddr *)sa, sizeof(*sa)) != 0) {
        node_fallback("the node's port is held", errno);
        return -1;
    }
    ui->sock.fd = fd;
    ui->sock.self_sa = *sa;
    ui->sock.index = (uint16_t)i;
    t->slot[i] = (int32_t)t->n++;
    t->pid[i] = (int32_t)getpid();
    t->start[i] = proc_start(t->pid[i]);
    t->gen++;
    if (prog_attach(t, fd) != 0) {
        node_fallback("the kernel refused the steering program", errno);
        goto err_leave;
    }
    if ((s = probe_slot(ui, t->n, 0)) < 0) {
        node_fallback("the port's slots are not where the table says", 0);
        goto err_leave;
    }
    if (s != t->slot[i]) { /* a member died unnoticed: it finds out */
        int other = index_at(t, s);
        if (other >= 0)
            t->slot[other] = NODE_SLOT_UNSURE;
        t->slot[i] = s;
        prog_attach(t, fd);
    }
    ui->node.gen = t->gen;
    return 0;

err_leave: /* the caller closes fd, the last socket of the group: nothing moves */
    t->slot[i] = NODE_SLOT_NONE;
    t->n--;
    t->gen++;
    ui->sock.fd = -1;
    ui->sock.index = 0;
    return -1;
}

tmx_status_t udp_node_open(udp_iface_t *ui, int fd)
{
    struct sockaddr_in sa = ui->sock.self_sa;

    ui->node.fd = -1;
    ui->node.tab = NULL;
    if (!ui->cfg.set.shared_port) {
        node_fallback_at(UTIL_LOG_INFO, "TMX_UDP_SHARED_PORT=0", 0);
        return TMX_ERR_UNSUPPORTED;
    }
    if (!ui->in_job || ui->job_key == 0) {
        node_fallback_at(UTIL_LOG_INFO, "a context outside a job", 0);
        return TMX_ERR_UNSUPPORTED;
    }
    sa.sin_port = htons(udp_node_port(ui->job_key));
    node_path(ui, ntohs(sa.sin_port));
    (void)node_sweep(ui->node.path, 0);
    if (table_open(&ui->node) != 0) {
        node_fallback("no table for the node's port in /dev/shm", errno);
        return TMX_ERR_UNSUPPORTED;
    }
    if (node_join(ui, fd, &sa) != 0) {
        if (table_members(ui->node.tab) == 0)
            unlink(ui->node.path);
        table_close(&ui->node);
        return TMX_ERR_UNSUPPORTED;
    }
    lanes_open_locked(ui);
    node_unlock(&ui->node);
    util_debug("udp: port %u shared by the node, index %u, slot %d", ntohs(sa.sin_port), ui->sock.index,
               ui->node.tab->slot[ui->sock.index]);
    return TMX_OK;
}

/* --------------------------------------------------------------- close */

/* Our socket leaves the group: the program first steers as it will be
 * once the kernel has moved the last socket into our slot. */
void udp_node_close(udp_iface_t *ui)
{
    udp_node_table_t *t = ui->node.tab;
    int me = ui->sock.index, last;
    int32_t s;

    if (t == NULL)
        return;
    if (node_lock(&ui->node) == 0) {
        table_purge(t);
        s = t->slot[me];
        last = t->n > 0 ? index_at(t, (int32_t)t->n - 1) : -1;
        t->slot[me] = NODE_SLOT_NONE;
        if (last >= 0 && last != me && s >= 0)
            t->slot[last] = s;
        else if (t->n > 0 && (s < 0 || (last < 0 && s != (int32_t)t->n - 1)))
            table_unsure_from(t, (int32_t)t->n - 1); /* who moves where is not known */
        if (t->n > 0)
            t->n--;
        t->gen++;
        if (t->n > 0 && table_members(t) > 0)
            (void)prog_attach(t, ui->sock.fd);
        close(ui->sock.fd);
        ui->sock.fd = -1;
        if (table_members(t) == 0)
            unlink(ui->node.path);
    }
    table_close(&ui->node);
}

/* --------------------------------------------------------------- check */

/* Finds the node's processes that died and, if we are unsure of our
 * slot, where we are; rebuilds the program. */
static void node_check_locked(udp_iface_t *ui)
{
    table_purge(ui->node.tab);
    node_settle(ui, 1);
}

void udp_node_check(udp_iface_t *ui, uint64_t now, int force)
{
    udp_node_t *nd = &ui->node;
    uint32_t gen;

    if (nd->tab == NULL)
        return;
    gen = __atomic_load_n(&nd->tab->gen, __ATOMIC_RELAXED);
    if (!force && gen == nd->gen && now < nd->checked_us + NODE_CHECK_US)
        return;
    if (force && now < nd->checked_us + NODE_RECHECK_US) {
        nd->recheck = 1; /* later */
        return;
    }
    nd->checked_us = now;
    if (node_lock(nd) != 0)
        return;
    node_check_locked(ui);
    node_unlock(nd);
}

/* The table moved since we last looked (a member died or left, and we
 * may have to find our slot), or a datagram for another index came.
 * Cheap enough for every progress (one load). */
void udp_node_progress(udp_iface_t *ui, uint64_t now)
{
    if (ui->node.recheck) {
        ui->node.recheck = 0;
        udp_node_check(ui, now, 1);
    } else if (__atomic_load_n(&ui->node.tab->gen, __ATOMIC_RELAXED) != ui->node.gen) {
        udp_node_check(ui, now, 0);
    }
}

void udp_nobody_send(udp_iface_t *ui, const udp_hdr_t *h, const struct sockaddr_in *from)
{
    udp_hdr_t r = {0};
    struct sockaddr_in to = *from;
    unsigned char buf[sizeof(r)];

    r.version = UDP_WIRE_VERSION;
    r.channel = UDP_CH_PRIO;
    r.flags = htole16(UDP_FLAG_ACK_ONLY | UDP_FLAG_NOBODY);
    r.port = ui->sock.self_sa.sin_port;
    r.job_key = htole64(ui->job_key);
    r.src_id = htole64(h->dst_id);
    r.dst_id = htole64(h->src_id);
    r.src_index = htons(h->dst_index);
    r.dst_index = htons(h->src_index);
    memcpy(buf, &r, sizeof(r));
    r.csum = htole32(util_crc32c(0, buf, sizeof(r)));
    memcpy(buf, &r, sizeof(r));
    to.sin_port = h->port;
    if (h->flags & UDP_FLAG_HANDED)
        to.sin_addr.s_addr = h->pad; /* its first sender, not the node-mate that handed it on */
    (void)sendto(ui->sock.fd, buf, sizeof(buf), 0, (struct sockaddr *)&to, sizeof(to));
    ui->stats.nobody_sent++;
}

/* A datagram for another index reached us. If no process holds that index
 * (its process died), its sender is told, as a kernel refuses a port
 * nobody holds; else the program is stale and is looked at. */
void udp_node_misrouted(udp_iface_t *ui, const udp_hdr_t *h, const struct sockaddr_in *from,
                        unsigned char *dgram, size_t len)
{
    udp_node_table_t *t = ui->node.tab;
    const struct sockaddr_in *me = &ui->sock.self_sa;

    if (t == NULL)
        return;
    if (h->dst_index < UDP_NODE_MAX && __atomic_load_n(&t->slot[h->dst_index], __ATOMIC_RELAXED) != NODE_SLOT_NONE) {
        /* A node-mate holds it: on to the node's port, where the program
         * steers it by its index. Once: what came from the node's port
         * (handed on already, or a node-mate's own) stops here, so a
         * stale program cannot bounce it around. GRO's merges are not a
         * stale program: only a wrong steering calls for a look. */
        if (from->sin_addr.s_addr != me->sin_addr.s_addr || from->sin_port != me->sin_port) {
            unsigned char *d = dgram; /* rewritten in place: it is dropped here after */
            uint16_t fl = htole16((uint16_t)(h->flags | UDP_FLAG_HANDED));
            uint32_t c;
            memcpy(d + offsetof(udp_hdr_t, flags), &fl, sizeof(fl));
            memcpy(d + offsetof(udp_hdr_t, pad), &from->sin_addr.s_addr, sizeof(uint32_t));
            memset(d + offsetof(udp_hdr_t, csum), 0, sizeof(uint32_t));
            c = htole32(util_crc32c(0, d, len));
            memcpy(d + offsetof(udp_hdr_t, csum), &c, sizeof(c));
            if (sendto(ui->sock.fd, dgram, len, 0, (const struct sockaddr *)me, sizeof(*me)) == (ssize_t)len) {
                ui->stats.handed_on++;
                return;
            }
        }
        ui->node.recheck = 1; /* by the next progress, not inside a receive */
        return;
    }
    ui->node.recheck = 1;
    /* a notice is never answered: two nodes would answer each other */
    if (h->flags & UDP_FLAG_NOBODY)
        return;
    udp_nobody_send(ui, h, from);
}

int udp_node_slot(const udp_iface_t *ui, uint16_t index)
{
    if (ui->node.tab == NULL || index >= UDP_NODE_MAX)
        return NODE_SLOT_NONE;
    return __atomic_load_n(&ui->node.tab->slot[index], __ATOMIC_RELAXED);
}

/* --------------------------------------------------------------- lanes */

/*
 * Lanes (seed 003: a fixed number of connections between two nodes,
 * shared by their processes). Bulk data, every packet of more than one
 * datagram, leaves a process from one of the node's L lane ports instead
 * of its own socket: each remote process is given a lane at its first
 * bulk packet, in turn (starting at our node index, so that the processes
 * of a node spread), and all its bulk segments and their
 * retransmissions take that lane. Every process of the job on the node
 * binds the same L ports (SO_REUSEPORT), so between two nodes there are L
 * flows (source address and port, destination address and port) of bulk
 * data in each direction however many processes talk: what a NIC's
 * receive-side scaling, a switch's ECMP hash or a firewall's connection
 * table sees and spreads. The receiving end is the node's port as before:
 * a lane only sends, and its sockets keep nothing that reaches them (a
 * socket filter that accepts nothing, the smallest receive buffer).
 *
 * A lane's port is a hash of the job key, like the node's, in a range of
 * its own (LANE_PORT_BASE, below the nodes' ports) and never inside the
 * kernel's ephemeral range (ip_local_port_range), so that no program's
 * bind to port 0 is handed it and joins the lane's group. The first
 * process binds it without SO_REUSEPORT, which fails if anyone holds it
 * (the next candidate is tried), then opens it to the job and writes it
 * into the node's table; those that come later bind it with SO_REUSEPORT.
 * All of it happens as a process joins the node's port, under the
 * table's lock. A process that cannot open them sends bulk data from its
 * own socket, and says so once.
 */

#define LANE_PORT_BASE 14000
#define LANE_PORT_SPAN 6000      /* up to NODE_PORT_BASE */
#define LANE_PORT_TRIES 32

/* A socket that keeps nothing that reaches it. */
static int lane_socket(void)
{
    struct sock_filter none[] = {BPF_STMT(BPF_RET | BPF_K, 0)};
    struct sock_fprog prog;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), sz = UDP_SOCKBUF;

    if (fd < 0)
        return -1;
    memset(&prog, 0, sizeof(prog)); /* its padding too */
    prog.len = 1;
    prog.filter = none;
    if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &(int){0}, sizeof(int)) != 0) { /* the least the kernel allows */
        close(fd);
        return -1;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) != 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    return fd;
}

/* The kernel's ephemeral ports, [lo, hi]. */
static void ephemeral_range(unsigned *lo, unsigned *hi)
{
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");

    *lo = 32768;
    *hi = 60999;
    if (f != NULL) {
        if (fscanf(f, "%u %u", lo, hi) != 2) {
            *lo = 1;
            *hi = 65535; /* unknown: no candidate is safe */
        }
        fclose(f);
    }
}

/* Candidate k for lane i of a job. */
static uint16_t lane_port_candidate(uint64_t job_key, unsigned lane, unsigned k)
{
    uint64_t h = (job_key ^ (0x632be59bd9b4e019ull * (1 + lane + UDP_LANES_MAX * (uint64_t)k))) * 0x9e3779b97f4a7c15ull;

    return (uint16_t)(LANE_PORT_BASE + (h >> 32) % LANE_PORT_SPAN);
}

/* A port for lane i that nobody holds: fd bound to it, opened to the job. */
static int lane_bind_new(udp_iface_t *ui, unsigned i, int *fd, uint16_t *port)
{
    struct sockaddr_in me = ui->sock.self_sa;
    unsigned lo, hi;
    int one = 1;

    ephemeral_range(&lo, &hi);
    for (unsigned k = 0; k < LANE_PORT_TRIES; k++) {
        uint16_t p = lane_port_candidate(ui->job_key, i, k);
        if (p >= lo && p <= hi)
            continue;
        me.sin_port = htons(p);
        if (bind(*fd, (struct sockaddr *)&me, sizeof(me)) == 0) {
            if (setsockopt(*fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0)
                return -1;
            *port = p;
            return 0;
        }
        if (errno != EADDRINUSE)
            return -1;
    }
    errno = EADDRINUSE;
    return -1;
}

/* Lane i's socket, bound to the node's port for it: -1 if none can be.
 * Under the table's lock. */
static int lane_open(udp_iface_t *ui, unsigned i)
{
    udp_node_table_t *t = ui->node.tab;
    struct sockaddr_in me = ui->sock.self_sa;
    int fd = lane_socket(), one = 1;
    uint16_t port = t->lane_port[i];

    if (fd < 0)
        return -1;
    if (port != 0) {
        me.sin_port = htons(port);
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) == 0 &&
            bind(fd, (struct sockaddr *)&me, sizeof(me)) == 0)
            return fd;
        close(fd); /* its holders all left, and someone else took it: another port */
        if ((fd = lane_socket()) < 0)
            return -1;
    }
    if (lane_bind_new(ui, i, &fd, &port) != 0) {
        close(fd);
        return -1;
    }
    t->lane_port[i] = port;
    return fd;
}

static int lanes_logged;

/* Opens the lanes, under the table's lock (udp_node_open). */
static void lanes_open_locked(udp_iface_t *ui)
{
    udp_sock_t *s = &ui->sock;
    uint32_t want = ui->cfg.set.lanes < UDP_LANES_MAX ? ui->cfg.set.lanes : UDP_LANES_MAX, n = 0;
    int err;

    while (n < want && (s->lane_fd[n] = lane_open(ui, n)) >= 0)
        n++;
    if (n == want) {
        s->lanes = n;
        s->lane_next = ui->sock.index; /* the node's processes start on different lanes */
        if (n > 0)
            util_debug("udp: %u lanes for bulk data, from ports %u to %u", n, ui->node.tab->lane_port[0],
                       ui->node.tab->lane_port[n - 1]);
        return;
    }
    err = errno;
    for (uint32_t i = 0; i < n; i++) {
        close(s->lane_fd[i]);
        s->lane_fd[i] = -1;
    }
    if (!__atomic_exchange_n(&lanes_logged, 1, __ATOMIC_RELAXED))
        util_info("udp: no lanes, bulk data leaves from each process's socket: lane %u cannot be opened (%s)",
                  n, strerror(err));
}

void udp_node_lanes_close(udp_iface_t *ui)
{
    for (uint32_t i = 0; i < ui->sock.lanes; i++) {
        close(ui->sock.lane_fd[i]);
        ui->sock.lane_fd[i] = -1;
    }
    ui->sock.lanes = 0;
}

uint16_t udp_node_lane_port(const udp_iface_t *ui, unsigned lane)
{
    struct sockaddr_in me;
    socklen_t sl = sizeof(me);

    if (lane >= ui->sock.lanes || getsockname(ui->sock.lane_fd[lane], (struct sockaddr *)&me, &sl) != 0)
        return 0;
    return ntohs(me.sin_port);
}
