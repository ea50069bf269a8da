/* boot_env parsing, the hex helpers, address parsing, and the key-value
 * client against a scripted server on an abstract socket and on TCP. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "unit.h"

#include "boot/boot.h"

/* ------------------------------------------------------------- boot_env */

/* NULL unsets a variable. */
static void set_env(const char *rank, const char *size, const char *jobid, const char *kvs)
{
    const char *names[] = {"TMX_RANK", "TMX_SIZE", "TMX_JOBID", "TMX_KVS"};
    const char *values[] = {rank, size, jobid, kvs};

    for (int i = 0; i < 4; i++) {
        if (values[i] != NULL)
            setenv(names[i], values[i], 1);
        else
            unsetenv(names[i]);
    }
}

static void set_good_env(void)
{
    set_env("3", "8", "0123456789abcDEF", "unix:@tmx-kvs-1-2");
}

static void expect_env(tmx_status_t want)
{
    boot_env_t e;

    memset(&e, 0x5a, sizeof(e));
    assert_int_equal(boot_env(&e), want);
    if (want != TMX_OK) {
        for (size_t i = 0; i < sizeof(e); i++)
            assert_int_equal(((unsigned char *)&e)[i], 0x5a); /* untouched */
    }
}

static void test_env_good(void **state)
{
    boot_env_t e;

    set_good_env();
    assert_int_equal(boot_env(&e), TMX_OK);
    assert_int_equal(e.rank, 3);
    assert_int_equal(e.size, 8);
    assert_true(e.jobid == 0x0123456789abcdefULL);
    assert_string_equal(e.kvs_addr, "unix:@tmx-kvs-1-2");
    set_env("0", "1", "ffffffffffffffff", "tcp:node1:4000"); /* parsed later, by connect */
    assert_int_equal(boot_env(&e), TMX_OK);
    assert_int_equal(e.rank, 0);
    assert_int_equal(e.size, 1);
    assert_true(e.jobid == UINT64_MAX);
    set_env("4294967294", "4294967295", "0000000000000000", "unix:/tmp/x");
    assert_int_equal(boot_env(&e), TMX_OK);
    assert_int_equal(e.rank, 4294967294u);
}

static void test_env_not_launched(void **state)
{
    set_env(NULL, NULL, NULL, NULL);
    expect_env(TMX_ERR_NOT_FOUND);
    set_env("0", "1", "0123456789abcdef", NULL); /* TMX_KVS decides */
    expect_env(TMX_ERR_NOT_FOUND);
    assert_int_equal(boot_env(NULL), TMX_ERR_INVALID);
}

static void test_env_missing(void **state)
{
    set_env(NULL, "8", "0123456789abcdef", "unix:@k");
    expect_env(TMX_ERR_INVALID);
    set_env("1", NULL, "0123456789abcdef", "unix:@k");
    expect_env(TMX_ERR_INVALID);
    set_env("1", "8", NULL, "unix:@k");
    expect_env(TMX_ERR_INVALID);
    set_env("", "8", "0123456789abcdef", "unix:@k");
    expect_env(TMX_ERR_INVALID);
}

static void test_env_bad_numbers(void **state)
{
    static const char *const bad[] = {"-1", "+1", " 1", "1 ", "1x", "0x10", "abc",
                                      "4294967296", "99999999999999999999999"};

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        set_env(bad[i], "8", "0123456789abcdef", "unix:@k");
        expect_env(TMX_ERR_INVALID);
        set_env("0", bad[i], "0123456789abcdef", "unix:@k");
        expect_env(TMX_ERR_INVALID);
    }
}

static void test_env_rank_size(void **state)
{
    set_env("8", "8", "0123456789abcdef", "unix:@k");
    expect_env(TMX_ERR_INVALID);
    set_env("9", "8", "0123456789abcdef", "unix:@k");
    expect_env(TMX_ERR_INVALID);
    set_env("0", "0", "0123456789abcdef", "unix:@k");
    expect_env(TMX_ERR_INVALID);
    set_env("7", "8", "0123456789abcdef", "unix:@k");
    expect_env(TMX_OK);
}

static void test_env_bad_jobid(void **state)
{
    static const char *const bad[] = {"", "0123456789abcde", "0123456789abcdef0",
                                      "0123456789abcdeg", "0x23456789abcdef", " 123456789abcdef",
                                      "0123456789abcde "};

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        set_env("0", "1", bad[i], "unix:@k");
        expect_env(TMX_ERR_INVALID);
    }
}

