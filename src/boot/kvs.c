/* The client side of tmxrun's key-value service, the environment tmxrun
 * sets, and the hex encoding of the blobs exchanged through it. */
#include "boot/boot.h"
#include "core/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"

struct boot_kvs {
    int fd;
    void (*idle)(void *arg);      /* runs while a reply is awaited */
    void *idle_arg;
    int broken;                   /* out of step with the server: unusable */
    size_t len;                   /* bytes received into buf */
    size_t used;                  /* bytes of buf that the last reply took */
    char buf[BOOT_KVS_LINE_MAX];  /* replies are shorter than requests */
};

/* ------------------------------------------------------------- addresses */

static tmx_status_t addr_unix(const char *name, boot_addr_t *out)
{
    struct sockaddr_un *un = (struct sockaddr_un *)&out->sa;
    size_t len = strlen(name);

    /* An abstract name is '\0' then the bytes, with no terminator; the
     * length passed to bind/connect says where it ends. */
    if (len == 0 || strcmp(name, "@") == 0 || len >= sizeof(un->sun_path)) {
        util_error("kvs address 'unix:%s': expected @NAME or PATH of 1..%zu characters", name,
                   sizeof(un->sun_path) - 1);
        return TMX_ERR_INVALID;
    }
    memset(out, 0, sizeof(*out));
    un->sun_family = AF_UNIX;
    memcpy(un->sun_path, name, len);
    if (name[0] == '@') {
        un->sun_path[0] = '\0';
        out->len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    } else {
        out->len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
    }
    return TMX_OK;
}

static int tcp_port(const char *s, uint16_t *port)
{
    unsigned v = 0;
    size_t i;

    for (i = 0; s[i] >= '0' && s[i] <= '9' && v <= 65535; i++)
        v = v * 10 + (unsigned)(s[i] - '0');
    if (i == 0 || s[i] != '\0' || v == 0 || v > 65535)
        return -1;
    *port = (uint16_t)v;
    return 0;
}

/* A dotted quad as it is; a name through getaddrinfo (IPv4 only: tmxrun
 * listens on IPv4). */
static tmx_status_t tcp_host(const char *addr, const char *host, struct in_addr *out)
{
    const struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res;
    int rc;

    if (inet_pton(AF_INET, host, out) == 1)
        return TMX_OK;
    rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0) {
        util_error("kvs address '%s': cannot resolve '%s': %s", addr, host,
                   rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        return TMX_ERR_NOT_FOUND;
    }
    *out = ((const struct sockaddr_in *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
    return TMX_OK;
}

/* "HOST:PORT": the host is everything before the last colon. */
static tmx_status_t addr_tcp(const char *addr, const char *hostport, boot_addr_t *out)
{
    const char *colon = strrchr(hostport, ':');
    struct sockaddr_in in = {.sin_family = AF_INET};
    char host[BOOT_ADDR_MAX];
    uint16_t port;
    tmx_status_t st;

    if (colon == NULL || colon == hostport || (size_t)(colon - hostport) >= sizeof(host) ||
        tcp_port(colon + 1, &port) != 0) {
        util_error("kvs address '%s': expected tcp:HOST:PORT, HOST an IPv4 address or a name, "
                   "PORT in 1..65535", addr);
        return TMX_ERR_INVALID;
    }
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = '\0';
    st = tcp_host(addr, host, &in.sin_addr);
    if (st != TMX_OK)
        return st;
    in.sin_port = htons(port);
    memset(out, 0, sizeof(*out));
    memcpy(&out->sa, &in, sizeof(in));
    out->len = sizeof(in);
    return TMX_OK;
}

tmx_status_t boot_addr_parse(const char *addr, boot_addr_t *out)
{
    if (addr == NULL || out == NULL) {
        util_error("boot_addr_parse: NULL argument");
        return TMX_ERR_INVALID;
    }
    if (strncmp(addr, "unix:", 5) == 0)
        return addr_unix(addr + 5, out);
    if (strncmp(addr, "tcp:", 4) == 0)
        return addr_tcp(addr, addr + 4, out);
    util_error("kvs address '%s': expected unix:@NAME, unix:PATH or tcp:HOST:PORT", addr);
    return TMX_ERR_INVALID;
}

int boot_kvs_token_ok(const char *tok, size_t len)
{
    if (len == 0 || len > BOOT_KVS_TOKEN_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (tok[i] <= ' ' || tok[i] > '~')
            return 0;
    }
    return 1;
}

/* ------------------------------------------------------------ connection */

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The server listens before any rank starts: a refusal is final. */
static int connect_unix(const boot_addr_t *a, const char *addr)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0) {
        util_error("kvs socket: %s", strerror(errno));
        return -1;
    }
    /* After EINTR the connection may complete anyway: EISCONN is success. */
    while (connect(fd, (const struct sockaddr *)&a->sa, a->len) != 0 && errno != EISCONN) {
        if (errno != EINTR) {
            util_error("kvs connect to %s: %s", addr, strerror(errno));
            close(fd);
            return -1;
        }
    }
    return fd;
}

