/*
 * tmxrun: the key-value service (protocol in src/boot/boot.h).
 *
 * Requests are handled in order per connection; a GET of a missing key and
 * a FENCE park their connection (CONN_WAIT_*) until a PUT or the last rank's
 * FENCE wakes it, or the job fails and every waiter gets ERR. The service
 * listens on an abstract Unix socket, which vanishes with its last
 * descriptor, or on TCP for a job whose ranks run on other hosts.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tmxrun.h"

/* ------------------------------------------------------- key-value store */

static size_t kv_hash(const char *key, size_t nbuckets)
{
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a, then mixed */

    for (const char *p = key; *p != '\0'; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
    return (size_t)(tmxrun_mix64(h) & (nbuckets - 1));
}

static run_kv_t **kv_bucket(run_job_t *job, const char *key)
{
    return &job->buckets[kv_hash(key, job->nbuckets)];
}

/* Doubles the buckets once there are as many keys as buckets, so that a
 * lookup stays a short walk however many keys the clients put. Without
 * the memory, the chains just grow longer. */
static void kv_grow(run_job_t *job)
{
    size_t n = 2 * job->nbuckets;
    run_kv_t **b;

    if (job->nkeys < job->nbuckets || (b = calloc(n, sizeof(*b))) == NULL)
        return;
    for (size_t i = 0; i < job->nbuckets; i++) {
        while (job->buckets[i] != NULL) {
            run_kv_t *kv = job->buckets[i];
            size_t h = kv_hash(kv->key, n);

            job->buckets[i] = kv->next;
            kv->next = b[h];
            b[h] = kv;
        }
    }
    free(job->buckets);
    job->buckets = b;
    job->nbuckets = n;
}

static run_kv_t *kv_find(run_job_t *job, const char *key)
{
    run_kv_t *kv = *kv_bucket(job, key);

    while (kv != NULL && strcmp(kv->key, key) != 0)
        kv = kv->next;
    return kv;
}

/* Stores or replaces; returns NULL with a reason when it cannot. */
static run_kv_t *kv_store(run_job_t *job, const char *key, const char *value, const char **why)
{
    run_kv_t *kv = kv_find(job, key);
    size_t klen = strlen(key), vlen = strlen(value);
    size_t old = kv != NULL ? strlen(kv->value) : 0;
    char *v;

    if (job->store_bytes - old + vlen + (kv == NULL ? klen + RUN_KV_OVERHEAD : 0) > RUN_STORE_MAX) {
        *why = "the key-value store is full";
        return NULL;
    }
    *why = "tmxrun is out of memory";
    v = strdup(value);
    if (v == NULL)
        return NULL;
    if (kv == NULL) {
        run_kv_t **b;

        kv_grow(job);
        b = kv_bucket(job, key);
        kv = malloc(sizeof(*kv) + klen + 1);
        if (kv == NULL)
            goto err_free_value;
        memcpy(kv->key, key, klen + 1);
        kv->value = NULL;
        kv->next = *b;
        *b = kv;
        job->nkeys++;
        job->store_bytes += klen + RUN_KV_OVERHEAD;
    }
    free(kv->value);
    kv->value = v;
    job->store_bytes += vlen - old;
    return kv;

err_free_value:
    free(v);
    return NULL;
}

static void kv_free_all(run_job_t *job)
{
    for (size_t i = 0; job->buckets != NULL && i < job->nbuckets; i++) {
        while (job->buckets[i] != NULL) {
            run_kv_t *kv = job->buckets[i];

            job->buckets[i] = kv->next;
            free(kv->value);
            free(kv);
        }
    }
    free(job->buckets);
    job->buckets = NULL;
    job->nkeys = 0;
}

/* ------------------------------------------------------------ connections */

static void conn_flush(run_conn_t *c)
{
    while (c->out_len > 0 && !c->dead) {
        ssize_t n = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN)
            c->dead = 1;
        if (n <= 0)
            return;
        memmove(c->out, c->out + n, c->out_len - (size_t)n);
        c->out_len -= (size_t)n;
    }
}

/* Queues "word[ arg]\n" and sends what the socket takes. */
static void conn_reply(run_conn_t *c, const char *word, const char *arg)
{
    size_t wl = strlen(word), al = arg != NULL ? strlen(arg) + 1 : 0;
    size_t need = c->out_len + wl + al + 1;

    if (need > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 256;
        char *out;

        while (cap < need)
            cap *= 2;
        out = realloc(c->out, cap);
        if (out == NULL) {
            c->dead = 1;
            return;
        }
        c->out = out;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, word, wl);
    if (arg != NULL) {
        c->out[c->out_len + wl] = ' ';
        memcpy(c->out + c->out_len + wl + 1, arg, al - 1);
    }
    c->out[need - 1] = '\n';
    c->out_len = need;
    conn_flush(c);
}