static void test_env_bad_kvs(void **state)
{
    char longaddr[BOOT_ADDR_MAX + 8];

    static const char *const bad[] = {"", "unix:", "udp:x:1", "@tmx", "UNIX:@x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        set_env("0", "1", "0123456789abcdef", bad[i]);
        expect_env(TMX_ERR_INVALID);
    }
    memset(longaddr, 'a', sizeof(longaddr));
    memcpy(longaddr, "unix:@", 6);
    longaddr[BOOT_ADDR_MAX] = '\0'; /* one character too many */
    set_env("0", "1", "0123456789abcdef", longaddr);
    expect_env(TMX_ERR_INVALID);
    longaddr[BOOT_ADDR_MAX - 1] = '\0';
    set_env("0", "1", "0123456789abcdef", longaddr);
    expect_env(TMX_OK);
}

/* ------------------------------------------------------------------ hex */

static void test_hex_roundtrip(void **state)
{
    unsigned char all[256], back[256];
    char hex[513];
    size_t len = 0;

    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)i;
    assert_int_equal(boot_hex_encode(all, sizeof(all), hex, sizeof(hex)), TMX_OK);
    assert_int_equal(strlen(hex), 512);
    assert_memory_equal(hex, "000102", 6);
    assert_string_equal(hex + 500, "fafbfcfdfeff");
    assert_int_equal(boot_hex_decode(hex, back, sizeof(back), &len), TMX_OK);
    assert_int_equal(len, 256);
    assert_memory_equal(all, back, 256);
}

static void test_hex_empty_and_case(void **state)
{
    unsigned char b[4];
    char hex[4] = "zz";
    size_t len = 9;

    assert_int_equal(boot_hex_encode(NULL, 0, hex, 1), TMX_OK);
    assert_string_equal(hex, "");
    assert_int_equal(boot_hex_decode("", b, 0, &len), TMX_OK);
    assert_int_equal(len, 0);
    assert_int_equal(boot_hex_decode("aBcD", b, sizeof(b), &len), TMX_OK);
    assert_int_equal(len, 2);
    assert_int_equal(b[0], 0xab);
    assert_int_equal(b[1], 0xcd);
}

static void test_hex_encode_no_space(void **state)
{
    const unsigned char data[3] = {1, 2, 3};
    char out[8] = "xxxxxxx";

    assert_int_equal(boot_hex_encode(data, 3, out, 6), TMX_ERR_NO_SPACE); /* needs 7 */
    assert_string_equal(out, "xxxxxxx");
    assert_int_equal(boot_hex_encode(data, 3, out, 7), TMX_OK);
    assert_string_equal(out, "010203");
    assert_int_equal(boot_hex_encode(data, SIZE_MAX / 2 + 1, out, sizeof(out)),
                     TMX_ERR_NO_SPACE); /* 2*len would wrap */
}

static void test_hex_decode_bad(void **state)
{
    static const char *const bad[] = {"a", "abc", "0g", "g0", "0 ", " 0", "0x12", "12\n"};
    unsigned char out[8];
    size_t len = 77;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(out, 0xee, sizeof(out));
        assert_int_equal(boot_hex_decode(bad[i], out, sizeof(out), &len), TMX_ERR_PROTO);
        assert_int_equal(len, 77);
        assert_int_equal(out[0], 0xee); /* nothing written before the bad digit is found */
    }
    assert_int_equal(boot_hex_decode("010203", out, 2, &len), TMX_ERR_NO_SPACE);
    assert_int_equal(len, 77);
}

static void test_hex_null(void **state)
{
    unsigned char b[2];
    char hex[8];
    size_t len;

    assert_int_equal(boot_hex_encode(NULL, 1, hex, sizeof(hex)), TMX_ERR_INVALID);
    assert_int_equal(boot_hex_encode(b, 1, NULL, 0), TMX_ERR_INVALID);
    assert_int_equal(boot_hex_decode(NULL, b, sizeof(b), &len), TMX_ERR_INVALID);
    assert_int_equal(boot_hex_decode("00", NULL, 1, &len), TMX_ERR_INVALID);
    assert_int_equal(boot_hex_decode("00", b, sizeof(b), NULL), TMX_ERR_INVALID);
}

/* -------------------------------------------------- addresses and tokens */