/* Waits for a non-blocking connect to finish; returns its errno value. */
static int tcp_wait(int fd, int64_t deadline)
{
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    socklen_t len = sizeof(int);
    int64_t left;
    int err, rc;

    do {
        left = deadline - mono_ms();
        rc = poll(&pfd, 1, left > 0 ? (int)left : 0);
    } while (rc < 0 && errno == EINTR);
    if (rc < 0)
        return errno;
    if (rc == 0)
        return ETIMEDOUT;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        return errno;
    return err;
}

/* One attempt, given until deadline (monotonic ms), so that a host that
 * drops the SYNs cannot hold it for minutes. Returns the connected socket,
 * blocking again, or -1 with errno set. */
static int tcp_try(const boot_addr_t *a, int64_t deadline)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int err, one = 1;

    if (fd < 0)
        return -1;
    err = connect(fd, (const struct sockaddr *)&a->sa, a->len) == 0 ? 0 : errno;
    if (err == EINPROGRESS || err == EINTR)
        err = tcp_wait(fd, deadline);
    if (err == 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
        err = errno;
    if (err != 0) {
        close(fd);
        errno = err;
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* small, awaited lines */
    return fd;
}

/* Tries again until BOOT_TCP_CONNECT_MS have passed: on another host, or in
 * a network namespace, the route to the server may come up after the rank
 * has started. */
static int connect_tcp(const boot_addr_t *a, const char *addr)
{
    int64_t deadline = mono_ms() + BOOT_TCP_CONNECT_MS;
    int pause_ms = 10, fd;

    while ((fd = tcp_try(a, deadline)) < 0) {
        int64_t left = deadline - mono_ms();

        if (left <= 0) {
            util_error("kvs connect to %s: %s (still, after trying for %d ms); if this host "
                       "cannot reach that address, give tmxrun --kvs-addr IP, an address of the "
                       "launching host that it can reach", addr, strerror(errno), BOOT_TCP_CONNECT_MS);
            return -1;
        }
        util_debug("kvs connect to %s: %s; trying again", addr, strerror(errno));
        poll(NULL, 0, (int)(left < pause_ms ? left : pause_ms));
        pause_ms = pause_ms < 200 ? 2 * pause_ms : 200;
    }
    return fd;
}

tmx_status_t boot_kvs_connect(const char *addr, boot_kvs_t **out)
{
    boot_addr_t a;
    boot_kvs_t *kvs;
    tmx_status_t st;

    if (out == NULL) {
        util_error("boot_kvs_connect: NULL output");
        return TMX_ERR_INVALID;
    }
    /* A name that does not resolve is a service we cannot reach, not the
     * "not launched" that TMX_ERR_NOT_FOUND means to boot_job_join. */
    st = boot_addr_parse(addr, &a);
    if (st != TMX_OK)
        return st == TMX_ERR_NOT_FOUND ? TMX_ERR_IO : st;
    kvs = calloc(1, sizeof(*kvs));
    if (kvs == NULL) {
        util_error("kvs connect: out of memory");
        return TMX_ERR_NOMEM;
    }
    kvs->fd = a.sa.ss_family == AF_INET ? connect_tcp(&a, addr) : connect_unix(&a, addr);
    if (kvs->fd < 0) {
        free(kvs);
        return TMX_ERR_IO;
    }
    *out = kvs;
    return TMX_OK;
}

tmx_status_t boot_kvs_close(boot_kvs_t *kvs)
{
    if (kvs == NULL)
        return TMX_OK;
    close(kvs->fd);
    free(kvs);
    return TMX_OK;
}

static tmx_status_t kvs_send(boot_kvs_t *kvs, const char *req, size_t len)
{
    while (len > 0) {
        /* MSG_NOSIGNAL: a dead server is an error to report, not SIGPIPE. */
        ssize_t n = send(kvs->fd, req, len, MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            util_error("kvs send: %s", strerror(errno));
            return TMX_ERR_IO;
        }
        req += n;
        len -= (size_t)n;
    }
    return TMX_OK;
}

/* Lets the owner keep its transports going while the service is slow to
 * answer: a peer may need our ACKs to reach the same fence. */
static void kvs_await(boot_kvs_t *kvs)
{
    struct pollfd pfd = {kvs->fd, POLLIN, 0};

    if (kvs->idle == NULL)
        return;
    while (poll(&pfd, 1, 1) == 0)
        kvs->idle(kvs->idle_arg);
}

void boot_kvs_set_idle(boot_kvs_t *kvs, void (*idle)(void *arg), void *arg)
{
    kvs->idle = idle;
    kvs->idle_arg = arg;
}

static tmx_status_t kvs_fill(boot_kvs_t *kvs)
{
    ssize_t n;

    if (kvs->len == sizeof(kvs->buf)) {
        util_error("kvs reply longer than %zu bytes", sizeof(kvs->buf));
        return TMX_ERR_PROTO;
    }
    kvs_await(kvs);
    do {
        n = recv(kvs->fd, kvs->buf + kvs->len, sizeof(kvs->buf) - kvs->len, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        util_error("kvs recv: %s", strerror(errno));
        return TMX_ERR_IO;
    }
    if (n == 0) {
        util_error("kvs: the server closed the connection");
        return TMX_ERR_IO;
    }
    kvs->len += (size_t)n;
    return TMX_OK;
}

/* Returns the next reply line, NUL-terminated in place of its newline. It
 * stays valid until the next call. */
static tmx_status_t kvs_read_line(boot_kvs_t *kvs, char **line)
{
    char *nl;

    memmove(kvs->buf, kvs->buf + kvs->used, kvs->len - kvs->used);
    kvs->len -= kvs->used;
    kvs->used = 0;
    while ((nl = memchr(kvs->buf, '\n', kvs->len)) == NULL) {
        tmx_status_t st = kvs_fill(kvs);
        if (st != TMX_OK)
            return st;
    }
    *nl = '\0';
    kvs->used = (size_t)(nl - kvs->buf) + 1;
    *line = kvs->buf;
    return TMX_OK;
}

/* Sends one request and reads its reply. An ERR reply is logged and turned
 * into TMX_ERR_PEER_FAILED; anything else is left to the caller. */
static tmx_status_t kvs_call(boot_kvs_t *kvs, const char *req, size_t len, const char *what,
                             char **reply)
{
    tmx_status_t st;

    if (kvs->broken) {
        util_error("kvs %s: the connection failed earlier; close it", what);
        return TMX_ERR_IO;
    }
    st = kvs_send(kvs, req, len);
    if (st == TMX_OK)
        st = kvs_read_line(kvs, reply);
    if (st != TMX_OK) {
        kvs->broken = 1;
        return st;
    }
    if (strncmp(*reply, "ERR", 3) == 0 && ((*reply)[3] == ' ' || (*reply)[3] == '\0')) {
        util_error("kvs %s: the server answered: %s", what, *reply);
        return TMX_ERR_PEER_FAILED;
    }
    return TMX_OK;
}

static tmx_status_t kvs_expect_ok(boot_kvs_t *kvs, const char *req, size_t len, const char *what)
{
    char *reply;
    tmx_status_t st = kvs_call(kvs, req, len, what, &reply);

    if (st != TMX_OK)
        return st;
    if (strcmp(reply, "OK") != 0) {
        util_error("kvs %s: unexpected reply '%.64s'", what, reply);
        kvs->broken = 1;
        return TMX_ERR_PROTO;
    }
    return TMX_OK;
}

static int arg_token_ok(const char *func, const char *what, const char *tok)
{
    if (tok != NULL && boot_kvs_token_ok(tok, strnlen(tok, BOOT_KVS_TOKEN_MAX + 1)))
        return 1;
    util_error("%s: %s must be 1..%d printable characters without spaces", func, what,
               BOOT_KVS_TOKEN_MAX);
    return 0;
}

/* --------------------------------------------------------------- requests */

tmx_status_t boot_kvs_put(boot_kvs_t *kvs, const char *key, const char *value)
{
    char req[BOOT_KVS_LINE_MAX + 1];
    int len;

    if (kvs == NULL) {
        util_error("boot_kvs_put: NULL handle");
        return TMX_ERR_INVALID;
    }
    if (!arg_token_ok("boot_kvs_put", "key", key) || !arg_token_ok("boot_kvs_put", "value", value))
        return TMX_ERR_INVALID;
    len = snprintf(req, sizeof(req), "PUT %s %s\n", key, value);
    return kvs_expect_ok(kvs, req, (size_t)len, "PUT");
}

static tmx_status_t kvs_copy_value(boot_kvs_t *kvs, const char *key, const char *reply,
                                   char *value, size_t cap)
{
    size_t len;

    if (strncmp(reply, "VAL ", 4) != 0 || !boot_kvs_token_ok(reply + 4, strlen(reply + 4))) {
        util_error("kvs GET %s: unexpected reply '%.64s'", key, reply);
        kvs->broken = 1;
        return TMX_ERR_PROTO;
    }
    len = strlen(reply + 4);
    if (len + 1 > cap) {
        util_error("kvs GET %s: value of %zu bytes does not fit in %zu", key, len, cap);
        return TMX_ERR_NO_SPACE;
    }
    memcpy(value, reply + 4, len + 1);
    return TMX_OK;
}

tmx_status_t boot_kvs_get(boot_kvs_t *kvs, const char *key, char *value, size_t cap)
{
    char req[BOOT_KVS_LINE_MAX + 1];
    char *reply;
    tmx_status_t st;
    int len;

    if (kvs == NULL || value == NULL) {
        util_error("boot_kvs_get: NULL argument");
        return TMX_ERR_INVALID;
    }
    if (!arg_token_ok("boot_kvs_get", "key", key))
        return TMX_ERR_INVALID;
    len = snprintf(req, sizeof(req), "GET %s\n", key);
    st = kvs_call(kvs, req, (size_t)len, "GET", &reply);
    if (st != TMX_OK)
        return st;
    return kvs_copy_value(kvs, key, reply, value, cap);
}

tmx_status_t boot_kvs_fence(boot_kvs_t *kvs)
{
    static const char req[] = "FENCE\n";

    if (kvs == NULL) {
        util_error("boot_kvs_fence: NULL handle");
        return TMX_ERR_INVALID;
    }
    return kvs_expect_ok(kvs, req, sizeof(req) - 1, "FENCE");
}

/* -------------------------------------------------------------------- hex */

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

tmx_status_t boot_hex_encode(const void *data, size_t len, char *out, size_t cap)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *p = data;

    if ((data == NULL && len > 0) || out == NULL) {
        util_error("boot_hex_encode: NULL argument");
        return TMX_ERR_INVALID;
    }
    if (len > (SIZE_MAX - 1) / 2 || cap < 2 * len + 1) {
        util_error("boot_hex_encode: %zu bytes need %zu characters, have %zu", len,
                   len <= (SIZE_MAX - 1) / 2 ? 2 * len + 1 : SIZE_MAX, cap);
        return TMX_ERR_NO_SPACE;
    }
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 0xf];
    }
    out[2 * len] = '\0';
    return TMX_OK;
}