static void conn_error(run_conn_t *c, const char *req, size_t len, const char *reason)
{
    char shown[64];

    run_log("kvs: bad request from %s: %s: '%s'", c->peer, reason,
            printable(req, len, shown, sizeof(shown)));
    conn_reply(c, "ERR", reason);
}

void waiters_fail(run_job_t *job, int gets_too, const char *reason)
{
    for (size_t i = 0; i < job->nconns; i++) {
        run_conn_t *c = job->conns[i];

        if (c->state == CONN_WAIT_FENCE || (gets_too && c->state == CONN_WAIT_GET)) {
            conn_reply(c, "ERR", reason);
            free(c->wait_key);
            c->wait_key = NULL;
            c->state = CONN_READY;
        }
    }
    job->fence_waiting = 0;
}

static void kvs_put(run_job_t *job, run_conn_t *c, const char *key, const char *value)
{
    const char *why;
    run_kv_t *kv = kv_store(job, key, value, &why);

    if (kv == NULL) {
        run_log("kvs: PUT %.64s from %s: %s", key, c->peer, why);
        conn_reply(c, "ERR", why);
        return;
    }
    conn_reply(c, "OK", NULL);
    for (size_t i = 0; i < job->nconns; i++) {
        run_conn_t *w = job->conns[i];

        if (w->state == CONN_WAIT_GET && strcmp(w->wait_key, key) == 0) {
            conn_reply(w, "VAL", kv->value);
            free(w->wait_key);
            w->wait_key = NULL;
            w->state = CONN_READY;
        }
    }
}

static void kvs_get(run_job_t *job, run_conn_t *c, const char *key)
{
    run_kv_t *kv = kv_find(job, key);

    if (kv != NULL) {
        conn_reply(c, "VAL", kv->value);
    } else if (job->fail_reason[0] != '\0') {
        conn_reply(c, "ERR", job->fail_reason);
    } else if ((c->wait_key = strdup(key)) == NULL) {
        conn_reply(c, "ERR", "tmxrun is out of memory");
    } else {
        c->state = CONN_WAIT_GET;
    }
}

static void kvs_fence(run_job_t *job, run_conn_t *c)
{
    char why[96];

    if (job->fail_reason[0] != '\0') {
        conn_reply(c, "ERR", job->fail_reason);
        return;
    }
    if (job->first_gone >= 0) {
        snprintf(why, sizeof(why), "rank %d exited before reaching the fence", job->first_gone);
        conn_reply(c, "ERR", why);
        return;
    }
    c->state = CONN_WAIT_FENCE;
    if (++job->fence_waiting < (size_t)job->opts.nranks)
        return;
    for (size_t i = 0; i < job->nconns; i++) {
        if (job->conns[i]->state == CONN_WAIT_FENCE) {
            conn_reply(job->conns[i], "OK", NULL);
            job->conns[i]->state = CONN_READY;
        }
    }
    job->fence_waiting = 0;
}

/* Splits line[0..len) at single spaces, NUL-terminating each token (line[len]
 * must be writable). Returns the token count, max+1 if there are more. */
static size_t split(char *line, size_t len, char **tok, size_t *tlen, size_t max)
{
    size_t n = 0, start = 0;

    for (size_t i = 0; i <= len; i++) {
        if (i < len && line[i] != ' ')
            continue;
        if (n == max)
            return max + 1;
        tok[n] = line + start;
        tlen[n++] = i - start;
        line[i] = '\0';
        start = i + 1;
    }
    return n;
}

/* A key or value: 1..RUN_KVS_TOKEN_MAX bytes, each printable ASCII and not
 * a space (the library sends nothing else). */
static int token_ok(const char *tok, size_t len)
{
    if (len == 0 || len > RUN_KVS_TOKEN_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (tok[i] <= ' ' || tok[i] > '~')
            return 0;
    }
    return 1;
}

static int is_cmd(const char *tok, size_t len, const char *cmd)
{
    return len == strlen(cmd) && memcmp(tok, cmd, len) == 0;
}