static void test_addr_parse(void **state)
{
    boot_addr_t a;
    const struct sockaddr_un *un = (const struct sockaddr_un *)&a.sa;

    assert_int_equal(boot_addr_parse("unix:@tmx-kvs-1", &a), TMX_OK);
    assert_int_equal(un->sun_family, AF_UNIX);
    assert_int_equal(a.len, offsetof(struct sockaddr_un, sun_path) + strlen("@tmx-kvs-1"));
    assert_int_equal(un->sun_path[0], '\0');
    assert_memory_equal(un->sun_path + 1, "tmx-kvs-1", 9);
    assert_int_equal(boot_addr_parse("unix:/tmp/s", &a), TMX_OK);
    assert_int_equal(a.len, offsetof(struct sockaddr_un, sun_path) + strlen("/tmp/s") + 1);
    assert_string_equal(un->sun_path, "/tmp/s");
    assert_int_equal(boot_addr_parse("unix:", &a), TMX_ERR_INVALID);
    assert_int_equal(boot_addr_parse("unix:@", &a), TMX_ERR_INVALID);
    assert_int_equal(boot_addr_parse("http://x", &a), TMX_ERR_INVALID);
    assert_int_equal(boot_addr_parse(NULL, &a), TMX_ERR_INVALID);
}

static void expect_tcp(const char *addr, const char *ip, unsigned port)
{
    boot_addr_t a;
    const struct sockaddr_in *in = (const struct sockaddr_in *)&a.sa;
    char shown[INET_ADDRSTRLEN];

    assert_int_equal(boot_addr_parse(addr, &a), TMX_OK);
    assert_int_equal(a.sa.ss_family, AF_INET);
    assert_int_equal(a.len, sizeof(struct sockaddr_in));
    assert_int_equal(ntohs(in->sin_port), port);
    assert_non_null(inet_ntop(AF_INET, &in->sin_addr, shown, sizeof(shown)));
    assert_string_equal(shown, ip);
}

static void test_addr_tcp(void **state)
{
    static const char *const bad[] = {
        "tcp:", "tcp:host", "tcp::4000", "tcp:1.2.3.4:", "tcp:1.2.3.4:0", "tcp:1.2.3.4:65536",
        "tcp:1.2.3.4:99999999999", "tcp:1.2.3.4:+80", "tcp:1.2.3.4:-1", "tcp:1.2.3.4:80x",
        "tcp:1.2.3.4: 80", "tcp:1.2.3.4:0x50",
    };
    boot_addr_t a;

    expect_tcp("tcp:10.1.2.3:4000", "10.1.2.3", 4000);
    expect_tcp("tcp:0.0.0.0:1", "0.0.0.0", 1);
    expect_tcp("tcp:255.255.255.255:65535", "255.255.255.255", 65535);
    expect_tcp("tcp:localhost:80", "127.0.0.1", 80); /* a name, through getaddrinfo */
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&a, 0x5a, sizeof(a));
        assert_int_equal(boot_addr_parse(bad[i], &a), TMX_ERR_INVALID);
        assert_int_equal(((unsigned char *)&a)[0], 0x5a); /* untouched */
    }
    /* (No check of a name that does not resolve: it would ask DNS, which
     * may be slow or missing where tests run.) */
}