tmx_status_t boot_hex_decode(const char *hex, void *out, size_t cap, size_t *len)
{
    unsigned char *p = out;
    size_t n;

    if (hex == NULL || (out == NULL && cap > 0) || len == NULL) {
        util_error("boot_hex_decode: NULL argument");
        return TMX_ERR_INVALID;
    }
    n = strlen(hex);
    if (n % 2 != 0) {
        util_error("hex string of odd length %zu: '%.64s'", n, hex);
        return TMX_ERR_PROTO;
    }
    if (n / 2 > cap) {
        util_error("hex string decodes to %zu bytes; the buffer holds %zu", n / 2, cap);
        return TMX_ERR_NO_SPACE;
    }
    for (size_t i = 0; i < n; i++) {
        if (hex_digit(hex[i]) < 0) {
            util_error("hex string has a non-hex character at %zu: '%.64s'", i, hex);
            return TMX_ERR_PROTO;
        }
    }
    for (size_t i = 0; i < n; i += 2)
        p[i / 2] = (unsigned char)(hex_digit(hex[i]) << 4 | hex_digit(hex[i + 1]));
    *len = n / 2;
    return TMX_OK;
}

/* ------------------------------------------------------------ environment */

static tmx_status_t env_u32(const char *name, uint32_t *out)
{
    const char *s = config_launcher(name);
    uint64_t v = 0;
    size_t i;

    if (s == NULL || *s == '\0') {
        util_error("%s is not set, but TMX_KVS is", name);
        return TMX_ERR_INVALID;
    }
    for (i = 0; s[i] >= '0' && s[i] <= '9' && v <= UINT32_MAX; i++)
        v = v * 10 + (uint64_t)(s[i] - '0');
    if (s[i] != '\0' || v > UINT32_MAX) {
        util_error("%s='%s': expected a decimal number below 2^32", name, s);
        return TMX_ERR_INVALID;
    }
    *out = (uint32_t)v;
    return TMX_OK;
}