static void kvs_request(run_job_t *job, run_conn_t *c, char *line, size_t len)
{
    char shown[64];
    char *tok[3];
    size_t tlen[3];
    size_t n;

    printable(line, len, shown, sizeof(shown));
    n = split(line, len, tok, tlen, 3);
    if (is_cmd(tok[0], tlen[0], "PUT") && n == 3 && token_ok(tok[1], tlen[1]) &&
        token_ok(tok[2], tlen[2]))
        kvs_put(job, c, tok[1], tok[2]);
    else if (is_cmd(tok[0], tlen[0], "GET") && n == 2 && token_ok(tok[1], tlen[1]))
        kvs_get(job, c, tok[1]);
    else if (is_cmd(tok[0], tlen[0], "FENCE") && n == 1)
        kvs_fence(job, c);
    else if (is_cmd(tok[0], tlen[0], "PUT") || is_cmd(tok[0], tlen[0], "GET"))
        conn_error(c, shown, strlen(shown), "expected PUT <key> <value> or GET <key>, "
                                            "tokens of printable characters");
    else
        conn_error(c, shown, strlen(shown), "expected PUT, GET or FENCE");
}

static void conn_consume(run_conn_t *c, size_t n)
{
    memmove(c->in, c->in + n, c->in_len - n);
    c->in_len -= n;
}

/* Handles the complete requests buffered, in order, until one has to wait.
 * Returns how many were handled. */
static int conn_run(run_job_t *job, run_conn_t *c)
{
    int handled = 0;
    char *nl;

    while (!c->dead && c->state == CONN_READY && c->out_len < RUN_OUT_HIGH &&
           (nl = memchr(c->in, '\n', c->in_len)) != NULL) {
        size_t len = (size_t)(nl - c->in);

        *nl = '\0';
        if (!c->skipping)
            kvs_request(job, c, c->in, len);
        c->skipping = 0;
        conn_consume(c, len + 1);
        handled++;
    }
    if (c->in_len == sizeof(c->in) && memchr(c->in, '\n', c->in_len) == NULL) {
        if (!c->skipping)
            conn_error(c, c->in, 32, "request longer than the protocol allows");
        c->skipping = 1;
        c->in_len = 0;
    }
    if (c->eof && (c->state != CONN_READY || memchr(c->in, '\n', c->in_len) == NULL))
        c->dead = 1;
    return handled;
}

void conn_event(run_conn_t *c, short revents)
{
    ssize_t n;

    if (revents & POLLOUT)
        conn_flush(c);
    if (!(revents & ~POLLOUT))
        return;
    if (c->in_len == sizeof(c->in)) {
        if (revents & (POLLHUP | POLLERR))
            c->dead = 1;
        return;
    }
    n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, MSG_DONTWAIT);
    if (n > 0)
        c->in_len += (size_t)n;
    else if (n == 0)
        c->eof = 1;
    else if (errno != EAGAIN && errno != EINTR)
        c->dead = 1;
}

static void conn_free(run_job_t *job, run_conn_t *c)
{
    if (c->state == CONN_WAIT_FENCE)
        job->fence_waiting--;
    close(c->fd);
    free(c->wait_key);
    free(c->out);
    free(c);
}

/* Names the client for log lines: its pid over a Unix socket, its address
 * over TCP. TCP_NODELAY: each reply is small and awaited. */
static void conn_name(run_conn_t *c, const struct sockaddr_storage *sa)
{
    const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
    struct ucred cred = {0};
    socklen_t len = sizeof(cred);
    char ip[INET_ADDRSTRLEN];
    int one = 1;

    if (sa->ss_family == AF_INET) {
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
        snprintf(c->peer, sizeof(c->peer), "%s:%u", ip, (unsigned)ntohs(in->sin_port));
        return;
    }
    getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len);
    snprintf(c->peer, sizeof(c->peer), "pid %d", (int)cred.pid);
}