static void test_addr_too_long(void **state)
{
    char addr[5 + sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
    boot_addr_t a;
    size_t max = sizeof(((struct sockaddr_un *)0)->sun_path) - 1; /* '@' or path + NUL */

    memset(addr, 'p', sizeof(addr));
    memcpy(addr, "unix:@", 6);
    addr[5 + max] = '\0';
    assert_int_equal(boot_addr_parse(addr, &a), TMX_OK);
    addr[5 + max] = 'p';
    addr[5 + max + 1] = '\0';
    assert_int_equal(boot_addr_parse(addr, &a), TMX_ERR_INVALID);
}

static void test_token_ok(void **state)
{
    static char big[BOOT_KVS_TOKEN_MAX + 1];

    assert_true(boot_kvs_token_ok("a", 1));
    assert_true(boot_kvs_token_ok("!~{}", 4));
    assert_false(boot_kvs_token_ok("", 0));
    assert_false(boot_kvs_token_ok("a b", 3));
    assert_false(boot_kvs_token_ok("a\tb", 3));
    assert_false(boot_kvs_token_ok("a\0b", 3));
    assert_false(boot_kvs_token_ok("\x7f", 1));
    assert_false(boot_kvs_token_ok("\xc3\xa9", 2));
    memset(big, 'x', sizeof(big));
    assert_true(boot_kvs_token_ok(big, BOOT_KVS_TOKEN_MAX));
    assert_false(boot_kvs_token_ok(big, BOOT_KVS_TOKEN_MAX + 1));
}

/* ------------------------------------------------ client, scripted server */

/* A listening socket, one client connected to it, and the server's end. The
 * client blocks on each reply, so every test writes the replies first. */
typedef struct fake {
    int listen_fd;
    int fd;
    boot_kvs_t *kvs;
    char addr[64];
} fake_t;

static fake_t *fake_connect(fake_t *f)
{
    assert_int_equal(listen(f->listen_fd, 4), 0);
    assert_int_equal(boot_kvs_connect(f->addr, &f->kvs), TMX_OK);
    f->fd = accept(f->listen_fd, NULL, NULL);
    assert_true(f->fd >= 0);
    return f;
}

static int fake_setup(void **state)
{
    fake_t *f = calloc(1, sizeof(*f));
    boot_addr_t a;

    assert_non_null(f);
    snprintf(f->addr, sizeof(f->addr), "unix:@tmx-kvs-test-%d", (int)getpid());
    assert_int_equal(boot_addr_parse(f->addr, &a), TMX_OK);
    f->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(f->listen_fd >= 0);
    assert_int_equal(bind(f->listen_fd, (struct sockaddr *)&a.sa, a.len), 0);
    *state = fake_connect(f);
    return 0;
}

/* A TCP socket bound to 127.0.0.1 at a port the kernel picks, not listening
 * yet (a connection to it is refused); its port in *port. */
static int tcp_bound(unsigned *port)
{
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(in);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&in, sizeof(in)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&in, &len), 0);
    *port = ntohs(in.sin_port);
    return fd;
}

/* host: "127.0.0.1" or "localhost". */
static int fake_setup_tcp_host(void **state, const char *host)
{
    fake_t *f = calloc(1, sizeof(*f));
    unsigned port;

    assert_non_null(f);
    f->listen_fd = tcp_bound(&port);
    snprintf(f->addr, sizeof(f->addr), "tcp:%s:%u", host, port);
    *state = fake_connect(f);
    return 0;
}

static int fake_setup_tcp(void **state)
{
    return fake_setup_tcp_host(state, "127.0.0.1");
}

static int fake_setup_tcp_name(void **state)
{
    return fake_setup_tcp_host(state, "localhost");
}

static int fake_teardown(void **state)
{
    fake_t *f = *state;

    assert_int_equal(boot_kvs_close(f->kvs), TMX_OK);
    if (f->fd >= 0)
        close(f->fd);
    close(f->listen_fd);
    free(f);
    return 0;
}

static void serve(fake_t *f, const char *replies)
{
    size_t len = strlen(replies);

    assert_int_equal(write(f->fd, replies, len), (ssize_t)len);
}

/* Checks that the client sent exactly req. */
static void expect_req(fake_t *f, const char *req)
{
    char buf[BOOT_KVS_LINE_MAX];
    size_t len = strlen(req), n = 0;

    while (n < len) {
        ssize_t got = read(f->fd, buf + n, len - n);
        assert_true(got > 0);
        n += (size_t)got;
    }
    assert_memory_equal(buf, req, len);
}

static void test_client_put_get_fence(void **state)
{
    fake_t *f = *state;
    char value[16];

    serve(f, "OK\nVAL 0aff\nOK\n"); /* three replies in one chunk */
    assert_int_equal(boot_kvs_put(f->kvs, "addr.0", "0aff"), TMX_OK);
    assert_int_equal(boot_kvs_get(f->kvs, "addr.0", value, sizeof(value)), TMX_OK);
    assert_string_equal(value, "0aff");
    assert_int_equal(boot_kvs_fence(f->kvs), TMX_OK);
    expect_req(f, "PUT addr.0 0aff\nGET addr.0\nFENCE\n");
}

static void test_client_get_no_space(void **state)
{
    fake_t *f = *state;
    char value[4] = "xyz";

    serve(f, "VAL abcd\nVAL abc\n");
    assert_int_equal(boot_kvs_get(f->kvs, "k", value, sizeof(value)), TMX_ERR_NO_SPACE);
    assert_string_equal(value, "xyz");
    assert_int_equal(boot_kvs_get(f->kvs, "k", value, sizeof(value)), TMX_OK);
    assert_string_equal(value, "abc");
}