static tmx_status_t env_jobid(uint64_t *out)
{
    const char *s = config_launcher("TMX_JOBID");
    uint64_t v = 0;
    size_t i;

    for (i = 0; s != NULL && i < BOOT_JOBID_DIGITS && hex_digit(s[i]) >= 0; i++)
        v = v << 4 | (uint64_t)hex_digit(s[i]);
    if (s == NULL || i != BOOT_JOBID_DIGITS || s[i] != '\0') {
        util_error("TMX_JOBID='%s': expected %d hex digits", s ? s : "(unset)", BOOT_JOBID_DIGITS);
        return TMX_ERR_INVALID;
    }
    *out = v;
    return TMX_OK;
}

static tmx_status_t env_kvs_addr(const char *s, char *out)
{
    size_t len = strlen(s);

    if (len >= BOOT_ADDR_MAX) {
        util_error("TMX_KVS is %zu characters long; the limit is %d", len, BOOT_ADDR_MAX - 1);
        return TMX_ERR_INVALID;
    }
    if (!(strncmp(s, "unix:", 5) == 0 && s[5] != '\0') && strncmp(s, "tcp:", 4) != 0) {
        util_error("TMX_KVS='%s': expected unix:@NAME, unix:PATH or tcp:HOST:PORT", s);
        return TMX_ERR_INVALID;
    }
    memcpy(out, s, len + 1);
    return TMX_OK;
}

tmx_status_t boot_env(boot_env_t *env)
{
    const char *kvs = config_launcher("TMX_KVS");
    boot_env_t e;

    if (env == NULL) {
        util_error("boot_env: NULL output");
        return TMX_ERR_INVALID;
    }
    if (kvs == NULL)
        return TMX_ERR_NOT_FOUND;
    if (env_kvs_addr(kvs, e.kvs_addr) != TMX_OK || env_u32("TMX_RANK", &e.rank) != TMX_OK ||
        env_u32("TMX_SIZE", &e.size) != TMX_OK || env_jobid(&e.jobid) != TMX_OK) {
        return TMX_ERR_INVALID;
    }
    if (e.size == 0 || e.rank >= e.size) {
        util_error("TMX_RANK=%u, TMX_SIZE=%u: need 0 <= rank < size", e.rank, e.size);
        return TMX_ERR_INVALID;
    }
    *env = e;
    return TMX_OK;
}