void conns_accept(run_job_t *job)
{
    struct sockaddr_storage sa;
    socklen_t len = sizeof(sa);
    run_conn_t *c;
    int fd;

    while ((fd = accept4(job->listen_fd, (struct sockaddr *)&sa, &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
        c = job->nconns < job->max_conns ? calloc(1, sizeof(*c)) : NULL;
        if (c == NULL) {
            run_log("kvs: refusing a connection: %zu open, limit %zu", job->nconns,
                    job->max_conns);
            close(fd);
            continue;
        }
        c->fd = fd;
        conn_name(c, &sa);
        job->conns[job->nconns++] = c;
        len = sizeof(sa);
    }
}

/* Runs every connection until none can go further (a PUT may wake a GET
 * whose connection has requests buffered behind it), then frees the dead. */
void conns_run(run_job_t *job)
{
    int progress = 1;

    while (progress) {
        progress = 0;
        for (size_t i = 0; i < job->nconns; i++)
            progress += conn_run(job, job->conns[i]);
    }
    for (size_t i = 0; i < job->nconns;) {
        if (job->conns[i]->dead) {
            conn_free(job, job->conns[i]);
            job->conns[i] = job->conns[--job->nconns];
        } else {
            i++;
        }
    }
}

/* ------------------------------------------------------------- listening */

/* An abstract socket (unix:@NAME): nothing in the file system to clean up. */
static int listen_unix(run_job_t *job)
{
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    int n = snprintf(un.sun_path + 1, sizeof(un.sun_path) - 1, "tmx-kvs-%d-%08x", (int)job->self,
                     (unsigned)random64());
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);

    snprintf(job->kvs_addr, sizeof(job->kvs_addr), "unix:@%s", un.sun_path + 1);
    job->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (job->listen_fd < 0 || bind(job->listen_fd, (struct sockaddr *)&un, len) != 0 ||
        listen(job->listen_fd, SOMAXCONN) != 0) {
        run_log("kvs: cannot listen on %s: %s", job->kvs_addr, strerror(errno));
        return -1;
    }
    return 0;
}

/* The first IPv4 address of an interface that is up and not loopback: the
 * one most likely reachable from other hosts. Without one, 127.0.0.1, which
 * serves agents that keep the ranks on this host's network. */
static int tcp_default_ip(char *ip, size_t cap)
{
    struct ifaddrs *ifs;
    int found = 0;

    if (getifaddrs(&ifs) != 0) {
        run_log("kvs: getifaddrs: %s", strerror(errno));
        return -1;
    }
    for (struct ifaddrs *i = ifs; i != NULL && !found; i = i->ifa_next) {
        if (i->ifa_addr != NULL && i->ifa_addr->sa_family == AF_INET &&
            (i->ifa_flags & IFF_UP) && !(i->ifa_flags & IFF_LOOPBACK))
            found = inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, ip,
                              (socklen_t)cap) != NULL;
    }
    freeifaddrs(ifs);
    if (found)
        run_log("kvs: no route to the hosts known (their names do not resolve here, and `hostname -I` "
                "through the agent named no address that routes); advertising %s, the first address "
                "of an interface up: if the hosts cannot reach it, give --kvs-addr", ip);
    if (!found) {
        run_log("kvs: no interface but loopback has an IPv4 address; advertising 127.0.0.1, "
                "which only ranks on this host can reach (see --kvs-addr)");
        snprintf(ip, cap, "127.0.0.1");
    }
    return 0;
}

/* Listens on every address, or only on --kvs-addr, at a port the kernel
 * picks, and advertises --kvs-addr, or the address on the route to the
 * hosts (tmxrun_route.c), or else tcp_default_ip(). */
static int listen_tcp(run_job_t *job)
{
    const char *bind_ip = job->opts.kvs_ip != NULL ? job->opts.kvs_ip : "0.0.0.0";
    struct sockaddr_in in = {.sin_family = AF_INET};
    socklen_t len = sizeof(in);
    char ip[INET_ADDRSTRLEN];

    if (inet_pton(AF_INET, bind_ip, &in.sin_addr) != 1) {
        run_log("kvs: '%s' is not an IPv4 address", bind_ip);
        return -1;
    }
    if (job->opts.kvs_ip != NULL)
        snprintf(ip, sizeof(ip), "%s", job->opts.kvs_ip);
    else if (route_kvs_ip(job, ip, sizeof(ip)) != 0 && tcp_default_ip(ip, sizeof(ip)) != 0)
        return -1;
    job->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (job->listen_fd < 0 || bind(job->listen_fd, (struct sockaddr *)&in, sizeof(in)) != 0 ||
        listen(job->listen_fd, SOMAXCONN) != 0 ||
        getsockname(job->listen_fd, (struct sockaddr *)&in, &len) != 0) {
        run_log("kvs: cannot listen on TCP %s: %s", bind_ip, strerror(errno));
        return -1;
    }
    snprintf(job->kvs_addr, sizeof(job->kvs_addr), "tcp:%s:%u", ip, (unsigned)ntohs(in.sin_port));
    return 0;
}

int kvs_listen(run_job_t *job)
{
    return job->opts.hosts != NULL ? listen_tcp(job) : listen_unix(job);
}

void kvs_fini(run_job_t *job)
{
    for (size_t i = 0; i < job->nconns; i++)
        conn_free(job, job->conns[i]);
    job->nconns = 0;
    kv_free_all(job);
    if (job->listen_fd >= 0)
        close(job->listen_fd);
    job->listen_fd = -1;
}