static void test_client_err_reply(void **state)
{
    fake_t *f = *state;
    char value[8];

    serve(f, "ERR rank 1 exited with status 3\nERR\nOK\n");
    assert_int_equal(boot_kvs_fence(f->kvs), TMX_ERR_PEER_FAILED);
    assert_int_equal(boot_kvs_get(f->kvs, "k", value, sizeof(value)), TMX_ERR_PEER_FAILED);
    assert_int_equal(boot_kvs_put(f->kvs, "k", "v"), TMX_OK); /* still in step */
}

static void test_client_bad_reply(void **state)
{
    static const char *const bad[] = {"WHAT\n", "OK \n", "VAL\n", "VAL \n", "VAL a b\n",
                                      "ERROR x\n", "ok\n"};

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fake_t *f = *state;
        char value[8];

        serve(f, bad[i]);
        if (strncmp(bad[i], "VAL", 3) == 0)
            assert_int_equal(boot_kvs_get(f->kvs, "k", value, sizeof(value)), TMX_ERR_PROTO);
        else
            assert_int_equal(boot_kvs_fence(f->kvs), TMX_ERR_PROTO);
        serve(f, "OK\n");
        assert_int_equal(boot_kvs_fence(f->kvs), TMX_ERR_IO); /* out of step: refused */
        fake_teardown(state);
        fake_setup(state);
    }
}

static void test_client_reply_too_long(void **state)
{
    fake_t *f = *state;
    char big[BOOT_KVS_LINE_MAX + 16];
    char value[8];

    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    memcpy(big, "VAL ", 4);
    serve(f, big);
    assert_int_equal(boot_kvs_get(f->kvs, "k", value, sizeof(value)), TMX_ERR_PROTO);
}

static void test_client_server_gone(void **state)
{
    fake_t *f = *state;

    serve(f, "OK"); /* no newline: a reply cut short */
    close(f->fd);
    f->fd = -1;
    assert_int_equal(boot_kvs_fence(f->kvs), TMX_ERR_IO);
    assert_int_equal(boot_kvs_put(f->kvs, "k", "v"), TMX_ERR_IO);
}

static void test_client_bad_args(void **state)
{
    fake_t *f = *state;
    char *big = malloc(BOOT_KVS_TOKEN_MAX + 2);
    char value[8];

    assert_non_null(big);
    memset(big, 'k', BOOT_KVS_TOKEN_MAX + 1);
    big[BOOT_KVS_TOKEN_MAX + 1] = '\0';
    assert_int_equal(boot_kvs_put(NULL, "k", "v"), TMX_ERR_INVALID);
    assert_int_equal(boot_kvs_put(f->kvs, NULL, "v"), TMX_ERR_INVALID);
    assert_int_equal(boot_kvs_put(f->kvs, "k", NULL), TMX_ERR_INVALID);
    assert_int_equal(boot_kvs_put(f->kvs, "", "v"), TMX_ERR_INVALID);
    assert_int_equal(boot_kvs_put(f->kvs, "a b", "v"), TMX_ERR_INVALID);
    assert_int_equal(boot_kvs_put(f->kvs, "k", "v\n"), TMX_ERR_INVALID);
    assert_int_equal(boot_kvs_put(f->kvs, big, "v"), TMX_ERR_INVALID);
    assert_int_equal(boot_kvs_put(f->kvs, "k", big), TMX_ERR_INVALID);
    assert_int_equal(boot_kvs_get(f->kvs, big, value, sizeof(value)), TMX_ERR_INVALID);
    assert_int_equal(boot_kvs_get(f->kvs, "k", NULL, 8), TMX_ERR_INVALID);
    assert_int_equal(boot_kvs_get(NULL, "k", value, sizeof(value)), TMX_ERR_INVALID);
    assert_int_equal(boot_kvs_fence(NULL), TMX_ERR_INVALID);
    assert_int_equal(boot_kvs_close(NULL), TMX_OK);
    big[BOOT_KVS_TOKEN_MAX] = '\0'; /* exactly the limit is fine */
    serve(f, "OK\n");
    assert_int_equal(boot_kvs_put(f->kvs, big, big), TMX_OK);
    free(big);
}

static void test_client_connect_errors(void **state)
{
    boot_kvs_t *kvs = (boot_kvs_t *)(uintptr_t)1;
    char addr[64];

    snprintf(addr, sizeof(addr), "unix:@tmx-kvs-test-nobody-%d", (int)getpid());
    assert_int_equal(boot_kvs_connect(addr, &kvs), TMX_ERR_IO);
    assert_int_equal(boot_kvs_connect("tcp:localhost", &kvs), TMX_ERR_INVALID);
    assert_int_equal(boot_kvs_connect("tcp:no-such-host.invalid:1", &kvs), TMX_ERR_IO);
    assert_int_equal(boot_kvs_connect("nonsense", &kvs), TMX_ERR_INVALID);
    assert_int_equal(boot_kvs_connect(NULL, &kvs), TMX_ERR_INVALID);
    assert_true(kvs == (boot_kvs_t *)(uintptr_t)1); /* untouched */
    assert_int_equal(boot_kvs_connect(addr, NULL), TMX_ERR_INVALID);
}

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The server starts listening 300 ms after the client first tries. */
static void test_client_tcp_retries(void **state)
{
    boot_kvs_t *kvs = NULL;
    char addr[64];
    unsigned port;
    int fd = tcp_bound(&port), status;
    int64_t t0 = mono_ms();
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0) {
        usleep(300 * 1000);
        _exit(listen(fd, 4) == 0 ? 0 : 1); /* the socket is shared: it stays listening */
    }
    snprintf(addr, sizeof(addr), "tcp:127.0.0.1:%u", port);
    assert_int_equal(boot_kvs_connect(addr, &kvs), TMX_OK);
    assert_true(mono_ms() - t0 >= 250);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(status, 0);
    boot_kvs_close(kvs);
    close(fd);
}

/* Refused all along: gives up after BOOT_TCP_CONNECT_MS, not sooner. */
static void test_client_tcp_gives_up(void **state)
{
    boot_kvs_t *kvs = (boot_kvs_t *)(uintptr_t)1;
    char addr[64];
    unsigned port;
    int fd = tcp_bound(&port);
    int64_t t0 = mono_ms(), took;

    snprintf(addr, sizeof(addr), "tcp:127.0.0.1:%u", port);
    assert_int_equal(boot_kvs_connect(addr, &kvs), TMX_ERR_IO);
    took = mono_ms() - t0;
    assert_true(took >= BOOT_TCP_CONNECT_MS - 50);
    assert_true(took < BOOT_TCP_CONNECT_MS + 2000);
    assert_true(kvs == (boot_kvs_t *)(uintptr_t)1);
    close(fd);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_good),
        cmocka_unit_test(test_env_not_launched),
        cmocka_unit_test(test_env_missing),
        cmocka_unit_test(test_env_bad_numbers),
        cmocka_unit_test(test_env_rank_size),
        cmocka_unit_test(test_env_bad_jobid),
        cmocka_unit_test(test_env_bad_kvs),
        cmocka_unit_test(test_hex_roundtrip),
        cmocka_unit_test(test_hex_empty_and_case),
        cmocka_unit_test(test_hex_encode_no_space),
        cmocka_unit_test(test_hex_decode_bad),
        cmocka_unit_test(test_hex_null),
        cmocka_unit_test(test_addr_parse),
        cmocka_unit_test(test_addr_tcp),
        cmocka_unit_test(test_addr_too_long),
        cmocka_unit_test(test_token_ok),
        cmocka_unit_test_setup_teardown(test_client_put_get_fence, fake_setup, fake_teardown),
        cmocka_unit_test_setup_teardown(test_client_get_no_space, fake_setup, fake_teardown),
        cmocka_unit_test_setup_teardown(test_client_err_reply, fake_setup, fake_teardown),
        cmocka_unit_test_setup_teardown(test_client_bad_reply, fake_setup, fake_teardown),
        cmocka_unit_test_setup_teardown(test_client_reply_too_long, fake_setup, fake_teardown),
        cmocka_unit_test_setup_teardown(test_client_server_gone, fake_setup, fake_teardown),
        cmocka_unit_test_setup_teardown(test_client_bad_args, fake_setup, fake_teardown),
        cmocka_unit_test(test_client_connect_errors),
        cmocka_unit_test_setup_teardown(test_client_put_get_fence, fake_setup_tcp, fake_teardown),
        cmocka_unit_test_setup_teardown(test_client_put_get_fence, fake_setup_tcp_name,
                                        fake_teardown),
        cmocka_unit_test_setup_teardown(test_client_server_gone, fake_setup_tcp, fake_teardown),
        cmocka_unit_test(test_client_tcp_retries),
        cmocka_unit_test(test_client_tcp_gives_up),
    };

    return UNIT_MAIN(argc, argv, tests);
}
