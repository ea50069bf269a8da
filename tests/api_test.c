/* The public API over the self transport: every call, every error path. */
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "unit.h"

#include "core/core.h"
#include "proto/proto.h"
#include "proto/wire.h"
#include "reg/reg.h"
#include "tl/shm/shm.h"
#include "tl/shm/shm_layout.h"
#include "tl/tl_emu.h"
#include "tl/udp/udp_wire.h"
#include "util/crc32c.h"
#include <arpa/inet.h>
#include <sys/socket.h>
#include <time.h>

#include "tmx.h"
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif

#define SELF_EAGER 8192

typedef struct fixture {
    tmx_context_h ctx;
    tmx_peer_t self;
} fixture_t;

static int setup_ctx(void **state, tmx_thread_mode_t mode)
{
    fixture_t *f = calloc(1, sizeof(*f));
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_THREAD_MODE, .thread_mode = mode};
    unsigned char addr[TMX_ADDRESS_MAX];
    size_t len = sizeof(addr);

    assert_non_null(f);
    assert_int_equal(tmx_context_create(&p, &f->ctx), TMX_OK);
    assert_int_equal(tmx_address(f->ctx, addr, &len), TMX_OK);
    assert_int_equal(tmx_peer_add(f->ctx, addr, len, &f->self), TMX_OK);
    assert_int_equal(f->self, 0);
    *state = f;
    return 0;
}

static int setup(void **state)
{
    return setup_ctx(state, TMX_THREAD_SINGLE);
}

static int setup_mt(void **state)
{
    return setup_ctx(state, TMX_THREAD_MULTIPLE);
}

static int teardown(void **state)
{
    fixture_t *f = *state;

    assert_int_equal(tmx_context_destroy(f->ctx), TMX_OK);
    free(f);
    return 0;
}

/* Reads exactly one completion, driving progress for a bounded time. */
static tmx_completion_t cq_one(tmx_context_h ctx)
{
    tmx_completion_t c;
    size_t n = 0;

    for (int i = 0; i < 100000 && n == 0; i++)
        assert_int_equal(tmx_cq_read(ctx, &c, 1, &n), TMX_OK);
    assert_int_equal(n, 1);
    return c;
}

static void cq_none(tmx_context_h ctx)
{
    tmx_completion_t c;
    size_t n = 1;

    for (int i = 0; i < 10; i++)
        tmx_progress(ctx);
    assert_int_equal(tmx_cq_read(ctx, &c, 1, &n), TMX_OK);
    assert_int_equal(n, 0);
}

static tmx_op_params_t with_ctx(void *uctx)
{
    tmx_op_params_t p = {.field_mask = TMX_OP_FIELD_USER_CONTEXT, .user_context = uctx};
    return p;
}

static void fill(unsigned char *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (unsigned char)(i * 131 + seed);
}

static void check(const unsigned char *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++) {
        if (buf[i] != (unsigned char)(i * 131 + seed))
            fail_msg("byte %zu of %zu: got %u", i, len, buf[i]);
    }
}

/* ------------------------------------------------------------- basics */

/* tmx_host_sweep takes a job's identity as TMX_JOBID gives it, or NULL;
 * anything else is refused, with a log line, and nothing is removed. */
static void test_host_sweep_args(void **state)
{
    (void)state;
    assert_true(tmx_host_sweep(NULL) >= 0);
    assert_true(tmx_host_sweep("00000000deadbeef") >= 0);
    assert_int_equal(tmx_host_sweep(""), TMX_ERR_INVALID);
    assert_int_equal(tmx_host_sweep("deadbeef"), TMX_ERR_INVALID);          /* too short */
    assert_int_equal(tmx_host_sweep("00000000deadbeef0"), TMX_ERR_INVALID); /* too long */
    assert_int_equal(tmx_host_sweep("00000000deadbeeg"), TMX_ERR_INVALID);  /* not hex */
    assert_int_equal(tmx_host_sweep("0000000000000000"), TMX_ERR_INVALID);  /* no job */
}

static void test_version_strerror(void **state)
{
    assert_int_equal(tmx_version(), TMX_VERSION);
    for (int s = TMX_ERR_INTERNAL; s <= TMX_INPROGRESS; s++) {
        assert_non_null(tmx_strerror((tmx_status_t)s));
        assert_string_not_equal(tmx_strerror((tmx_status_t)s), "unknown status");
    }
    assert_string_equal(tmx_strerror((tmx_status_t)-999), "unknown status");
}

static void test_context_bad_params(void **state)
{
    tmx_context_h ctx = NULL;
    tmx_context_params_t p = {0};

    assert_int_equal(tmx_context_create(NULL, NULL), TMX_ERR_INVALID);
    p.field_mask = 1u << 30;
    assert_int_equal(tmx_context_create(&p, &ctx), TMX_ERR_INVALID);
    p.field_mask = TMX_CONTEXT_FIELD_THREAD_MODE;
    p.thread_mode = (tmx_thread_mode_t)7;
    assert_int_equal(tmx_context_create(&p, &ctx), TMX_ERR_INVALID);
    p.field_mask = TMX_CONTEXT_FIELD_TRANSPORTS;
    p.transports = "nosuch";
    assert_int_equal(tmx_context_create(&p, &ctx), TMX_ERR_INVALID);
    p.transports = NULL;
    assert_int_equal(tmx_context_create(&p, &ctx), TMX_ERR_INVALID);
    p.transports = " , ";
    assert_int_equal(tmx_context_create(&p, &ctx), TMX_ERR_INVALID);
    assert_null(ctx);
    assert_int_equal(tmx_context_destroy(NULL), TMX_OK);
}

static void test_context_params_ok(void **state)
{
    tmx_context_h ctx = NULL;
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_TRANSPORTS | TMX_CONTEXT_FIELD_NAME,
                              .transports = "self",
                              .name = "a-rather-long-context-name-that-gets-cut"};

    assert_int_equal(tmx_context_create(&p, &ctx), TMX_OK);
    assert_non_null(ctx);
    assert_int_equal(tmx_context_destroy(ctx), TMX_OK);
    assert_int_equal(tmx_context_create(NULL, &ctx), TMX_OK);
    assert_int_equal(tmx_context_destroy(ctx), TMX_OK);
}

/* A process whose TMX_KVS names a service it cannot reach is in a job it
 * cannot join: creating a joining context fails, however the address
 * fails (refused, or a host name that does not resolve), rather than
 * making a context that runs as if the process were alone. */
static void test_context_join_unreachable(void **state)
{
    static const char *const addrs[] = {"unix:@tmx-api-test-nobody", "tcp:no-such-host.invalid:1"};
    tmx_context_h ctx = NULL;

    setenv("TMX_RANK", "0", 1);
    setenv("TMX_SIZE", "2", 1);
    setenv("TMX_JOBID", "00000000deadbeef", 1);
    for (size_t i = 0; i < sizeof(addrs) / sizeof(addrs[0]); i++) {
        setenv("TMX_KVS", addrs[i], 1);
        assert_int_not_equal(tmx_context_create(NULL, &ctx), TMX_OK);
        assert_null(ctx);
    }
    unsetenv("TMX_KVS");
    unsetenv("TMX_RANK");
    unsetenv("TMX_SIZE");
    unsetenv("TMX_JOBID");
}

static void test_address(void **state)
{
    fixture_t *f = *state;
    unsigned char addr[TMX_ADDRESS_MAX];
    size_t len = 2;
    uint32_t count = 0;
    tmx_peer_t p;

    assert_int_equal(tmx_address(NULL, addr, &len), TMX_ERR_INVALID);
    assert_int_equal(tmx_address(f->ctx, addr, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_address(f->ctx, addr, &len), TMX_ERR_NO_SPACE);
    assert_true(len > 2 && len <= TMX_ADDRESS_MAX);
    assert_int_equal(tmx_address(f->ctx, NULL, &len), TMX_ERR_NO_SPACE);
    assert_int_equal(tmx_address(f->ctx, addr, &len), TMX_OK);
    assert_int_equal(tmx_peer_add(f->ctx, addr, len, &p), TMX_OK);
    assert_int_equal(p, 1);
    assert_int_equal(tmx_peer_count(f->ctx, &count), TMX_OK);
    assert_int_equal(count, 2);
    assert_int_equal(tmx_peer_count(NULL, &count), TMX_ERR_INVALID);
    assert_int_equal(tmx_peer_count(f->ctx, NULL), TMX_ERR_INVALID);
}

static void test_peer_add_bad(void **state)
{
    fixture_t *f = *state;
    unsigned char addr[TMX_ADDRESS_MAX];
    unsigned char junk[64];
    size_t len = sizeof(addr);
    tmx_peer_t p;

    assert_int_equal(tmx_address(f->ctx, addr, &len), TMX_OK);
    assert_int_equal(tmx_peer_add(NULL, addr, len, &p), TMX_ERR_INVALID);
    assert_int_equal(tmx_peer_add(f->ctx, NULL, len, &p), TMX_ERR_INVALID);
    assert_int_equal(tmx_peer_add(f->ctx, addr, len, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_peer_add(f->ctx, addr, 3, &p), TMX_ERR_INVALID);
    assert_int_equal(tmx_peer_add(f->ctx, addr, TMX_ADDRESS_MAX + 1, &p), TMX_ERR_INVALID);
    memset(junk, 0xa5, sizeof(junk));
    assert_int_equal(tmx_peer_add(f->ctx, junk, sizeof(junk), &p), TMX_ERR_INVALID);
    /* A well-formed address of another context that shares no transport
     * with this one (self reaches only its own context): unreachable. */
    {
        tmx_context_h other;
        tmx_context_params_t op = {.field_mask = TMX_CONTEXT_FIELD_TRANSPORTS, .transports = "self"};
        assert_int_equal(tmx_context_create(&op, &other), TMX_OK);
        len = sizeof(addr);
        assert_int_equal(tmx_address(other, addr, &len), TMX_OK);
        assert_int_equal(tmx_context_destroy(other), TMX_OK);
    }
    assert_int_equal(tmx_peer_add(f->ctx, addr, len, &p), TMX_ERR_UNREACHABLE);
    /* A section that claims more bytes than the blob has. */
    addr[5] = 1;
    memset(addr + len, 0, 10);
    addr[len + 8] = 0xff;
    assert_int_equal(tmx_peer_add(f->ctx, addr, len + 10, &p), TMX_ERR_INVALID);
}

/* ------------------------------------------------------ bad op arguments */

static void test_send_bad_args(void **state)
{
    fixture_t *f = *state;
    char buf[8] = {0};
    tmx_op_params_t p = {.field_mask = 1u << 20};

    assert_int_equal(tmx_tsend(NULL, 0, buf, 8, 1, NULL, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_tsend(f->ctx, 5, buf, 8, 1, NULL, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_tsend(f->ctx, TMX_ANY_SOURCE, buf, 8, 1, NULL, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_tsend(f->ctx, 0, NULL, 8, 1, NULL, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_tsend(f->ctx, 0, buf, 8, 1, &p, NULL), TMX_ERR_INVALID);
    p.field_mask = TMX_OP_FIELD_FLAGS;
    p.flags = 1u << 20;
    assert_int_equal(tmx_tsend(f->ctx, 0, buf, 8, 1, &p, NULL), TMX_ERR_INVALID);
    cq_none(f->ctx);
}

static void test_recv_bad_args(void **state)
{
    fixture_t *f = *state;
    char buf[8] = {0};
    tmx_op_params_t p = {.field_mask = TMX_OP_FIELD_FLAGS, .flags = TMX_OP_FLAG_SYNC};

    assert_int_equal(tmx_trecv(NULL, 0, buf, 8, 1, 0, NULL, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_trecv(f->ctx, 9, buf, 8, 1, 0, NULL, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_trecv(f->ctx, 0, NULL, 8, 1, 0, NULL, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_trecv(f->ctx, 0, buf, 8, 1, 0, &p, NULL), TMX_ERR_INVALID);
    p.field_mask = 1u << 9;
    assert_int_equal(tmx_trecv(f->ctx, 0, buf, 8, 1, 0, &p, NULL), TMX_ERR_INVALID);
    cq_none(f->ctx);
}

static void test_request_bad_args(void **state)
{
    assert_int_equal(tmx_request_test(NULL, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_request_wait(NULL, 0, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_request_cancel(NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_request_free(NULL), TMX_ERR_INVALID);
}

static void test_probe_bad_args(void **state)
{
    fixture_t *f = *state;
    tmx_completion_t info;
    tmx_message_h msg;
    char buf[4];

    assert_int_equal(tmx_tprobe(NULL, 0, 0, 0, 0, &info, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_tprobe(f->ctx, 0, 0, 0, 1u << 7, &info, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_tprobe(f->ctx, 0, 0, 0, TMX_PROBE_FLAG_CLAIM, &info, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_tprobe(f->ctx, 4, 0, 0, 0, &info, &msg), TMX_ERR_INVALID);
    assert_int_equal(tmx_tprobe(f->ctx, 0, 0, 0, 0, &info, NULL), TMX_ERR_NO_MESSAGE);
    assert_int_equal(tmx_mrecv(NULL, NULL, buf, 4, NULL, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_mrecv(f->ctx, NULL, buf, 4, NULL, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_mrecv(f->ctx, (tmx_message_h)buf, NULL, 4, NULL, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_message_discard(f->ctx, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_message_discard(NULL, NULL), TMX_ERR_INVALID);
}

static void test_cq_bad_args(void **state)
{
    fixture_t *f = *state;
    tmx_completion_t c;
    size_t n;

    assert_int_equal(tmx_cq_read(NULL, &c, 1, &n), TMX_ERR_INVALID);
    assert_int_equal(tmx_cq_read(f->ctx, &c, 1, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_cq_read(f->ctx, NULL, 1, &n), TMX_ERR_INVALID);
    assert_int_equal(tmx_cq_read(f->ctx, NULL, 0, &n), TMX_OK);
    assert_int_equal(n, 0);
    assert_int_equal(tmx_progress(NULL), TMX_ERR_INVALID);
}

/* -------------------------------------------------------- data movement */

static void roundtrip(fixture_t *f, size_t len, int recv_first)
{
    unsigned char *s = malloc(len + 1), *r = malloc(len + 1);
    tmx_op_params_t ps = with_ctx(s), pr = with_ctx(r);
    tmx_completion_t c1, c2;

    fill(s, len, (unsigned)len);
    memset(r, 0, len + 1);
    if (recv_first)
        assert_int_equal(tmx_trecv(f->ctx, f->self, r, len, 77, 0, &pr, NULL), TMX_OK);
    assert_int_equal(tmx_tsend(f->ctx, f->self, s, len, 77, &ps, NULL), TMX_OK);
    if (!recv_first) {
        for (int i = 0; i < 3; i++)
            tmx_progress(f->ctx);
        assert_int_equal(tmx_trecv(f->ctx, f->self, r, len, 77, 0, &pr, NULL), TMX_OK);
    }
    c1 = cq_one(f->ctx);
    c2 = cq_one(f->ctx);
    if (c1.op == TMX_OP_TRECV) {
        tmx_completion_t t = c1;
        c1 = c2;
        c2 = t;
    }
    assert_int_equal(c1.op, TMX_OP_TSEND);
    assert_ptr_equal(c1.user_context, s);
    assert_int_equal(c1.status, TMX_OK);
    assert_int_equal(c2.op, TMX_OP_TRECV);
    assert_ptr_equal(c2.user_context, r);
    assert_int_equal(c2.status, TMX_OK);
    assert_int_equal(c2.length, len);
    assert_int_equal(c2.msg_length, len);
    assert_int_equal(c2.tag, 77);
    assert_int_equal(c2.source, f->self);
    check(r, len, (unsigned)len);
    free(s);
    free(r);
}

static void test_sizes(void **state)
{
    static const size_t sizes[] = {0, 1, 7, 8, 63, 64, SELF_EAGER - 1, SELF_EAGER,
                                   SELF_EAGER + 1, 65536, 1 << 20, (4 << 20) + 3};

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        roundtrip(*state, sizes[i], 1);
        roundtrip(*state, sizes[i], 0);
    }
}

static void truncation(fixture_t *f, size_t len, int recv_first)
{
    unsigned char *s = malloc(len), *r = malloc(len);
    size_t room = len / 2;
    tmx_request_h rr;
    tmx_completion_t c, c2;

    fill(s, len, 3);
    memset(r, 0xee, len);
    if (recv_first)
        assert_int_equal(tmx_trecv(f->ctx, TMX_ANY_SOURCE, r, room, 5, 0, NULL, &rr), TMX_OK);
    assert_int_equal(tmx_tsend(f->ctx, f->self, s, len, 5, NULL, NULL), TMX_OK);
    tmx_progress(f->ctx);
    if (!recv_first)
        assert_int_equal(tmx_trecv(f->ctx, TMX_ANY_SOURCE, r, room, 5, 0, NULL, &rr), TMX_OK);
    assert_int_equal(tmx_request_wait(rr, -1, &c), TMX_ERR_TRUNCATED);
    assert_int_equal(c.status, TMX_ERR_TRUNCATED);
    assert_int_equal(c.length, room);
    assert_int_equal(c.msg_length, len);
    check(r, room, 3);
    assert_int_equal(r[room], 0xee);
    assert_int_equal(tmx_request_free(rr), TMX_OK);
    c = cq_one(f->ctx);
    c2 = cq_one(f->ctx);
    assert_int_equal(c.op == TMX_OP_TSEND ? c.status : c2.status, TMX_OK);
    assert_int_equal(c.op == TMX_OP_TRECV ? c.status : c2.status, TMX_ERR_TRUNCATED);
    assert_int_not_equal(c.op, c2.op);
    free(s);
    free(r);
}

static void test_truncation(void **state)
{
    truncation(*state, 100, 1);
    truncation(*state, 100, 0);
    truncation(*state, 100000, 1);
    truncation(*state, 100000, 0);
}

static void test_wildcards(void **state)
{
    fixture_t *f = *state;
    uint64_t v = 0x1234, got[4] = {0};
    tmx_request_h r[4];
    tmx_completion_t c;

    assert_int_equal(tmx_trecv(f->ctx, f->self, &got[0], 8, 0xabc0, 0xf, NULL, &r[0]), TMX_OK);
    assert_int_equal(tmx_trecv(f->ctx, TMX_ANY_SOURCE, &got[1], 8, 0x99, TMX_TAG_EXACT, NULL, &r[1]), TMX_OK);
    assert_int_equal(tmx_trecv(f->ctx, f->self, &got[2], 8, 0, TMX_TAG_ANY, NULL, &r[2]), TMX_OK);
    assert_int_equal(tmx_trecv(f->ctx, TMX_ANY_SOURCE, &got[3], 8, 0, TMX_TAG_ANY, NULL, &r[3]), TMX_OK);
    /* 0x99 matches the any-source exact receive and the any-tag ones; the
     * any-source exact was posted first among those. */
    assert_int_equal(tmx_tsend(f->ctx, f->self, &v, 8, 0x99, NULL, NULL), TMX_OK);
    assert_int_equal(tmx_request_wait(r[1], -1, &c), TMX_OK);
    assert_int_equal(c.tag, 0x99);
    /* 0xabc7 matches the masked one, posted before the any-tag ones. */
    assert_int_equal(tmx_tsend(f->ctx, f->self, &v, 8, 0xabc7, NULL, NULL), TMX_OK);
    assert_int_equal(tmx_request_wait(r[0], -1, &c), TMX_OK);
    assert_int_equal(c.tag, 0xabc7);
    assert_int_equal(tmx_tsend(f->ctx, f->self, &v, 8, 1, NULL, NULL), TMX_OK);
    assert_int_equal(tmx_request_wait(r[2], -1, &c), TMX_OK);
    assert_int_equal(tmx_tsend(f->ctx, f->self, &v, 8, 2, NULL, NULL), TMX_OK);
    assert_int_equal(tmx_request_wait(r[3], -1, &c), TMX_OK);
    assert_int_equal(c.tag, 2);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(got[i], v);
        assert_int_equal(tmx_request_free(r[i]), TMX_OK);
    }
}

/* A failure reported for a process that is no peer (a stranger that wrote
 * to a transport's port, then exited or stopped answering) fails nothing:
 * no receive, not even one from any source, can wait for it. The same
 * report for a peer fails the receive from any source. */
static void test_stranger_failure_ignored(void **state)
{
    fixture_t *f = *state;
    tmx_context_h other;
    tmx_peer_t op;
    unsigned char addr[TMX_ADDRESS_MAX];
    size_t len = sizeof(addr);
    uint64_t v = 0x5151, got = 0;
    tmx_request_h r;
    tmx_completion_t c;

    assert_int_equal(tmx_trecv(f->ctx, TMX_ANY_SOURCE, &got, 8, 7, TMX_TAG_EXACT, NULL, &r), TMX_OK);
    core_peer_failed_cb(f->ctx, 0x5eed5eed5eed5eedULL, 0);
    core_peer_failed_cb(f->ctx, 0x5eed5eed5eed5eeeULL, 1);
    for (int i = 0; i < 10; i++)
        tmx_progress(f->ctx);
    assert_int_equal(tmx_request_test(r, &c), TMX_INPROGRESS);
    assert_int_equal(tmx_tsend(f->ctx, f->self, &v, 8, 7, NULL, NULL), TMX_OK);
    assert_int_equal(tmx_request_wait(r, -1, &c), TMX_OK);
    assert_int_equal(c.status, TMX_OK);
    assert_int_equal(got, v);
    assert_int_equal(tmx_request_free(r), TMX_OK);

    assert_int_equal(tmx_context_create(NULL, &other), TMX_OK);
    assert_int_equal(tmx_address(other, addr, &len), TMX_OK);
    assert_int_equal(tmx_peer_add(f->ctx, addr, len, &op), TMX_OK);
    assert_int_equal(tmx_trecv(f->ctx, TMX_ANY_SOURCE, &got, 8, 7, TMX_TAG_EXACT, NULL, &r), TMX_OK);
    core_peer_failed_cb(f->ctx, other->uuid, 0);
    assert_int_equal(tmx_request_wait(r, 1000000, &c), TMX_ERR_PEER_FAILED);
    assert_int_equal(c.status, TMX_ERR_PEER_FAILED);
    assert_int_equal(tmx_request_free(r), TMX_OK);
    assert_int_equal(tmx_context_destroy(other), TMX_OK);
}

/* Another context and its address, and where in the address its uuid
 * is: a test makes up other processes' addresses from it (address_name). */
static size_t other_address(tmx_context_h *other, unsigned char *addr, size_t *len)
{
    size_t at = SIZE_MAX;
    uint64_t le;

    assert_int_equal(tmx_context_create(NULL, other), TMX_OK);
    assert_int_equal(tmx_address(*other, addr, len), TMX_OK);
    le = htole64((*other)->uuid);
    for (size_t i = 0; i + 8 <= *len && at == SIZE_MAX; i++)
        if (memcmp(addr + i, &le, 8) == 0)
            at = i;
    assert_true(at != SIZE_MAX);
    return at;
}

static void address_name(unsigned char *addr, size_t at, uint64_t uuid)
{
    uint64_t le = htole64(uuid);

    memcpy(addr + at, &le, 8);
}

/* Processes that write to us without being added are kept for good, and
 * any process of the job can make up identities: at most
 * CORE_IMPLICIT_MAX of them are taken; an added peer still is. */
static void test_implicit_peers_bounded(void **state)
{
    fixture_t *f = *state;
    tmx_context_h other;
    unsigned char addr[TMX_ADDRESS_MAX];
    size_t len = sizeof(addr), at;
    uint64_t u;
    tmx_peer_t num, first = TMX_PEER_NONE, added;

    at = other_address(&other, addr, &len);
    for (uint32_t i = 0; i <= CORE_IMPLICIT_MAX; i++) {
        u = (other->uuid ^ 0x5a5a000000000000ULL) + i;
        address_name(addr, at, u);
        tmx_status_t st = core_peer_add_implicit(f->ctx, u, addr, len, &num);
        if (i < CORE_IMPLICIT_MAX) {
            assert_int_equal(st, TMX_OK);
            if (i == 0)
                first = num;
        } else {
            assert_int_equal(st, TMX_ERR_NOMEM);
        }
    }
    u = other->uuid ^ 0x5a5a000000000000ULL; /* one taken: known still */
    address_name(addr, at, u);
    assert_int_equal(core_peer_add_implicit(f->ctx, u, addr, len, &num), TMX_OK);
    assert_int_equal(num, first);
    address_name(addr, at, other->uuid);
    assert_int_equal(tmx_peer_add(f->ctx, addr, len, &added), TMX_OK);
    assert_int_equal(tmx_context_destroy(other), TMX_OK);
}

/* A peer's identity is kept once: in front of its address copy until its
 * endpoint is made, then in the endpoint. Lookups by uuid find every peer
 * across the map's growth, a process added twice is found as the first
 * number, and the self peer is the context itself. */
static void test_peer_identity(void **state)
{
    fixture_t *f = *state;
    enum { N = 300 };
    tmx_context_h other;
    unsigned char addr[TMX_ADDRESS_MAX];
    size_t len = sizeof(addr), at;
    tmx_peer_t p[N], first, again;
    tl_ep_t *ep;

    assert_int_equal(core_peer_uuid(f->ctx, core_peer_get(f->ctx, f->self)), f->ctx->uuid);
    at = other_address(&other, addr, &len);
    for (uint64_t i = 0; i < N; i++) { /* made-up processes: never connected */
        address_name(addr, at, other->uuid ^ ((i + 1) << 40));
        assert_int_equal(tmx_peer_add(f->ctx, addr, len, &p[i]), TMX_OK);
    }
    address_name(addr, at, other->uuid);
    assert_int_equal(tmx_peer_add(f->ctx, addr, len, &first), TMX_OK);
    assert_int_equal(tmx_peer_add(f->ctx, addr, len, &again), TMX_OK);
    for (uint64_t i = 0; i < N; i++) {
        uint64_t u = other->uuid ^ ((i + 1) << 40);
        assert_int_equal(core_peer_uuid(f->ctx, core_peer_get(f->ctx, p[i])), u);
        assert_int_equal(core_peer_by_uuid(f->ctx, u), p[i]);
    }
    assert_int_equal(core_peer_uuid(f->ctx, core_peer_get(f->ctx, again)), other->uuid);
    assert_int_equal(core_peer_by_uuid(f->ctx, other->uuid), first);
    /* connected: the endpoint holds it, the address copy is gone */
    assert_int_equal(core_peer_ep(f->ctx, again, &ep), TMX_OK);
    assert_int_equal(ep->uuid, other->uuid);
    assert_true(core_peer_has_ep(core_peer_get(f->ctx, again)));
    assert_int_equal(core_peer_uuid(f->ctx, core_peer_get(f->ctx, again)), other->uuid);
    assert_int_equal(core_peer_uuid(f->ctx, core_peer_get(f->ctx, first)), other->uuid);
    assert_int_equal(core_peer_by_uuid(f->ctx, other->uuid), first);
    assert_int_equal(core_peer_by_uuid(f->ctx, other->uuid ^ 1), TMX_PEER_NONE);
    assert_int_equal(tmx_context_destroy(other), TMX_OK);
}

/* Messages from one source match in send order, eager and rendezvous mixed. */
static void test_order_mixed(void **state)
{
    fixture_t *f = *state;
    enum { N = 32 };
    static unsigned char sbuf[N][SELF_EAGER * 2], rbuf[N][SELF_EAGER * 2];
    tmx_request_h rr[N];
    tmx_completion_t c;

    for (int i = 0; i < N; i++) {
        size_t len = (i % 3 == 0) ? SELF_EAGER + 100 : 10 + i;
        fill(sbuf[i], len, (unsigned)i);
        assert_int_equal(tmx_tsend(f->ctx, f->self, sbuf[i], len, 42, NULL, NULL), TMX_OK);
        if (i == N / 2)
            tmx_progress(f->ctx);
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(tmx_trecv(f->ctx, TMX_ANY_SOURCE, rbuf[i], sizeof(rbuf[i]), 42, 0, NULL, &rr[i]), TMX_OK);
    for (int i = 0; i < N; i++) {
        size_t len = (i % 3 == 0) ? SELF_EAGER + 100 : 10 + (size_t)i;
        assert_int_equal(tmx_request_wait(rr[i], -1, &c), TMX_OK);
        assert_int_equal(c.length, len);
        check(rbuf[i], len, (unsigned)i);
        tmx_request_free(rr[i]);
    }
}

static void test_probe_claim_discard(void **state)
{
    fixture_t *f = *state;
    static unsigned char big[SELF_EAGER * 4], out[SELF_EAGER * 4];
    uint32_t small = 0xdeadbeef, got = 0;
    tmx_completion_t info, c;
    tmx_message_h msg;
    tmx_request_h sr, rr;

    fill(big, sizeof(big), 9);
    assert_int_equal(tmx_tsend(f->ctx, f->self, &small, 4, 10, NULL, NULL), TMX_OK);
    assert_int_equal(tmx_tsend(f->ctx, f->self, big, sizeof(big), 11, NULL, &sr), TMX_OK);
    assert_int_equal(tmx_tprobe(f->ctx, TMX_ANY_SOURCE, 0, TMX_TAG_ANY, 0, &info, NULL), TMX_OK);
    assert_int_equal(info.tag, 10);
    assert_int_equal(info.msg_length, 4);
    /* A peek leaves it in place. */
    assert_int_equal(tmx_tprobe(f->ctx, f->self, 10, 0, 0, &info, NULL), TMX_OK);
    assert_int_equal(tmx_tprobe(f->ctx, f->self, 10, 0, TMX_PROBE_FLAG_CLAIM, &info, &msg), TMX_OK);
    assert_int_equal(tmx_tprobe(f->ctx, f->self, 10, 0, 0, &info, NULL), TMX_ERR_NO_MESSAGE);
    assert_int_equal(tmx_mrecv(f->ctx, msg, &got, 4, NULL, &rr), TMX_OK);
    assert_int_equal(tmx_request_wait(rr, -1, &c), TMX_OK);
    assert_int_equal(got, small);
    tmx_request_free(rr);
    /* The consumed handle is refused. */
    assert_int_equal(tmx_message_discard(f->ctx, msg), TMX_ERR_INVALID);
    /* Claim the rendezvous one and receive it. */
    assert_int_equal(tmx_tprobe(f->ctx, TMX_ANY_SOURCE, 11, 0, TMX_PROBE_FLAG_CLAIM, &info, &msg), TMX_OK);
    assert_int_equal(info.msg_length, sizeof(big));
    assert_int_equal(tmx_request_test(sr, NULL), TMX_INPROGRESS);
    assert_int_equal(tmx_mrecv(f->ctx, msg, out, sizeof(out), NULL, &rr), TMX_OK);
    assert_int_equal(tmx_request_wait(rr, -1, &c), TMX_OK);
    check(out, sizeof(out), 9);
    assert_int_equal(tmx_request_wait(sr, -1, &c), TMX_OK);
    tmx_request_free(rr);
    tmx_request_free(sr);
    /* Discard a claimed rendezvous message: its sender still completes. */
    assert_int_equal(tmx_tsend(f->ctx, f->self, big, sizeof(big), 12, NULL, &sr), TMX_OK);
    assert_int_equal(tmx_tprobe(f->ctx, f->self, 12, 0, TMX_PROBE_FLAG_CLAIM, &info, &msg), TMX_OK);
    assert_int_equal(tmx_message_discard(f->ctx, msg), TMX_OK);
    assert_int_equal(tmx_request_wait(sr, 10000000, &c), TMX_OK);
    tmx_request_free(sr);
}

/* Handles used after they were freed are refused, also after a burst of
 * many requests at once has come and gone (the memory of a handle stays
 * the context's; under ASan a read of memory given back would fail this
 * case), and so is a message handle already received. */
static void test_stale_handles_after_burst(void **state)
{
    fixture_t *f = *state;
    enum { N = 300 };
    tmx_request_h r[N];
    tmx_message_h msg;
    tmx_completion_t info, c[64];
    char buf[4];
    size_t n, idle, mapped;

    assert_int_equal(tmx_context_memory(f->ctx, &idle), TMX_OK);
    assert_true(idle > 0);
    assert_int_equal(tmx_context_memory(NULL, &idle), TMX_ERR_INVALID);
    assert_int_equal(tmx_context_memory(f->ctx, NULL), TMX_ERR_INVALID);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < N; i++)
            assert_int_equal(tmx_trecv(f->ctx, TMX_ANY_SOURCE, buf, sizeof(buf), 1000 + (uint64_t)i, 0, NULL,
                                       &r[i]), TMX_OK);
        for (int i = 0; i < N; i++) {
            if (i == 0) {
                assert_int_equal(tmx_context_memory(f->ctx, &mapped), TMX_OK);
                assert_true(mapped > idle); /* the burst took more chunks */
            }
            assert_int_equal(tmx_request_cancel(r[i]), TMX_OK);
            assert_int_equal(tmx_request_free(r[i]), TMX_OK);
        }
        do
            assert_int_equal(tmx_cq_read(f->ctx, c, 64, &n), TMX_OK);
        while (n > 0);
        /* the burst's chunks go back once progress finds nothing in use */
        assert_int_equal(tmx_wait(f->ctx, 100000), 0);
        assert_int_equal(tmx_context_memory(f->ctx, &mapped), TMX_OK);
        assert_int_equal(mapped, idle);
        assert_int_equal(tmx_request_free(r[0]), TMX_ERR_INVALID);
        assert_int_equal(tmx_request_free(r[N / 2]), TMX_ERR_INVALID);
        assert_int_equal(tmx_request_free(r[N - 1]), TMX_ERR_INVALID);
        for (int i = 0; i < N; i += 37) {
            assert_int_equal(tmx_request_test(r[i], &info), TMX_ERR_INVALID);
            assert_int_equal(tmx_request_wait(r[i], 0, &info), TMX_ERR_INVALID);
            assert_int_equal(tmx_request_cancel(r[i]), TMX_ERR_INVALID);
            assert_int_equal(tmx_request_free(r[i]), TMX_ERR_INVALID);
        }
    }
    /* many unexpected messages at once, all received: a stale message handle */
    for (int i = 0; i < N; i++)
        assert_int_equal(tmx_tinject(f->ctx, f->self, "m", 1, 5000 + (uint64_t)i, 0, 0), TMX_OK);
    for (int i = 0; i < N; i++) {
        while (tmx_tprobe(f->ctx, f->self, 5000 + (uint64_t)i, 0, TMX_PROBE_FLAG_CLAIM, &info, &msg) != TMX_OK)
            tmx_progress(f->ctx);
        assert_int_equal(tmx_mrecv(f->ctx, msg, buf, sizeof(buf), NULL, &r[0]), TMX_OK);
        assert_int_equal(tmx_request_wait(r[0], -1, NULL), TMX_OK);
        assert_int_equal(tmx_request_free(r[0]), TMX_OK);
    }
    do
        assert_int_equal(tmx_cq_read(f->ctx, c, 64, &n), TMX_OK);
    while (n > 0);
    assert_int_equal(tmx_wait(f->ctx, 100000), 0);
    assert_int_equal(tmx_context_memory(f->ctx, &mapped), TMX_OK);
    assert_int_equal(mapped, idle);
    assert_int_equal(tmx_message_discard(f->ctx, msg), TMX_ERR_INVALID);
    assert_int_equal(tmx_mrecv(f->ctx, msg, buf, sizeof(buf), NULL, &r[0]), TMX_ERR_INVALID);
}

/* A program that only waits on its requests (no completion queue, no
 * tmx_wait) gets a burst's chunks back too: the return of the last
 * request trims, 20 ms after the last trim at most. */
static void test_pool_trim_wait_only(void **state)
{
    fixture_t *f = *state;
    enum { N = 300 };
    tmx_request_h r[N];
    tmx_op_params_t p = {.field_mask = TMX_OP_FIELD_FLAGS, .flags = TMX_OP_FLAG_NO_CQ};
    char buf[N][4], out[4] = "abc";
    size_t idle, mapped;
    struct timespec ms30 = {0, 30 * 1000 * 1000};

    assert_int_equal(tmx_context_memory(f->ctx, &idle), TMX_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(tmx_trecv(f->ctx, f->self, buf[i], 4, (uint64_t)i, 0, &p, &r[i]), TMX_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(tmx_tsend(f->ctx, f->self, out, 4, (uint64_t)i, &p, NULL), TMX_OK);
    assert_int_equal(tmx_context_memory(f->ctx, &mapped), TMX_OK);
    assert_true(mapped > idle);
    for (int i = 0; i < N; i++) {
        assert_int_equal(tmx_request_wait(r[i], -1, NULL), TMX_OK);
        assert_int_equal(tmx_request_free(r[i]), TMX_OK);
    }
    /* past the trims' rate limit, one more request: its return trims */
    nanosleep(&ms30, NULL);
    assert_int_equal(tmx_trecv(f->ctx, f->self, buf[0], 4, 7, 0, &p, &r[0]), TMX_OK);
    assert_int_equal(tmx_tsend(f->ctx, f->self, out, 4, 7, &p, NULL), TMX_OK);
    assert_int_equal(tmx_request_wait(r[0], -1, NULL), TMX_OK);
    assert_int_equal(tmx_request_free(r[0]), TMX_OK);
    assert_int_equal(tmx_context_memory(f->ctx, &mapped), TMX_OK);
    assert_int_equal(mapped, idle);
}

/* A request that fails to start goes back to the pool: a handle freed
 * before it, whose slot it took, is still refused. */
static void test_stale_handle_after_failed_start(void **state)
{
    fixture_t *f = *state;
    tmx_context_h gone;
    unsigned char addr[TMX_ADDRESS_MAX];
    size_t len = sizeof(addr);
    tmx_peer_t dead;
    tmx_request_h r, r2 = NULL;
    char buf[4] = "abc";

    assert_int_equal(tmx_context_create(NULL, &gone), TMX_OK);
    assert_int_equal(tmx_address(gone, addr, &len), TMX_OK);
    assert_int_equal(tmx_context_destroy(gone), TMX_OK);
    assert_int_equal(tmx_peer_add(f->ctx, addr, len, &dead), TMX_OK);
    assert_int_equal(tmx_trecv(f->ctx, TMX_ANY_SOURCE, buf, sizeof(buf), 9, 0, NULL, &r), TMX_OK);
    assert_int_equal(tmx_request_cancel(r), TMX_OK);
    assert_int_equal(tmx_request_free(r), TMX_OK);
    assert_int_equal(tmx_request_free(r), TMX_ERR_INVALID);
    /* its shared memory is gone: the send cannot start */
    assert_int_not_equal(tmx_tsend(f->ctx, dead, buf, sizeof(buf), 9, NULL, &r2), TMX_OK);
    assert_null(r2);
    assert_int_equal(tmx_request_free(r), TMX_ERR_INVALID);
    assert_int_equal(tmx_request_test(r, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_request_wait(r, 0, NULL), TMX_ERR_INVALID);
    assert_int_equal(tmx_cq_read(f->ctx, (tmx_completion_t[4]){0}, 4, &len), TMX_OK);
}

static void test_cancel(void **state)
{
    fixture_t *f = *state;
    char buf[16];
    tmx_request_h rr, sr;
    tmx_completion_t c;
    tmx_op_params_t p = with_ctx(buf);

    assert_int_equal(tmx_trecv(f->ctx, TMX_ANY_SOURCE, buf, 16, 3, 0, &p, &rr), TMX_OK);
    assert_int_equal(tmx_request_test(rr, &c), TMX_INPROGRESS);
    assert_int_equal(tmx_request_cancel(rr), TMX_OK);
    assert_int_equal(tmx_request_test(rr, &c), TMX_ERR_CANCELED);
    assert_int_equal(tmx_request_cancel(rr), TMX_ERR_BUSY);
    c = cq_one(f->ctx);
    assert_int_equal(c.status, TMX_ERR_CANCELED);
    assert_ptr_equal(c.user_context, buf);
    assert_int_equal(tmx_request_free(rr), TMX_OK);
    assert_int_equal(tmx_request_free(rr), TMX_ERR_INVALID);
    /* The canceled receive no longer matches. */
    assert_int_equal(tmx_tsend(f->ctx, f->self, "x", 1, 3, NULL, &sr), TMX_OK);
    assert_int_equal(tmx_request_cancel(sr), TMX_ERR_UNSUPPORTED);
    assert_int_equal(tmx_request_wait(sr, -1, NULL), TMX_OK);
    tmx_request_free(sr);
    assert_int_equal(tmx_tprobe(f->ctx, f->self, 3, 0, 0, &c, NULL), TMX_OK);
}

/* tmx_cancel finds a receive by its user context, the earliest posted
 * first; the completion names the source and tag it was posted with. */
static void test_cancel_by_context(void **state)
{
    fixture_t *f = *state;
    char a[4], b[4], c2[4];
    int key, other;
    tmx_op_params_t p = with_ctx(&key), q = with_ctx(&other);
    tmx_completion_t c;

    assert_int_equal(tmx_cancel(NULL, &key), TMX_ERR_INVALID);
    assert_int_equal(tmx_cancel(f->ctx, &key), TMX_ERR_NOT_FOUND);
    assert_int_equal(tmx_trecv(f->ctx, f->self, a, 4, 5, 0, &p, NULL), TMX_OK);
    assert_int_equal(tmx_trecv(f->ctx, TMX_ANY_SOURCE, b, 4, 6, 0, &q, NULL), TMX_OK);
    assert_int_equal(tmx_trecv(f->ctx, TMX_ANY_SOURCE, c2, 4, 7, 0, &p, NULL), TMX_OK);
    assert_int_equal(tmx_cancel(f->ctx, &key), TMX_OK);
    c = cq_one(f->ctx);
    assert_int_equal(c.status, TMX_ERR_CANCELED);
    assert_ptr_equal(c.user_context, &key);
    assert_int_equal(c.tag, 5);
    assert_int_equal(c.source, f->self);
    assert_int_equal(tmx_cancel(f->ctx, &key), TMX_OK);
    c = cq_one(f->ctx);
    assert_int_equal(c.tag, 7);
    assert_int_equal(c.source, TMX_ANY_SOURCE);
    assert_int_equal(tmx_cancel(f->ctx, &key), TMX_ERR_NOT_FOUND);
    /* A receive that has matched is no longer canceled. */
    assert_int_equal(tmx_tsend(f->ctx, f->self, "xyz", 4, 6, NULL, NULL), TMX_OK);
    for (int i = 0; i < 2; i++) {
        c = cq_one(f->ctx);
        if (c.op == TMX_OP_TRECV)
            break;
    }
    assert_int_equal(c.op, TMX_OP_TRECV);
    assert_ptr_equal(c.user_context, &other);
    assert_int_equal(tmx_cancel(f->ctx, &other), TMX_ERR_NOT_FOUND);
}

/* TMX_OP_FLAG_CQ_ERRORS_ONLY: a success leaves no entry, a failure does. */
static void test_cq_errors_only(void **state)
{
    fixture_t *f = *state;
    char buf[4];
    int key;
    tmx_op_params_t p = {.field_mask = TMX_OP_FIELD_FLAGS | TMX_OP_FIELD_USER_CONTEXT,
                         .flags = TMX_OP_FLAG_CQ_ERRORS_ONLY, .user_context = &key};
    tmx_request_h sr;
    tmx_completion_t c;

    assert_int_equal(tmx_trecv(f->ctx, f->self, buf, 4, 1, 0, &p, NULL), TMX_OK);
    assert_int_equal(tmx_tsend(f->ctx, f->self, "abc", 4, 1, &p, &sr), TMX_OK);
    assert_int_equal(tmx_request_wait(sr, -1, NULL), TMX_OK);
    tmx_request_free(sr);
    cq_none(f->ctx);
    assert_string_equal(buf, "abc");
    assert_int_equal(tmx_trecv(f->ctx, f->self, buf, 2, 1, 0, &p, NULL), TMX_OK);
    assert_int_equal(tmx_tsend(f->ctx, f->self, "abc", 4, 1, &p, NULL), TMX_OK);
    c = cq_one(f->ctx);
    assert_int_equal(c.status, TMX_ERR_TRUNCATED);
    assert_ptr_equal(c.user_context, &key);
    cq_none(f->ctx);
    assert_int_equal(tmx_trecv(f->ctx, f->self, buf, 4, 2, 0, &p, NULL), TMX_OK);
    assert_int_equal(tmx_cancel(f->ctx, &key), TMX_OK);
    assert_int_equal(cq_one(f->ctx).status, TMX_ERR_CANCELED);
}

/* More contexts than a shm segment has sender slots, one after another,
 * each sending one message to this one and closing before it is
 * received: each gives its slot back when it closes, after its message,
 * so none finds the table full and no message is lost. */
static void test_shm_sender_slots_reused(void **state)
{
    fixture_t *f = *state;
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_BOOT, .boot = TMX_BOOT_NONE};
    unsigned char addr[TMX_ADDRESS_MAX];
    size_t len = sizeof(addr);

    assert_int_equal(tmx_address(f->ctx, addr, &len), TMX_OK);
    for (int i = 0; i < SHM_N_SENDERS + 16; i++) {
        tmx_context_h b;
        tmx_peer_t pa;
        tmx_request_h r;
        int got = -1;

        assert_int_equal(tmx_context_create(&p, &b), TMX_OK);
        assert_int_equal(tmx_peer_add(b, addr, len, &pa), TMX_OK);
        assert_int_equal(tmx_tsend(b, pa, &i, sizeof(i), 77, NULL, NULL), TMX_OK);
        assert_int_equal(tmx_context_destroy(b), TMX_OK);
        assert_int_equal(tmx_trecv(f->ctx, TMX_ANY_SOURCE, &got, sizeof(got), 77, 0, NULL, &r), TMX_OK);
        assert_int_equal(tmx_request_wait(r, 5000000, NULL), TMX_OK);
        assert_int_equal(tmx_request_free(r), TMX_OK);
        assert_int_equal(got, i);
    }
}

static void test_no_cq_and_wait_timeout(void **state)
{
    fixture_t *f = *state;
    char buf[4];
    tmx_request_h rr;
    tmx_op_params_t p = {.field_mask = TMX_OP_FIELD_FLAGS, .flags = TMX_OP_FLAG_NO_CQ};

    assert_int_equal(tmx_trecv(f->ctx, f->self, buf, 4, 1, 0, &p, &rr), TMX_OK);
    assert_int_equal(tmx_request_wait(rr, 1000, NULL), TMX_ERR_TIMEOUT);
    assert_int_equal(tmx_tsend(f->ctx, f->self, "abc", 4, 1, &p, NULL), TMX_OK);
    assert_int_equal(tmx_request_wait(rr, -1, NULL), TMX_OK);
    assert_string_equal(buf, "abc");
    tmx_request_free(rr);
    cq_none(f->ctx);
}

static void test_remote_data(void **state)
{
    fixture_t *f = *state;
    static unsigned char big[SELF_EAGER * 2];
    char buf[sizeof(big)];
    tmx_op_params_t p = {.field_mask = TMX_OP_FIELD_DATA, .data = 0x0102030405060708ULL};
    tmx_request_h rr;
    tmx_completion_t c;

    for (int k = 0; k < 2; k++) {
        size_t len = k ? sizeof(big) : 5;
        assert_int_equal(tmx_tsend(f->ctx, f->self, big, len, 1, &p, NULL), TMX_OK);
        assert_int_equal(tmx_trecv(f->ctx, f->self, buf, sizeof(buf), 1, 0, NULL, &rr), TMX_OK);
        assert_int_equal(tmx_request_wait(rr, -1, &c), TMX_OK);
        assert_true(c.has_data);
        assert_int_equal(c.data, p.data);
        assert_int_equal(c.length, len);
        tmx_request_free(rr);
    }
    assert_int_equal(tmx_tsend(f->ctx, f->self, big, 3, 1, NULL, NULL), TMX_OK);
    assert_int_equal(tmx_trecv(f->ctx, f->self, buf, sizeof(buf), 1, 0, NULL, &rr), TMX_OK);
    assert_int_equal(tmx_request_wait(rr, -1, &c), TMX_OK);
    assert_false(c.has_data);
    tmx_request_free(rr);
    /* data is a send's: a receive given it (parameters shared with
     * sends) still reports data only when its sender attached some, also
     * when no message ever came */
    assert_int_equal(tmx_trecv(f->ctx, f->self, buf, sizeof(buf), 2, 0, &p, &rr), TMX_OK);
    assert_int_equal(tmx_request_cancel(rr), TMX_OK);
    assert_int_equal(tmx_request_wait(rr, -1, &c), TMX_ERR_CANCELED);
    assert_false(c.has_data);
    assert_int_equal(c.data, 0);
    tmx_request_free(rr);
    cq_one(f->ctx);
}

static void test_sync_send(void **state)
{
    fixture_t *f = *state;
    tmx_op_params_t p = {.field_mask = TMX_OP_FIELD_FLAGS, .flags = TMX_OP_FLAG_SYNC};
    tmx_request_h sr, rr;
    char buf[4];

    assert_int_equal(tmx_tsend(f->ctx, f->self, "ab", 3, 8, &p, &sr), TMX_OK);
    for (int i = 0; i < 50; i++)
        tmx_progress(f->ctx);
    assert_int_equal(tmx_request_test(sr, NULL), TMX_INPROGRESS);
    assert_int_equal(tmx_trecv(f->ctx, f->self, buf, 4, 8, 0, NULL, &rr), TMX_OK);
    assert_int_equal(tmx_request_wait(sr, -1, NULL), TMX_OK);
    assert_int_equal(tmx_request_wait(rr, -1, NULL), TMX_OK);
    assert_string_equal(buf, "ab");
    tmx_request_free(sr);
    tmx_request_free(rr);
}

/* An injected send keeps nothing: the buffer is reusable at once, no
 * completion is reported, remote data still travels; a request, SYNC or
 * more than TMX_INJECT_MAX bytes is refused. */
static void test_inject(void **state)
{
    fixture_t *f = *state;
    static unsigned char big[TMX_INJECT_MAX + 1], got[TMX_INJECT_MAX + 1];
    tmx_op_params_t p = {.field_mask = TMX_OP_FIELD_FLAGS | TMX_OP_FIELD_DATA,
                         .flags = TMX_OP_FLAG_INJECT, .data = 42};
    tmx_request_h rr;
    tmx_completion_t c;

    fill(big, TMX_INJECT_MAX, 7);
    assert_int_equal(tmx_tsend(f->ctx, f->self, big, TMX_INJECT_MAX, 3, &p, NULL), TMX_OK);
    memset(big, 0, sizeof(big)); /* the payload was copied */
    cq_none(f->ctx);
    assert_int_equal(tmx_trecv(f->ctx, f->self, got, sizeof(got), 3, 0, NULL, &rr), TMX_OK);
    assert_int_equal(tmx_request_wait(rr, -1, &c), TMX_OK);
    assert_int_equal(c.length, TMX_INJECT_MAX);
    assert_true(c.has_data);
    assert_int_equal(c.data, 42);
    check(got, TMX_INJECT_MAX, 7);
    tmx_request_free(rr);
    assert_int_equal(cq_one(f->ctx).op, TMX_OP_TRECV); /* the receive's, only */

    assert_int_equal(tmx_tsend(f->ctx, f->self, big, 1, 3, &p, &rr), TMX_ERR_INVALID);
    assert_int_equal(tmx_tsend(f->ctx, f->self, big, TMX_INJECT_MAX + 1, 3, &p, NULL), TMX_ERR_INVALID);

    /* with SYNC: copied at once, completed only once matched */
    tmx_request_h rs;
    p.flags |= TMX_OP_FLAG_SYNC;
    assert_int_equal(tmx_tsend(f->ctx, f->self, big, TMX_INJECT_MAX + 1, 3, &p, &rs), TMX_ERR_INVALID);
    fill(big, 100, 5);
    assert_int_equal(tmx_tsend(f->ctx, f->self, big, 100, 4, &p, &rs), TMX_OK);
    memset(big, 0, 100); /* the caller's buffer is free on return */
    (void)tmx_progress(f->ctx);
    assert_int_equal(tmx_request_test(rs, &c), TMX_INPROGRESS); /* not matched yet */
    cq_none(f->ctx);
    assert_int_equal(tmx_trecv(f->ctx, f->self, got, sizeof(got), 4, 0, NULL, &rr), TMX_OK);
    assert_int_equal(tmx_request_wait(rr, -1, &c), TMX_OK);
    assert_int_equal(c.length, 100);
    check(got, 100, 5);
    tmx_request_free(rr);
    assert_int_equal(tmx_request_wait(rs, -1, &c), TMX_OK);
    assert_int_equal(c.op, TMX_OP_TSEND);
    tmx_request_free(rs);
    /* nothing to copy: a NULL buffer of 0 bytes */
    assert_int_equal(tmx_tsend(f->ctx, f->self, NULL, 0, 6, &p, &rs), TMX_OK);
    assert_int_equal(tmx_trecv(f->ctx, f->self, got, sizeof(got), 6, 0, NULL, &rr), TMX_OK);
    assert_int_equal(tmx_request_wait(rr, -1, &c), TMX_OK);
    assert_int_equal(c.length, 0);
    tmx_request_free(rr);
    assert_int_equal(tmx_request_wait(rs, -1, &c), TMX_OK);
    assert_int_equal(c.length, 0);
    tmx_request_free(rs);
    /* one left unmatched when the context goes: its copy is freed then
     * (under AddressSanitizer a leak would fail the test) */
    assert_int_equal(tmx_tsend(f->ctx, f->self, big, 10, 5, &p, NULL), TMX_OK);
}

/* tmx_tinject is the one-call form of an injected send: the payload is
 * copied, remote data travels only when asked for, no completion is
 * reported, and bad arguments are refused with nothing sent. */
static void test_tinject(void **state)
{
    fixture_t *f = *state;
    static unsigned char big[TMX_INJECT_MAX + 1], got[TMX_INJECT_MAX + 1];
    tmx_request_h rr;
    tmx_completion_t c;

    fill(big, TMX_INJECT_MAX, 9);
    assert_int_equal(tmx_tinject(f->ctx, f->self, big, TMX_INJECT_MAX, 5, 1, 77), TMX_OK);
    assert_int_equal(tmx_tinject(f->ctx, f->self, big, 8, 6, 0, 99), TMX_OK);
    assert_int_equal(tmx_tinject(f->ctx, f->self, NULL, 0, 7, 0, 0), TMX_OK);
    memset(big, 0, sizeof(big));
    cq_none(f->ctx);

    assert_int_equal(tmx_trecv(f->ctx, f->self, got, sizeof(got), 5, 0, NULL, &rr), TMX_OK);
    assert_int_equal(tmx_request_wait(rr, -1, &c), TMX_OK);
    assert_int_equal(c.length, TMX_INJECT_MAX);
    assert_true(c.has_data);
    assert_int_equal(c.data, 77);
    check(got, TMX_INJECT_MAX, 9);
    tmx_request_free(rr);
    assert_int_equal(tmx_trecv(f->ctx, f->self, got, sizeof(got), 6, 0, NULL, &rr), TMX_OK);
    assert_int_equal(tmx_request_wait(rr, -1, &c), TMX_OK);
    assert_int_equal(c.length, 8);
    assert_false(c.has_data);
    check(got, 8, 9);
    tmx_request_free(rr);
    assert_int_equal(tmx_trecv(f->ctx, f->self, got, sizeof(got), 7, 0, NULL, &rr), TMX_OK);
    assert_int_equal(tmx_request_wait(rr, -1, &c), TMX_OK);
    assert_int_equal(c.length, 0);
    tmx_request_free(rr);
    for (int i = 0; i < 3; i++)
        assert_int_equal(cq_one(f->ctx).op, TMX_OP_TRECV); /* the receives' only */
    cq_none(f->ctx);

    assert_int_equal(tmx_tinject(NULL, f->self, big, 1, 5, 0, 0), TMX_ERR_INVALID);
    assert_int_equal(tmx_tinject(f->ctx, f->self, NULL, 1, 5, 0, 0), TMX_ERR_INVALID);
    assert_int_equal(tmx_tinject(f->ctx, f->self, big, TMX_INJECT_MAX + 1, 5, 0, 0), TMX_ERR_INVALID);
    assert_int_equal(tmx_tinject(f->ctx, 12345, big, 1, 5, 0, 0), TMX_ERR_INVALID);
    assert_int_equal(tmx_tinject(f->ctx, TMX_ANY_SOURCE, big, 1, 5, 0, 0), TMX_ERR_INVALID);
    assert_int_equal(tmx_tinject(f->ctx, TMX_PEER_NONE, big, 1, 5, 0, 0), TMX_ERR_INVALID);
    assert_int_equal(tmx_tprobe(f->ctx, TMX_ANY_SOURCE, 0, ~0ull, 0, &c, NULL), TMX_ERR_NO_MESSAGE);
    cq_none(f->ctx);
}

/* Requests released early still report through the CQ; many outstanding
 * completions grow the queue instead of losing entries. */
static void test_cq_growth(void **state)
{
    fixture_t *f = *state;
    enum { N = 3000 };
    tmx_completion_t c[64];
    size_t n, total = 0;

    for (int i = 0; i < N; i++) {
        tmx_request_h r;
        assert_int_equal(tmx_tsend(f->ctx, f->self, "", 0, (uint64_t)i, NULL, &r), TMX_OK);
        assert_int_equal(tmx_request_free(r), TMX_OK);
    }
    while (total < N) {
        assert_int_equal(tmx_cq_read(f->ctx, c, 64, &n), TMX_OK);
        assert_true(n > 0);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(c[i].tag, total + i);
        total += n;
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(tmx_tprobe(f->ctx, f->self, (uint64_t)i, 0, 0, c, NULL), TMX_OK);
}

/* Malformed packets from the wire are dropped and counted, never trusted. */
static void test_wire_garbage(void **state)
{
    fixture_t *f = *state;
    unsigned char pkt[64] = {0};
    wire_tmh_t tmh;
    wire_rvh_t rvh;
    uint64_t before = f->ctx->proto.dropped;
    tmx_completion_t info;

    proto_recv_cb(&f->ctx->proto, f->ctx->uuid, pkt, 3);
    proto_recv_cb(&f->ctx->proto, f->ctx->uuid ^ 1, pkt, 3);
    wire_tmh_pack(&tmh, 0x77, 0, 0, 1);
    proto_recv_cb(&f->ctx->proto, f->ctx->uuid, &tmh, sizeof(tmh));
    wire_tmh_pack(&tmh, WIRE_OP_EAGER, 0x40, 0, 1);
    proto_recv_cb(&f->ctx->proto, f->ctx->uuid, &tmh, sizeof(tmh));
    wire_tmh_pack(&tmh, WIRE_OP_EAGER, WIRE_FLAG_DATA, 0, 1);
    proto_recv_cb(&f->ctx->proto, f->ctx->uuid, &tmh, sizeof(tmh));
    wire_tmh_pack(&tmh, WIRE_OP_RNDV, 0, 0, 1);
    proto_recv_cb(&f->ctx->proto, f->ctx->uuid, &tmh, sizeof(tmh));
    tmh.version = 9;
    proto_recv_cb(&f->ctx->proto, f->ctx->uuid, &tmh, sizeof(tmh));
    /* A FIN naming no send of ours. */
    wire_tmh_pack(&tmh, WIRE_OP_FIN, 0, 12345, 1);
    wire_rvh_pack(&rvh, 0x1000, 7, 10);
    memcpy(pkt, &tmh, sizeof(tmh));
    memcpy(pkt + sizeof(tmh), &rvh, sizeof(rvh));
    proto_recv_cb(&f->ctx->proto, f->ctx->uuid, pkt, sizeof(tmh) + sizeof(rvh));
    assert_int_equal(f->ctx->proto.dropped - before, 8);
    assert_int_equal(tmx_tprobe(f->ctx, TMX_ANY_SOURCE, 0, TMX_TAG_ANY, 0, &info, NULL), TMX_ERR_NO_MESSAGE);
}

/* An empty message with no buffer (MPI sends those) over self. */
static void test_empty_null(void **state)
{
    fixture_t *f = *state;
    tmx_request_h r;
    tmx_completion_t c;

    assert_int_equal(tmx_trecv(f->ctx, f->self, NULL, 0, 9, 0, NULL, &r), TMX_OK);
    assert_int_equal(tmx_tsend(f->ctx, f->self, NULL, 0, 9, NULL, NULL), TMX_OK);
    assert_int_equal(tmx_request_wait(r, 1000000, &c), TMX_OK);
    assert_int_equal(c.length, 0);
    tmx_request_free(r);
}

/* ------------------------------------------------- remote-access keys */

/* A rendezvous send (synchronous, so rendezvous at any size) to ctx's own
 * self peer; returns the key a reader of its buffer must present. */
static uint64_t rndv_key_of_self_send(tmx_context_h ctx, const void *buf, tmx_request_h *r)
{
    unsigned char addr[TMX_ADDRESS_MAX];
    size_t len = sizeof(addr);
    tmx_peer_t self;
    tmx_op_params_t op = {.field_mask = TMX_OP_FIELD_FLAGS, .flags = TMX_OP_FLAG_SYNC};

    assert_int_equal(tmx_address(ctx, addr, &len), TMX_OK);
    assert_int_equal(tmx_peer_add(ctx, addr, len, &self), TMX_OK);
    assert_int_equal(tmx_tsend(ctx, self, buf, 64, 1, &op, r), TMX_OK);
    return (*r)->p.rkey;
}

/* Keys come from a secret of each context's own, not from anything a peer
 * sees: two contexts given the same uuid, sending from the same slot at
 * the same point of their lives, draw different keys. */
static void test_keys_independent_of_uuid(void **state)
{
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_TRANSPORTS | TMX_CONTEXT_FIELD_BOOT,
                              .transports = "self",
                              .boot = TMX_BOOT_NONE};
    char buf[64] = {0};
    tmx_context_h a, b;
    tmx_request_h ra, rb;
    uint64_t ka, kb;

    (void)state;
    assert_int_equal(tmx_context_create(&p, &a), TMX_OK);
    assert_int_equal(tmx_context_create(&p, &b), TMX_OK);
    b->uuid = a->uuid;
    ka = rndv_key_of_self_send(a, buf, &ra);
    kb = rndv_key_of_self_send(b, buf, &rb);
    assert_int_equal(ka & (REG_KEY_SLOTS - 1), kb & (REG_KEY_SLOTS - 1));
    assert_true(ka != kb);
    assert_true((ka >> REG_KEY_SLOT_BITS) != (kb >> REG_KEY_SLOT_BITS));
    assert_int_equal(tmx_context_destroy(a), TMX_OK);
    assert_int_equal(tmx_context_destroy(b), TMX_OK);
    (void)ra;
    (void)rb;
}

/* ------------------------------------------------- implicit peers */

static tmx_context_h ctx_over(const char *transports)
{
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_TRANSPORTS | TMX_CONTEXT_FIELD_BOOT,
                              .transports = transports,
                              .boot = TMX_BOOT_NONE};
    tmx_context_h c;

    assert_int_equal(tmx_context_create(&p, &c), TMX_OK);
    return c;
}

static tmx_context_h ctx_none(void)
{
    return ctx_over("self,shm");
}

static tmx_peer_t add_addr_of(tmx_context_h to, tmx_context_h of)
{
    unsigned char addr[TMX_ADDRESS_MAX];
    size_t len = sizeof(addr);
    tmx_peer_t p;

    assert_int_equal(tmx_address(of, addr, &len), TMX_OK);
    assert_int_equal(tmx_peer_add(to, addr, len, &p), TMX_OK);
    return p;
}

/* Waits for req, driving both contexts (each is the other's peer). */
static tmx_completion_t wait2(tmx_request_h req, tmx_context_h a, tmx_context_h b)
{
    tmx_completion_t c;

    for (long i = 0; i < 10000000 && tmx_request_test(req, &c) == TMX_INPROGRESS; i++) {
        tmx_progress(a);
        tmx_progress(b);
    }
    assert_int_not_equal(tmx_request_test(req, &c), TMX_INPROGRESS);
    tmx_request_free(req);
    return c;
}

/* A rendezvous send whose header waits in the receiver's ring when its
 * context is destroyed: tmx.h says its buffer is no longer touched once
 * tmx_context_destroy returns, and the application reuses it. The
 * receive must fail with the peer, never complete with the reused bytes
 * (over shm by reading, 70 000 bytes, and by the cooperative copy,
 * 300 000). */
static void test_destroyed_sender_not_read(void **state)
{
    static const size_t sizes[] = {70000, 300000};

    (void)state;
    for (unsigned i = 0; i < 2; i++) {
        size_t n = sizes[i];
        tmx_context_h a = ctx_none(), b = ctx_none();
        tmx_peer_t ab = add_addr_of(a, b), ba = add_addr_of(b, a);
        unsigned char *s = malloc(n), *d = calloc(1, n);
        tmx_request_h rr, sr;
        tmx_completion_t c;

        assert_non_null(s);
        assert_non_null(d);
        memset(s, 0x11, n);
        assert_int_equal(tmx_trecv(a, ab, d, n, 1, TMX_TAG_EXACT, NULL, &rr), TMX_OK);
        assert_int_equal(tmx_tsend(b, ba, s, n, 1, NULL, &sr), TMX_OK);
        (void)sr; /* abandoned with its context */
        tmx_context_destroy(b);
        memset(s, 0xEE, n);
        c = wait2(rr, a, a);
        assert_int_equal(c.status, TMX_ERR_PEER_FAILED);
        assert_int_not_equal(d[0], 0xEE);
        tmx_context_destroy(a);
        free(s);
        free(d);
    }
}

static void send2(tmx_context_h from, tmx_peer_t to, const void *buf, size_t len, uint64_t tag,
                  tmx_context_h other)
{
    tmx_request_h r;

    assert_int_equal(tmx_tsend(from, to, buf, len, tag, NULL, &r), TMX_OK);
    assert_int_equal(wait2(r, from, other).status, TMX_OK);
}

/* A process that was never added sends eager and rendezvous messages,
 * gets answered through its implicit number, and once added, its waiting
 * and later messages carry the added number, and it is written to and
 * heard through either number. Over udp, the endpoint the implicit number
 * made is found through the core's peers until the added number comes
 * first, then through udp's own map (tl_ops_t.ep_unfound): found nowhere,
 * udp would make a second endpoint, whose sequence numbers start again,
 * and the process's datagrams would be taken for duplicates. */
static void implicit_peer_over(const char *transports)
{
    enum { BIG = 100000 };
    tmx_context_h a = ctx_over(transports), b = ctx_over(transports);
    unsigned char small[100], r7buf[16], *big = malloc(BIG), *got = malloc(BIG);
    tmx_peer_t pa = add_addr_of(b, a), pb, imp;
    tmx_request_h r, r7;
    tmx_completion_t c;
    uint32_t n;

    assert_non_null(big);
    assert_non_null(got);
    fill(small, sizeof(small), 1);
    fill(big, BIG, 2);
    /* b -> a, eager: a learns b from its HELLO */
    assert_int_equal(tmx_trecv(a, TMX_ANY_SOURCE, got, BIG, 1, 0, NULL, &r), TMX_OK);
    send2(b, pa, small, sizeof(small), 1, a);
    c = wait2(r, a, b);
    assert_int_equal(c.status, TMX_OK);
    assert_true(c.source & TMX_PEER_IMPLICIT);
    check(got, sizeof(small), 1);
    imp = c.source;
    /* a answers through the implicit number */
    assert_int_equal(tmx_trecv(b, pa, got, BIG, 3, 0, NULL, &r), TMX_OK);
    assert_int_equal(tmx_tsend(a, imp, small, sizeof(small), 3, NULL, NULL), TMX_OK);
    c = wait2(r, b, a);
    assert_int_equal(c.status, TMX_OK);
    assert_int_equal(c.source, pa);
    /* rendezvous from the implicit peer: a reads b's buffer */
    assert_int_equal(tmx_tsend(b, pa, big, BIG, 2, NULL, &r), TMX_OK);
    {
        tmx_request_h rr;
        memset(got, 0, BIG);
        assert_int_equal(tmx_trecv(a, imp, got, BIG, 2, 0, NULL, &rr), TMX_OK);
        c = wait2(rr, a, b);
        assert_int_equal(c.status, TMX_OK);
        assert_int_equal(c.length, BIG);
        check(got, BIG, 2);
    }
    assert_int_equal(wait2(r, b, a).status, TMX_OK);
    /* a message waiting unreceived when a adds b moves to b's number */
    send2(b, pa, small, sizeof(small), 4, a);
    assert_int_equal(tmx_tprobe(a, TMX_ANY_SOURCE, 4, 0, 0, &c, NULL), TMX_OK);
    assert_int_equal(c.source, imp);
    /* and so does a receive posted naming the implicit number */
    assert_int_equal(tmx_trecv(a, imp, r7buf, sizeof(r7buf), 7, 0, NULL, &r7), TMX_OK);
    pb = add_addr_of(a, b);
    assert_int_equal(pb, 0);
    assert_int_equal(tmx_peer_count(a, &n), TMX_OK);
    assert_int_equal(n, 1);
    assert_int_equal(tmx_trecv(a, pb, got, BIG, 4, 0, NULL, &r), TMX_OK);
    c = wait2(r, a, b);
    assert_int_equal(c.status, TMX_OK);
    assert_int_equal(c.source, pb);
    send2(b, pa, got, 10, 7, a);
    c = wait2(r7, a, b);
    assert_int_equal(c.status, TMX_OK);
    assert_int_equal(c.source, pb);
    assert_int_equal(c.length, 10);
    send2(b, pa, small, sizeof(small), 5, a);
    assert_int_equal(tmx_trecv(a, TMX_ANY_SOURCE, got, BIG, 5, 0, NULL, &r), TMX_OK);
    assert_int_equal(wait2(r, a, b).source, pb);
    /* an empty message with no buffer (MPI sends those) */
    send2(b, pa, NULL, 0, 6, a);
    assert_int_equal(tmx_trecv(a, pb, NULL, 0, 6, 0, NULL, &r), TMX_OK);
    c = wait2(r, a, b);
    assert_int_equal(c.status, TMX_OK);
    assert_int_equal(c.length, 0);
    /* both ways through either number, eager and rendezvous */
    for (int k = 0; k < 2; k++) {
        tmx_peer_t to = k == 0 ? pb : imp;
        size_t len = k == 0 ? sizeof(small) : BIG;
        assert_int_equal(tmx_trecv(b, pa, got, BIG, 8, 0, NULL, &r), TMX_OK);
        send2(a, to, k == 0 ? small : big, len, 8, b);
        c = wait2(r, b, a);
        assert_int_equal(c.status, TMX_OK);
        assert_int_equal(c.length, len);
        check(got, len, k == 0 ? 1 : 2);
        memset(got, 0, BIG);
        assert_int_equal(tmx_trecv(a, pb, got, BIG, 9, 0, NULL, &r), TMX_OK);
        send2(b, pa, k == 0 ? small : big, len, 9, a);
        c = wait2(r, a, b);
        assert_int_equal(c.status, TMX_OK);
        assert_int_equal(c.source, pb);
        assert_int_equal(c.length, len);
        check(got, len, k == 0 ? 1 : 2);
    }
    /* a HELLO whose address is not its sender's is refused */
    {
        unsigned char pkt[sizeof(wire_tmh_t) + TMX_ADDRESS_MAX];
        size_t len = TMX_ADDRESS_MAX;
        uint64_t before = a->proto.dropped;
        wire_tmh_pack((wire_tmh_t *)(void *)pkt, WIRE_OP_HELLO, 0, 0, 0);
        assert_int_equal(tmx_address(b, pkt + sizeof(wire_tmh_t), &len), TMX_OK);
        proto_recv_cb(&a->proto, 0x1234567, pkt, sizeof(wire_tmh_t) + len);
        proto_recv_cb(&a->proto, 0x1234567, pkt, sizeof(wire_tmh_t) + 5);
        assert_int_equal(a->proto.dropped - before, 2);
    }
    free(big);
    free(got);
    assert_int_equal(tmx_context_destroy(a), TMX_OK);
    assert_int_equal(tmx_context_destroy(b), TMX_OK);
}

static void test_implicit_peer(void **state)
{
    (void)state;
    implicit_peer_over("self,shm");
}

static void test_implicit_peer_udp(void **state)
{
    (void)state;
    implicit_peer_over("self,udp");
}

/* A HELLO over udp from a process that was not added makes it a peer at
 * the address it carries: that address must name the host and port its
 * datagrams come from (a port per node: every process of a node has its
 * host's address and the node's port), else any process could make us
 * send to a third party. A raw socket plays the process. */
static void hello_dgram(tmx_context_h a, uint64_t x, int fd, uint16_t named_port)
{
    unsigned char blob[TMX_ADDRESS_MAX], dgram[sizeof(udp_hdr_t) + sizeof(wire_tmh_t) + TMX_ADDRESS_MAX];
    const size_t at = 16 + 8 + 2; /* the blob's header, then the udp section's name and length */
    size_t len = sizeof(blob), pkt;
    udp_addr_t ua;
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    uint64_t le = htole64(x);
    udp_hdr_t h;

    assert_int_equal(tmx_address(a, blob, &len), TMX_OK);
    assert_int_equal(len, at + sizeof(ua)); /* self,udp: the udp section only */
    memcpy(&ua, blob + at, sizeof(ua));
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    memcpy(blob + 8, &le, 8);               /* x's blob: a's with x's uuid */
    memcpy(blob + at + 4, &named_port, 2);  /* and the port it names */
    wire_tmh_pack((wire_tmh_t *)(void *)(dgram + sizeof(h)), WIRE_OP_HELLO, 0, 0, 0);
    memcpy(dgram + sizeof(h) + sizeof(wire_tmh_t), blob, len);
    pkt = sizeof(wire_tmh_t) + len;
    h = (udp_hdr_t){UDP_WIRE_VERSION, UDP_CH_DATA, htole16(UDP_FLAG_FIRST | UDP_FLAG_LAST), htole16((uint16_t)pkt),
                    sa.sin_port, ua.job_key, le, htole64(a->uuid), 0, {0, 0}, 0, htole64(pkt), 0, 0, 0,
                    ua.index, 0};
    memcpy(dgram, &h, sizeof(h));
    h.csum = htole32(util_crc32c(0, dgram, sizeof(h) + pkt));
    memcpy(dgram, &h, sizeof(h));
    sa.sin_port = ua.port;
    assert_int_equal(sendto(fd, dgram, sizeof(h) + pkt, 0, (struct sockaddr *)&sa, sizeof(sa)),
                     (ssize_t)(sizeof(h) + pkt));
}

static void hello_from_socket(tmx_context_h a, uint64_t x, int fd, uint16_t named_port)
{
    hello_dgram(a, x, fd, named_port);
    for (int i = 0; i < 1000; i++)
        tmx_progress(a);
}

static void test_implicit_peer_address_is_its_own(void **state)
{
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_TRANSPORTS | TMX_CONTEXT_FIELD_BOOT,
                              .transports = "self,udp",
                              .boot = TMX_BOOT_NONE};
    unsigned char blob[TMX_ADDRESS_MAX];
    size_t len = sizeof(blob);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof(sa);
    tmx_context_h a;
    uint64_t before;
    udp_addr_t ua;
    int fd;

    (void)state;
    assert_int_equal(tmx_context_create(&p, &a), TMX_OK);
    assert_int_equal(tmx_address(a, blob, &len), TMX_OK);
    memcpy(&ua, blob + len - sizeof(ua), sizeof(ua));
    sa.sin_addr.s_addr = ua.ip; /* the process is on a's host */
    assert_true((fd = socket(AF_INET, SOCK_DGRAM, 0)) >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    before = a->proto.dropped;
    hello_from_socket(a, 0x7e57ab1e01ULL, fd, htons(ntohs(sa.sin_port) ^ 1)); /* another port */
    assert_int_equal(core_peer_by_uuid(a, 0x7e57ab1e01ULL), TMX_PEER_NONE);
    assert_int_equal(a->proto.dropped - before, 1);
    hello_from_socket(a, 0x7e57ab1e02ULL, fd, sa.sin_port); /* its own */
    assert_true(core_peer_by_uuid(a, 0x7e57ab1e02ULL) & TMX_PEER_IMPLICIT);
    assert_int_equal(a->proto.dropped - before, 1);
    close(fd);
    assert_int_equal(tmx_context_destroy(a), TMX_OK);
}

/* ----------------------------------------------------------- threads */

/* A receive posted naming an implicit number, when tmx_peer_add then
 * numbers that process, keeps its place among the receives: a wildcard
 * posted after it does not take the process's next message, also with
 * the offload engine holding receives of every size. */
static void test_implicit_peer_recv_order(void **state)
{
    static const char *const off_all[] = {"TMX_OFFLOAD_MIN=0", NULL};

    (void)state;
    for (int off = 0; off < 2; off++) {
        tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_TRANSPORTS | TMX_CONTEXT_FIELD_BOOT |
                                                TMX_CONTEXT_FIELD_OFFLOAD | TMX_CONTEXT_FIELD_SETTINGS,
                                  .transports = "self,shm",
                                  .boot = TMX_BOOT_NONE,
                                  .offload = off,
                                  .settings = off_all};
        tmx_context_h a, b = ctx_none();
        tmx_peer_t pa, pb, imp;
        char named[8], any[8];
        tmx_request_h r, rn, ra;
        tmx_completion_t c;

        assert_int_equal(tmx_context_create(&p, &a), TMX_OK);
        pa = add_addr_of(b, a);
        assert_int_equal(tmx_trecv(a, TMX_ANY_SOURCE, named, sizeof(named), 1, 0, NULL, &r), TMX_OK);
        send2(b, pa, "hello", 6, 1, a);
        imp = wait2(r, a, b).source;
        assert_true(imp & TMX_PEER_IMPLICIT);
        assert_int_equal(tmx_trecv(a, imp, named, sizeof(named), 2, 0, NULL, &rn), TMX_OK);
        assert_int_equal(tmx_trecv(a, TMX_ANY_SOURCE, any, sizeof(any), 2, 0, NULL, &ra), TMX_OK);
        pb = add_addr_of(a, b);
        send2(b, pa, "first", 6, 2, a);
        c = wait2(rn, a, b);
        assert_int_equal(c.status, TMX_OK);
        assert_int_equal(c.source, pb);
        assert_string_equal(named, "first");
        assert_int_equal(tmx_request_test(ra, &c), TMX_INPROGRESS);
        assert_int_equal(tmx_request_cancel(ra), TMX_OK);
        assert_int_equal(tmx_request_free(ra), TMX_OK);
        assert_int_equal(tmx_context_destroy(a), TMX_OK);
        assert_int_equal(tmx_context_destroy(b), TMX_OK);
    }
}

typedef struct thr_arg {
    fixture_t *f;
    int id;
} thr_arg_t;

static void *thr_pingpong(void *p)
{
    thr_arg_t *a = p;
    enum { N = 2000 };

    for (int i = 0; i < N; i++) {
        uint64_t v = ((uint64_t)a->id << 32) | (unsigned)i, got = 0;
        uint64_t tag = ((uint64_t)a->id << 40) | (unsigned)i;
        tmx_request_h r;
        if (tmx_trecv(a->f->ctx, a->f->self, &got, 8, tag, 0, NULL, &r) != TMX_OK)
            return (void *)1;
        if (tmx_tsend(a->f->ctx, a->f->self, &v, 8, tag, NULL, NULL) != TMX_OK)
            return (void *)2;
        if (tmx_request_wait(r, -1, NULL) != TMX_OK || got != v)
            return (void *)3;
        tmx_request_free(r);
    }
    return NULL;
}

static void test_threads(void **state)
{
    fixture_t *f = *state;
    pthread_t t[4];
    thr_arg_t a[4];
    tmx_completion_t c[128];
    size_t n;

    for (int i = 0; i < 4; i++) {
        a[i] = (thr_arg_t){f, i + 1};
        assert_int_equal(pthread_create(&t[i], NULL, thr_pingpong, &a[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        void *rv;
        pthread_join(t[i], &rv);
        assert_null(rv);
    }
    do {
        assert_int_equal(tmx_cq_read(f->ctx, c, 128, &n), TMX_OK);
    } while (n > 0);
}

/* Sends one message (tag 1) to the fixture's own peer 50 ms from now. */
static void *thr_send_later(void *p)
{
    fixture_t *f = p;
    struct timespec ms50 = {0, 50 * 1000 * 1000};

    nanosleep(&ms50, NULL);
    return (void *)(intptr_t)tmx_tsend(f->ctx, f->self, "late", 5, 1, NULL, NULL);
}

/* A completion already waiting in the queue ends tmx_wait at once with a
 * positive count: 0 says the timeout passed, which it did not. */
static void test_wait_completion_waiting(void **state)
{
    fixture_t *f = *state;
    char buf[8];
    tmx_completion_t c;
    int64_t t0;

    assert_int_equal(tmx_trecv(f->ctx, f->self, buf, sizeof(buf), 3, 0, NULL, NULL), TMX_OK);
    assert_int_equal(tmx_tinject(f->ctx, f->self, "w", 2, 3, 0, 0), TMX_OK);
    for (int i = 0; i < 1000 && tmx_wait(f->ctx, 0) == 0; i++)
        ;
    /* both completions wait, unread */
    t0 = core_now_us();
    assert_true(tmx_wait(f->ctx, 2000000) > 0);
    assert_true(tmx_wait(f->ctx, 2000000) > 0);
    assert_true(core_now_us() - t0 < 1000000);
    c = cq_one(f->ctx);
    assert_int_equal(c.op, TMX_OP_TRECV);
    assert_string_equal(buf, "w");
    assert_int_equal(tmx_wait(f->ctx, 1000), 0); /* none left: the timeout */
}

/* A timeout too long to add to the clock (INT64_MAX: "as long as it
 * takes") waits like no limit, instead of timing out at once. */
static void test_wait_longest_timeout(void **state)
{
    fixture_t *f = *state;
    pthread_t t;
    tmx_request_h rr;
    tmx_completion_t c;
    char buf[8];
    size_t n;
    void *rv;

    assert_int_equal(tmx_trecv(f->ctx, f->self, buf, sizeof(buf), 1, 0, NULL, &rr), TMX_OK);
    assert_int_equal(pthread_create(&t, NULL, thr_send_later, f), 0);
    assert_int_equal(tmx_request_wait(rr, INT64_MAX, &c), TMX_OK);
    pthread_join(t, &rv);
    assert_int_equal((intptr_t)rv, TMX_OK);
    assert_string_equal(buf, "late");
    assert_int_equal(tmx_request_free(rr), TMX_OK);
    cq_one(f->ctx);
    cq_one(f->ctx);
    assert_int_equal(pthread_create(&t, NULL, thr_send_later, f), 0);
    assert_true(tmx_wait(f->ctx, INT64_MAX) >= 0);
    /* it returned for the send's completion, not at once */
    assert_int_equal(tmx_cq_read(f->ctx, &c, 1, &n), TMX_OK);
    assert_int_equal(n, 1);
    assert_int_equal(c.op, TMX_OP_TSEND);
    pthread_join(t, &rv);
    assert_int_equal((intptr_t)rv, TMX_OK);
    assert_int_equal(tmx_tprobe(f->ctx, f->self, 1, 0, 0, &c, NULL), TMX_OK);
}

/* A transport that finds work on every pass, for 2 s from its first. */
static int64_t busy_until_us;

static int busy_progress(tl_iface_t *iface)
{
    struct timespec t;
    int64_t now;

    (void)iface;
    clock_gettime(CLOCK_MONOTONIC, &t);
    now = (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
    if (busy_until_us == 0)
        busy_until_us = now + 2000000;
    return now < busy_until_us;
}

/* A wait times out on time while other traffic keeps every progress pass
 * busy (the timeout was looked at only in passes that found nothing). */
static void test_wait_timeout_while_busy(void **state)
{
    fixture_t *f = *state;
    tl_iface_t *iface = f->ctx->ifaces[0];
    const tl_ops_t *ops = iface->ops;
    tl_ops_t busy = *ops;
    struct timespec t0, t;
    tmx_request_h rr;
    char buf[8];
    long elapsed_us;

    busy.progress = busy_progress;
    busy_until_us = 0;
    assert_int_equal(tmx_trecv(f->ctx, f->self, buf, sizeof(buf), 99, 0, NULL, &rr), TMX_OK);
    iface->ops = &busy;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(tmx_request_wait(rr, 5000, NULL), TMX_ERR_TIMEOUT);
    clock_gettime(CLOCK_MONOTONIC, &t);
    iface->ops = ops;
    elapsed_us = (t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000;
    assert_true(elapsed_us < 1000000); /* not once the traffic stops, 2 s on */
    assert_int_equal(tmx_request_cancel(rr), TMX_OK);
    assert_int_equal(tmx_request_free(rr), TMX_OK);
}

/* Destroying a context with work outstanding frees everything. */
static void test_destroy_busy(void **state)
{
    fixture_t *f = *state;
    static unsigned char big[SELF_EAGER * 3];
    char buf[8] = {0};
    tmx_request_h r;
    tmx_message_h msg;
    tmx_completion_t info;

    assert_int_equal(tmx_trecv(f->ctx, f->self, buf, 8, 100, 0, NULL, &r), TMX_OK);
    assert_int_equal(tmx_tsend(f->ctx, f->self, big, sizeof(big), 200, NULL, NULL), TMX_OK);
    assert_int_equal(tmx_tsend(f->ctx, f->self, big, 100, 201, NULL, NULL), TMX_OK);
    assert_int_equal(tmx_tsend(f->ctx, f->self, big, 100, 202, NULL, NULL), TMX_OK);
    assert_int_equal(tmx_tprobe(f->ctx, f->self, 202, 0, TMX_PROBE_FLAG_CLAIM, &info, &msg), TMX_OK);
    assert_int_equal(tmx_tsend(f->ctx, f->self, big, 100, 203, NULL, NULL), TMX_OK);
}

/* The offload engine (TMX_OFFLOAD): two contexts, each the other's peer,
 * exchange messages of every protocol (eager, streamed, rendezvous) while
 * the application never progresses them: it only looks at its requests
 * with tmx_request_test, which does not progress. With the engine on
 * they complete, data intact; with it off they never do. */
static int offload_exchange_spin(const char *transports, int offload, int spin)
{
    static const size_t sizes[] = {8, 40000, 1u << 20, 4u << 20};
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_TRANSPORTS | TMX_CONTEXT_FIELD_BOOT |
                                            TMX_CONTEXT_FIELD_OFFLOAD,
                              .transports = transports,
                              .boot = TMX_BOOT_NONE,
                              .offload = offload};
    tmx_context_h a, b;
    unsigned char addr[TMX_ADDRESS_MAX];
    size_t len = sizeof(addr);
    tmx_peer_t to_b, to_a;
    int done_all = 1;

    assert_int_equal(tmx_context_create(&p, &a), TMX_OK);
    assert_int_equal(tmx_context_create(&p, &b), TMX_OK);
    assert_int_equal(tmx_address(b, addr, &len), TMX_OK);
    assert_int_equal(tmx_peer_add(a, addr, len, &to_b), TMX_OK);
    len = sizeof(addr);
    assert_int_equal(tmx_address(a, addr, &len), TMX_OK);
    assert_int_equal(tmx_peer_add(b, addr, len, &to_a), TMX_OK);
    /* spinning: the sizes below the engine's watch (64 KiB), which only
     * its housekeeping completes */
    for (size_t k = 0; k < (spin ? 2 : sizeof(sizes) / sizeof(sizes[0])); k++) {
        size_t n = sizes[k];
        unsigned char *src = malloc(n), *dst = calloc(1, n);
        tmx_request_h rr, sr;
        tmx_status_t rs = TMX_INPROGRESS, ss = TMX_INPROGRESS;
        assert_true(src && dst);
        fill(src, n, (unsigned)k);
        assert_int_equal(tmx_trecv(b, to_a, dst, n, 77 + k, 0, NULL, &rr), TMX_OK);
        assert_int_equal(tmx_tsend(a, to_b, src, n, 77 + k, NULL, &sr), TMX_OK);
        int64_t end = core_now_us() + (offload ? 5000000 : 200000);
        while ((rs == TMX_INPROGRESS || ss == TMX_INPROGRESS) && core_now_us() < end) {
            if (!spin)
                usleep(10000); /* computing: no progress from the application */
            rs = tmx_request_test(rr, NULL); /* spinning on it: no progress either */
            ss = tmx_request_test(sr, NULL);
        }
        if (offload) {
            if (rs != TMX_OK || ss != TMX_OK)
                fail_msg("%s, %zu bytes: receive %s, send %s", transports, n, tmx_strerror(rs),
                         tmx_strerror(ss));
            check(dst, n, (unsigned)k);
        }
        done_all &= rs == TMX_OK && ss == TMX_OK;
        /* finish both, so that the buffers can go */
        while (tmx_request_test(rr, NULL) == TMX_INPROGRESS ||
               tmx_request_test(sr, NULL) == TMX_INPROGRESS)
            tmx_progress(a), tmx_progress(b);
        assert_int_equal(tmx_request_test(rr, NULL), TMX_OK);
        tmx_request_free(rr);
        tmx_request_free(sr);
        free(src);
        free(dst);
    }
    if (offload && !spin) { /* the large receives went through the engine's list */
        off_stats_t st;
        off_engine_stats(b->proto.off, &st);
        assert_true(st.matched >= 1);
        /* over shm (one-sided copies, the default table) the engine's
         * thread had the senders write the rendezvous it matched (its own
         * reads would take the computing application's core), and the
         * table has no coop (it needs the computing owner's core); over
         * udp a write is no cheaper: it reads */
        tl_iface_t *shm = NULL;
        for (int i = 0; i < b->n_ifaces; i++) {
            if (strcmp(b->ifaces[i]->ops->name, "shm") == 0)
                shm = b->ifaces[i];
        }
        if (shm != NULL && tl_writes_free(shm) && !((const proto_tl_t *)shm->above)->set) {
            assert_true(b->proto.wr_engine >= 1);
            assert_int_equal(proto_tl_kind(shm->above, 16u << 20), PROTO_GET);
        } else if (shm == NULL) {
            assert_int_equal(b->proto.wr_engine, 0);
        }
    } else if (!offload) {
        assert_null(b->proto.off);
    }
    assert_int_equal(tmx_context_destroy(a), TMX_OK);
    assert_int_equal(tmx_context_destroy(b), TMX_OK);
    return done_all;
}

static int offload_exchange(const char *transports, int offload)
{
    return offload_exchange_spin(transports, offload, 0);
}

/* An application that spins on tmx_request_test, which never progresses:
 * the engine must not take those calls for progress (it once did, and
 * receives under 64 KiB never completed). */
static void test_offload_spinning_test(void **state)
{
    (void)state;
#ifdef RUNNING_ON_VALGRIND
    if (RUNNING_ON_VALGRIND) {
        unit_skip("valgrind runs one thread at a time: a spinning application holds the engine's "
                  "thread off for its whole time slice");
    }
#endif
    assert_true(offload_exchange_spin("self,shm", 1, 1));
    assert_true(offload_exchange_spin("udp", 1, 1));
}

static void test_offload_shm(void **state)
{
    (void)state;
    assert_true(offload_exchange("self,shm", 1));
    assert_false(offload_exchange("self,shm", 0));
}

/* A receive posted for a rendezvous that came before it, with the engine
 * on. From a sender whose engine runs (WIRE_FLAG_WRITER: it answers while
 * its application computes) the post returns at once and the rendezvous
 * waits for the next progress pass: the engine's, while the application
 * only tests, which has the sender write; or the application's own, in a
 * wait (blocking), which reads. From a sender without the engine the post
 * reads, which needs nothing of the sender. Every receive completes, and
 * without the application progressing unless it waits. */
static void post_after_rendezvous(int sender_engine, int blocking)
{
    const size_t n = 1u << 20;
    const char *set[] = {"TMX_OFFLOAD_MIN=0", NULL};
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_TRANSPORTS | TMX_CONTEXT_FIELD_BOOT |
                                            TMX_CONTEXT_FIELD_OFFLOAD | TMX_CONTEXT_FIELD_SETTINGS,
                              .transports = "self,shm",
                              .boot = TMX_BOOT_NONE,
                              .offload = 1,
                              .settings = set};
    tmx_context_params_t q = p;
    tmx_context_h a, b;
    unsigned char *src = malloc(n), *dst = calloc(1, n);
    tmx_request_h rr, sr;
    tmx_status_t rs = TMX_INPROGRESS, ss = TMX_INPROGRESS;
    uint64_t asked;

    assert_true(src && dst);
    q.offload = sender_engine;
    assert_int_equal(tmx_context_create(&q, &a), TMX_OK);
    assert_int_equal(tmx_context_create(&p, &b), TMX_OK);
    for (int i = 0; i < b->n_ifaces; i++) {
        if (strcmp(b->ifaces[i]->ops->name, "shm") == 0 &&
            (!tl_writes_free(b->ifaces[i]) || ((const proto_tl_t *)b->ifaces[i]->above)->set)) {
            tmx_context_destroy(a);
            tmx_context_destroy(b);
            unit_skip("shm has no one-sided writes here (TMX_SHM_CMA=off, or the kernel refuses them), "
                      "or TMX_PROTO sets its table");
        }
    }
    tmx_peer_t to_b = add_addr_of(a, b), from_a = add_addr_of(b, a);
    fill(src, n, 9);
    assert_int_equal(tmx_tsend(a, to_b, src, n, 5, NULL, &sr), TMX_OK);
    for (int64_t end = core_now_us() + 5000000; core_now_us() < end;) {
        if (tmx_tprobe(b, from_a, 5, TMX_TAG_EXACT, 0, NULL, NULL) == TMX_OK)
            break;
    }
    asked = b->proto.wr_engine;
    assert_int_equal(tmx_trecv(b, from_a, dst, n, 5, TMX_TAG_EXACT, NULL, &rr), TMX_OK);
    /* parked, not started by the post */
    assert_int_equal(tmx_request_test(rr, NULL), sender_engine ? TMX_INPROGRESS : TMX_OK);
    if (blocking)
        assert_int_equal(tmx_request_wait(rr, 5000000, NULL), TMX_OK);
    for (int64_t end = core_now_us() + 5000000;
         (rs == TMX_INPROGRESS || ss == TMX_INPROGRESS) && core_now_us() < end;) {
        usleep(1000);
        rs = tmx_request_test(rr, NULL);
        if (sender_engine)
            ss = tmx_request_test(sr, NULL);
        else /* nothing moves a's traffic but a's own calls */
            ss = rs == TMX_INPROGRESS ? TMX_INPROGRESS : tmx_request_wait(sr, 5000000, NULL);
    }
    assert_int_equal(rs, TMX_OK);
    assert_int_equal(ss, TMX_OK);
    check(dst, n, 9);
    if (!blocking) /* the wait's own pass may come first, or the engine's */
        assert_int_equal(b->proto.wr_engine, asked + (sender_engine ? 1 : 0));
    tmx_request_free(rr);
    tmx_request_free(sr);
    assert_int_equal(tmx_context_destroy(a), TMX_OK);
    assert_int_equal(tmx_context_destroy(b), TMX_OK);
    free(src);
    free(dst);
}

static void test_offload_post_after_rendezvous(void **state)
{
    (void)state;
    post_after_rendezvous(1, 0);
    post_after_rendezvous(1, 1);
    post_after_rendezvous(0, 0);
}

/* Two contexts over shm with the engine on, offers on and one-sided
 * writes; 0 (nothing open) where shm has no such writes. b has learnt that a writes (a rendezvous from a came). */
static int offer_pair(tmx_context_h *a, tmx_context_h *b, tmx_peer_t *to_b, tmx_peer_t *from_a)
{
    const size_t n = 1u << 20;
    const char *set[] = {"TMX_OFFLOAD_MIN=0", "TMX_OFFLOAD_OFFER=1", NULL};
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_TRANSPORTS | TMX_CONTEXT_FIELD_BOOT |
                                            TMX_CONTEXT_FIELD_OFFLOAD | TMX_CONTEXT_FIELD_SETTINGS,
                              .transports = "self,shm",
                              .boot = TMX_BOOT_NONE,
                              .offload = 1,
                              .settings = set};
    unsigned char *src = malloc(n), *dst = calloc(1, n);
    tmx_request_h rr, sr;

    assert_true(src && dst);
    assert_int_equal(tmx_context_create(&p, a), TMX_OK);
    assert_int_equal(tmx_context_create(&p, b), TMX_OK);
    for (int i = 0; i < (*b)->n_ifaces; i++) {
        if (strcmp((*b)->ifaces[i]->ops->name, "shm") == 0 &&
            (!tl_writes_free((*b)->ifaces[i]) || ((const proto_tl_t *)(*b)->ifaces[i]->above)->set)) {
            tmx_context_destroy(*a);
            tmx_context_destroy(*b);
            free(src);
            free(dst);
            return 0;
        }
    }
    *to_b = add_addr_of(*a, *b);
    *from_a = add_addr_of(*b, *a);
    fill(src, n, 3);
    assert_int_equal(tmx_tsend(*a, *to_b, src, n, 4, NULL, &sr), TMX_OK);
    assert_int_equal(tmx_trecv(*b, *from_a, dst, n, 4, TMX_TAG_EXACT, NULL, &rr), TMX_OK);
    assert_int_equal(tmx_request_wait(rr, 5000000, NULL), TMX_OK);
    assert_int_equal(tmx_request_wait(sr, 5000000, NULL), TMX_OK);
    check(dst, n, 3);
    tmx_request_free(rr);
    tmx_request_free(sr);
    free(src);
    free(dst);
    return 1;
}

/* Waits for r while its context's application does not progress (it
 * only tests): the engine's thread, and the peer's, move everything. */
static tmx_status_t test_until(tmx_request_h r, tmx_completion_t *out)
{
    tmx_status_t st = TMX_INPROGRESS;

    for (int64_t end = core_now_us() + 5000000; st == TMX_INPROGRESS && core_now_us() < end;) {
        usleep(200);
        st = tmx_request_test(r, out);
    }
    return st;
}

/* A large receive that names its sender and tag, posted before the
 * message, is offered to the sender (RTR), which writes into it while
 * the receiver's application computes (here: only tests); a cancel waits
 * for the sender's answer and cancels; a short message of the sender's
 * with the tag spends the offer and is received as any. */
static void test_offload_offer(void **state)
{
    const size_t n = 1u << 20;
    tmx_context_h a, b;
    tmx_peer_t to_b, from_a;
    unsigned char *src = malloc(n), *dst = calloc(1, n);
    tmx_request_h rr, sr;
    tmx_completion_t c;
    uint64_t written;

    (void)state;
    assert_true(src && dst);
    if (!offer_pair(&a, &b, &to_b, &from_a)) {
        free(src);
        free(dst);
        unit_skip("shm has no one-sided writes here (TMX_SHM_CMA=off, or the kernel refuses them), "
                  "or TMX_PROTO sets its table");
    }
    written = b->proto.rtr_written;
    /* a waits for its send: it takes the copy and writes, unless b's
     * engine, on a look, took it first and read; some of 5 are written */
    for (int i = 0; i < 5; i++) {
        fill(src, n, 5 + (unsigned)i);
        assert_int_equal(tmx_trecv(b, from_a, dst, n, 5, TMX_TAG_EXACT, NULL, &rr), TMX_OK);
        assert_int_equal(b->proto.rtr_sent, 1 + (uint64_t)i);
        assert_int_equal(tmx_tsend(a, to_b, src, n - 3, 5, NULL, &sr), TMX_OK);
        assert_int_equal(tmx_request_wait(sr, 5000000, NULL), TMX_OK);
        assert_int_equal(test_until(rr, &c), TMX_OK);
        assert_int_equal(c.length, n - 3);
        assert_int_equal(c.tag, 5);
        check(dst, n - 3, 5 + (unsigned)i);
        tmx_request_free(rr);
        tmx_request_free(sr);
    }
    assert_true(b->proto.rtr_written > written);
    written = b->proto.rtr_written;

    /* cancelled: the receiver takes the copy back at once */
    assert_int_equal(tmx_trecv(b, from_a, dst, n, 6, TMX_TAG_EXACT, NULL, &rr), TMX_OK);
    assert_int_equal(b->proto.rtr_sent, 6);
    assert_int_equal(tmx_request_cancel(rr), TMX_OK);
    assert_int_equal(tmx_request_wait(rr, 0, NULL), TMX_ERR_CANCELED);
    tmx_request_free(rr);

    /* spent by an eager message */
    assert_int_equal(tmx_trecv(b, from_a, dst, n, 7, TMX_TAG_EXACT, NULL, &rr), TMX_OK);
    assert_int_equal(b->proto.rtr_sent, 7);
    fill(src, 100, 6);
    assert_int_equal(tmx_tsend(a, to_b, src, 100, 7, NULL, &sr), TMX_OK);
    assert_int_equal(tmx_request_wait(sr, 5000000, NULL), TMX_OK);
    assert_int_equal(test_until(rr, &c), TMX_OK);
    assert_int_equal(c.length, 100);
    check(dst, 100, 6);
    assert_int_equal(b->proto.rtr_written, written);
    assert_int_equal(b->proto.n_wr_wait, 0);
    tmx_request_free(rr);
    tmx_request_free(sr);
    assert_int_equal(tmx_context_destroy(a), TMX_OK);
    assert_int_equal(tmx_context_destroy(b), TMX_OK);
    free(src);
    free(dst);
}

/* A medium message (a shm span) half taken when a receive it goes to is
 * posted: that receive is not offered (the span is counted, but matched
 * only when whole), takes the span, and a later long message with the
 * tag goes to the next receive, the first one's buffer untouched. */
static void test_offload_offer_stream(void **state)
{
    const size_t n = 1u << 20, mid = 30000;
    tmx_context_h a, b;
    tmx_peer_t to_b, from_a;
    unsigned char *small = calloc(1, 1000), *span = malloc(mid), *big = malloc(n);
    unsigned char *dst = calloc(1, n), *dst2 = calloc(1, n);
    tmx_request_h rr, rr2, sr;
    tmx_completion_t c;
    size_t changed = 0;

    (void)state;
    assert_true(small && span && big && dst && dst2);
    if (!offer_pair(&a, &b, &to_b, &from_a)) {
        free(small), free(span), free(big), free(dst), free(dst2);
        unit_skip("shm has no one-sided writes here (TMX_SHM_CMA=off, or the kernel refuses them), "
                  "or TMX_PROTO sets its table");
    }
    fill(span, mid, 1);
    fill(big, n, 9);
    /* enough short messages ahead that one pass of b stops inside the span */
    for (int i = 0; i < 62; i++)
        assert_int_equal(tmx_tsend(a, to_b, small, 1000, 99, NULL, NULL), TMX_OK);
    assert_int_equal(tmx_tsend(a, to_b, span, mid, 7, NULL, NULL), TMX_OK);
    tmx_progress(b);
    assert_int_equal(tmx_trecv(b, from_a, dst, n, 7, TMX_TAG_EXACT, NULL, &rr), TMX_OK);
    assert_int_equal(test_until(rr, &c), TMX_OK);
    assert_int_equal(c.length, mid);
    check(dst, mid, 1);
    tmx_request_free(rr);
    memset(dst, 0xee, n); /* the application reuses it */
    assert_int_equal(tmx_tsend(a, to_b, big, n, 7, NULL, &sr), TMX_OK);
    for (int i = 0; i < 20; i++)
        tmx_progress(a);
    assert_int_equal(tmx_trecv(b, from_a, dst2, n, 7, TMX_TAG_EXACT, NULL, &rr2), TMX_OK);
    assert_int_equal(tmx_request_wait(rr2, 5000000, &c), TMX_OK);
    assert_int_equal(tmx_request_wait(sr, 5000000, NULL), TMX_OK);
    assert_int_equal(c.length, n);
    check(dst2, n, 9);
    for (size_t j = 0; j < n; j++)
        changed += dst[j] != 0xee;
    assert_int_equal(changed, 0);
    assert_int_equal(b->proto.n_wr_wait, 0);
    tmx_request_free(rr2);
    tmx_request_free(sr);
    for (int i = 0; i < 62; i++) { /* the short ones */
        assert_int_equal(tmx_trecv(b, from_a, dst, 1000, 99, TMX_TAG_EXACT, NULL, &rr), TMX_OK);
        assert_int_equal(tmx_request_wait(rr, 5000000, NULL), TMX_OK);
        tmx_request_free(rr);
    }
    assert_int_equal(tmx_context_destroy(a), TMX_OK);
    assert_int_equal(tmx_context_destroy(b), TMX_OK);
    free(small), free(span), free(big), free(dst), free(dst2);
}

/* MPI's order with offers: messages of one tag, short and long mixed,
 * sent while receives for them are posted, some before and some after
 * their message came, both engines running: each receive gets the
 * message of its rank in the sequence, whether it was written into an
 * offer, read, or copied. */
static void test_offload_offer_order(void **state)
{
    enum { N = 12, ROUNDS = 30 };
    const size_t big = 200000, room = 262144;
    tmx_context_h a, b;
    tmx_peer_t to_b, from_a;
    unsigned char *src[N], *dst[N];
    tmx_request_h rr[N], sr[N];
    unsigned seed = 11;

    (void)state;
    if (!offer_pair(&a, &b, &to_b, &from_a))
        unit_skip("shm has no one-sided writes here (TMX_SHM_CMA=off, or the kernel refuses them), "
                  "or TMX_PROTO sets its table");
    for (int i = 0; i < N; i++) {
        src[i] = malloc(big);
        dst[i] = malloc(room);
        assert_true(src[i] && dst[i]);
    }
    for (int round = 0; round < ROUNDS; round++) {
        int posted = 0, sent = 0;
        for (int i = 0; i < N; i++) {
            fill(src[i], big, (unsigned)(round * N + i));
            memset(dst[i], 0, room);
        }
        while (posted < N || sent < N) {
            seed = seed * 1103515245u + 12345u;
            if (sent < N && (posted == N || (seed >> 16) % 2)) {
                size_t len = (sent + round) % 3 == 0 ? 100 : big;
                assert_int_equal(tmx_tsend(a, to_b, src[sent], len, 5, NULL, &sr[sent]), TMX_OK);
                sent++;
            } else {
                assert_int_equal(tmx_trecv(b, from_a, dst[posted], room, 5, TMX_TAG_EXACT, NULL, &rr[posted]),
                                 TMX_OK);
                posted++;
            }
            if ((seed >> 20) % 4 == 0)
                usleep((seed >> 8) % 50);
        }
        for (int i = 0; i < N; i++) {
            tmx_completion_t c;
            size_t len = (i + round) % 3 == 0 ? 100 : big;
            assert_int_equal(tmx_request_wait(rr[i], 5000000, &c), TMX_OK);
            assert_int_equal(c.length, len);
            check(dst[i], len, (unsigned)(round * N + i));
            tmx_request_free(rr[i]);
        }
        for (int i = 0; i < N; i++) {
            assert_int_equal(tmx_request_wait(sr[i], 5000000, NULL), TMX_OK);
            tmx_request_free(sr[i]);
        }
    }
    print_message("offers: %llu made, %llu written into\n", (unsigned long long)b->proto.rtr_sent,
                  (unsigned long long)b->proto.rtr_written);
    assert_true(b->proto.rtr_sent > 0);
    for (int i = 0; i < b->n_ifaces; i++) { /* every claim word closed again */
        if (strcmp(b->ifaces[i]->ops->name, "shm") == 0)
            for (int w = 0; w < SHM_N_OFFERS; w++)
                assert_int_equal(atomic_load(&((shm_iface_t *)b->ifaces[i])->seg->offers[w]) & 3,
                                 SHM_OFFER_FREE);
    }
    assert_int_equal(tmx_context_destroy(a), TMX_OK);
    assert_int_equal(tmx_context_destroy(b), TMX_OK);
    for (int i = 0; i < N; i++) {
        free(src[i]);
        free(dst[i]);
    }
}

static void test_offload_udp(void **state)
{
    (void)state;
    assert_true(offload_exchange("udp", 1));
    assert_false(offload_exchange("udp", 0));
}

/* A context with the engine on is used as usual, from one thread, with
 * progress: the engine keeps out of its way but must not get in it. */
static void test_offload_with_progress(void **state)
{
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_OFFLOAD | TMX_CONTEXT_FIELD_BOOT,
                              .offload = 1,
                              .boot = TMX_BOOT_NONE};
    tmx_context_params_t bad = {.field_mask = TMX_CONTEXT_FIELD_OFFLOAD, .offload = 2};
    tmx_context_h c;
    unsigned char addr[TMX_ADDRESS_MAX], buf[64];
    size_t len = sizeof(addr);
    tmx_peer_t self;

    (void)state;
    assert_int_equal(tmx_context_create(&bad, &c), TMX_ERR_INVALID);
    assert_int_equal(tmx_context_create(&p, &c), TMX_OK);
    assert_int_equal(tmx_address(c, addr, &len), TMX_OK);
    assert_int_equal(tmx_peer_add(c, addr, len, &self), TMX_OK);
    for (unsigned i = 0; i < 20000; i++) {
        tmx_request_h r;
        unsigned char out[64];
        fill(out, sizeof(out), i);
        assert_int_equal(tmx_trecv(c, self, buf, sizeof(buf), i, 0, NULL, &r), TMX_OK);
        assert_int_equal(tmx_tsend(c, self, out, sizeof(out), i, NULL, NULL), TMX_OK);
        assert_int_equal(tmx_request_wait(r, 5000000, NULL), TMX_OK);
        tmx_request_free(r);
        check(buf, sizeof(buf), i);
    }
    assert_int_equal(tmx_context_destroy(c), TMX_OK);
}

/* The offload engine must not change what an MPI library sees: the same
 * receives get the same messages, in the same order, with the same
 * statuses, as without it. Two senders and a receiver whose engine holds
 * receives of every size in a list of 4 run one random script of
 * receives (named or any source, exact, masked or any tag, 0 bytes to
 * 300 000, so that eager, streamed and rendezvous messages are truncated),
 * sends (some synchronous), cancels, probes and claims, once with the
 * engine and once without; after each step both settle, so that the
 * script alone decides. Every completion, probe and cancel is logged and
 * the two logs must be equal. */
enum { OFFD_STEPS = 1500, OFFD_RECVS = OFFD_STEPS };

typedef struct offd_recv {
    tmx_request_h r;
    unsigned char *buf;
    size_t len;
    int done;
} offd_recv_t;

static void offd_settle(tmx_context_h *c, int n)
{
    for (int quiet = 0; quiet < 20;) {
        int ev = 0;
        for (int i = 0; i < n; i++)
            ev += tmx_progress(c[i]);
        quiet = ev > 0 ? 0 : quiet + 1;
    }
}

static uint32_t offd_sum(const unsigned char *b, size_t n)
{
    uint32_t h = 2166136261u;

    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 16777619u;
    return h;
}

static void offd_log_comp(char *log, size_t room, size_t *at, const char *what, unsigned id,
                          tmx_status_t st, const tmx_completion_t *c, const unsigned char *buf)
{
    int n = snprintf(log + *at, room - *at, "%s %u: %d", what, id, (int)st);

    if (n > 0)
        *at += (size_t)n;
    if (st != TMX_ERR_CANCELED && st != TMX_ERR_NO_MESSAGE && c != NULL) {
        n = snprintf(log + *at, room - *at, " src %u tag %llu len %zu/%zu sum %08x", c->source,
                     (unsigned long long)c->tag, c->length, c->msg_length,
                     buf != NULL ? offd_sum(buf, c->length) : 0);
        if (n > 0)
            *at += (size_t)n;
    }
    if (*at + 1 < room)
        log[(*at)++] = '\n';
    log[*at] = 0;
}

/* Logs the receives that completed since the last look, in the order of
 * their posts. */
static void offd_reap(offd_recv_t *rv, unsigned n, char *log, size_t room, size_t *at)
{
    for (unsigned i = 0; i < n; i++) {
        tmx_completion_t c;
        tmx_status_t st;
        if (rv[i].done || (st = tmx_request_test(rv[i].r, &c)) == TMX_INPROGRESS)
            continue;
        rv[i].done = 1;
        offd_log_comp(log, room, at, "recv", i, st, &c, rv[i].buf);
        tmx_request_free(rv[i].r);
    }
}

static char *offd_run(int offload, unsigned seed)
{
    static const size_t sizes[] = {0, 8, 1000, 30000, 100000, 300000};
    static const uint64_t ignores[] = {TMX_TAG_EXACT, 1, TMX_TAG_ANY};
    static const char *const set[] = {"TMX_OFFLOAD_MIN=0", "TMX_OFFLOAD_TAGS=4", NULL};
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_TRANSPORTS | TMX_CONTEXT_FIELD_BOOT |
                                            TMX_CONTEXT_FIELD_OFFLOAD | TMX_CONTEXT_FIELD_SETTINGS,
                              .transports = "self,shm",
                              .boot = TMX_BOOT_NONE,
                              .offload = offload,
                              .settings = set};
    tmx_context_h c[3];
    tmx_peer_t to_b[2], from[2];
    offd_recv_t *rv = calloc(OFFD_RECVS, sizeof(*rv));
    unsigned char **sbuf = calloc(OFFD_STEPS, sizeof(*sbuf));
    size_t room = (size_t)OFFD_STEPS * 2 * 128, at = 0;
    char *log = malloc(room);
    unsigned nr = 0, ns = 0;

    assert_true(rv && sbuf && log);
    log[0] = 0;
    {
        tmx_context_params_t q = p;
        q.offload = 0;
        assert_int_equal(tmx_context_create(&q, &c[0]), TMX_OK);
        assert_int_equal(tmx_context_create(&q, &c[1]), TMX_OK);
    }
    assert_int_equal(tmx_context_create(&p, &c[2]), TMX_OK);
    for (int i = 0; i < 2; i++) {
        to_b[i] = add_addr_of(c[i], c[2]);
        from[i] = add_addr_of(c[2], c[i]);
    }
    srand(seed);
    for (unsigned step = 0; step < OFFD_STEPS; step++) {
        int what = rand() % 16;
        int s = rand() % 2;
        uint64_t tag = (uint64_t)(rand() % 4);
        if (what < 6) { /* a receive */
            int src = rand() % 3;
            offd_recv_t *r = &rv[nr];
            r->len = sizes[rand() % 6];
            r->buf = malloc(r->len + 1);
            assert_non_null(r->buf);
            assert_int_equal(tmx_trecv(c[2], src == 2 ? TMX_ANY_SOURCE : from[src], r->buf, r->len,
                                       tag, ignores[rand() % 3], NULL, &r->r),
                             TMX_OK);
            nr++;
        } else if (what < 12) { /* a send */
            size_t n = sizes[rand() % 6];
            tmx_op_params_t sp = {.field_mask = TMX_OP_FIELD_FLAGS,
                                  .flags = TMX_OP_FLAG_NO_CQ | (rand() % 4 == 0 ? TMX_OP_FLAG_SYNC : 0)};
            sbuf[ns] = malloc(n + 1);
            assert_non_null(sbuf[ns]);
            fill(sbuf[ns], n, ns);
            assert_int_equal(tmx_tsend(c[s], to_b[s], sbuf[ns], n, tag, &sp, NULL), TMX_OK);
            ns++;
        } else if (what < 14 && nr > 0) { /* a cancel */
            unsigned i = (unsigned)rand() % nr;
            if (!rv[i].done) {
                int n = snprintf(log + at, room - at, "cancel %u: %d\n", i,
                                 (int)tmx_request_cancel(rv[i].r));
                at += n > 0 ? (size_t)n : 0;
            }
        } else { /* a probe, or a claim and its receive */
            int src = rand() % 3;
            int claim = what == 15;
            tmx_completion_t info;
            tmx_message_h msg;
            tmx_status_t st = tmx_tprobe(c[2], src == 2 ? TMX_ANY_SOURCE : from[src], tag,
                                         ignores[rand() % 3], claim ? TMX_PROBE_FLAG_CLAIM : 0, &info,
                                         claim ? &msg : NULL);
            offd_log_comp(log, room, &at, claim ? "claim" : "probe", step, st, &info, NULL);
            if (st == TMX_OK && claim) {
                offd_recv_t *r = &rv[nr++];
                r->len = sizes[rand() % 6];
                r->buf = malloc(r->len + 1);
                assert_non_null(r->buf);
                assert_int_equal(tmx_mrecv(c[2], msg, r->buf, r->len, NULL, &r->r), TMX_OK);
            }
        }
        offd_settle(c, 3);
        offd_reap(rv, nr, log, room, &at);
    }
    for (unsigned i = 0; i < nr; i++) {
        if (!rv[i].done)
            assert_int_equal(tmx_request_cancel(rv[i].r), TMX_OK);
    }
    offd_settle(c, 3);
    offd_reap(rv, nr, log, room, &at);
    for (int i = 0; i < 3; i++)
        assert_int_equal(tmx_context_destroy(c[i]), TMX_OK);
    for (unsigned i = 0; i < nr; i++)
        free(rv[i].buf);
    for (unsigned i = 0; i < ns; i++)
        free(sbuf[i]);
    free(rv);
    free(sbuf);
    return log;
}

/* Runs a script (run) with the engine off and on, seeds 1 to 3: every
 * line of the two logs must be the same. */
static void offd_compare(char *(*run)(int, unsigned))
{
    for (unsigned seed = 1; seed <= 3; seed++) {
        char *off = run(0, seed), *on = run(1, seed);
        if (strcmp(off, on) != 0) {
            const char *a = off, *b = on;
            unsigned line = 1;
            while (*a && *a == *b) {
                line += *a == '\n';
                a++, b++;
            }
            while (a > off && a[-1] != '\n')
                a--, b--;
            fail_msg("seed %u, line %u: without the engine \"%.120s\", with it \"%.120s\"", seed,
                     line, a, b);
        }
        free(off);
        free(on);
    }
}

static void test_offload_same_as_software(void **state)
{
    (void)state;
    offd_compare(offd_run);
}

/* The same without settling: the script runs at full speed, the engine's
 * thread racing it. Each sender has tags of its own and receives never
 * mix them, so MPI's rules (one sender's messages in order, each to the
 * earliest posted receive that matches) decide every match whatever the
 * timing; the receives left at the end are given catch-alls. */
static char *offd_run_unsettled(int offload, unsigned seed)
{
    enum { STEPS = 3000 };
    static const size_t sizes[] = {0, 8, 1000, 30000, 100000, 300000};
    static const char *const set[] = {"TMX_OFFLOAD_MIN=0", "TMX_OFFLOAD_TAGS=4", NULL};
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_TRANSPORTS | TMX_CONTEXT_FIELD_BOOT |
                                            TMX_CONTEXT_FIELD_OFFLOAD | TMX_CONTEXT_FIELD_SETTINGS,
                              .transports = "self,shm",
                              .boot = TMX_BOOT_NONE,
                              .offload = offload,
                              .settings = set};
    tmx_context_h c[3];
    tmx_peer_t to_b[2], from[2];
    offd_recv_t *rv = calloc(STEPS + 2, sizeof(*rv));
    unsigned char **sbuf = calloc(STEPS, sizeof(*sbuf));
    tmx_request_h *sreq = calloc(STEPS, sizeof(*sreq));
    size_t room = (size_t)STEPS * 128, at = 0;
    char *log = malloc(room);
    unsigned nr = 0, ns = 0, sent[2] = {0, 0};

    assert_true(rv && sbuf && sreq && log);
    log[0] = 0;
    c[0] = ctx_none();
    c[1] = ctx_none();
    assert_int_equal(tmx_context_create(&p, &c[2]), TMX_OK);
    for (int i = 0; i < 2; i++) {
        to_b[i] = add_addr_of(c[i], c[2]);
        from[i] = add_addr_of(c[2], c[i]);
    }
    srand(seed);
    for (unsigned step = 0; step < STEPS; step++) {
        int s = rand() % 2;
        uint64_t tag = (uint64_t)(4 * s + rand() % 4);
        if (rand() % 2) { /* a receive: named, or any source with the tag's sender's mask */
            int how = rand() % 4;
            offd_recv_t *r = &rv[nr++];
            r->len = sizes[rand() % 6];
            r->buf = malloc(r->len + 1);
            assert_non_null(r->buf);
            assert_int_equal(tmx_trecv(c[2], how == 0 ? TMX_ANY_SOURCE : from[s], r->buf, r->len, tag,
                                       how == 1 ? TMX_TAG_ANY : how == 2 ? 1 : TMX_TAG_EXACT, NULL, &r->r),
                             TMX_OK);
        } else {
            size_t n = sizes[rand() % 6];
            tmx_op_params_t sp = {.field_mask = TMX_OP_FIELD_FLAGS,
                                  .flags = rand() % 4 == 0 ? TMX_OP_FLAG_SYNC : 0};
            sbuf[ns] = malloc(n + 1);
            assert_non_null(sbuf[ns]);
            fill(sbuf[ns], n, ns);
            assert_int_equal(tmx_tsend(c[s], to_b[s], sbuf[ns], n, tag, &sp, &sreq[ns]), TMX_OK);
            ns++;
            sent[s]++;
        }
        tmx_progress(c[rand() % 3]);
    }
    /* whatever is left, in order: every message is here once all settles */
    offd_settle(c, 3);
    for (int s = 0; s < 2; s++) {
        static unsigned char sink[300000];
        tmx_request_h r;
        while (tmx_tprobe(c[2], from[s], 0, TMX_TAG_ANY, 0, NULL, NULL) == TMX_OK) {
            assert_int_equal(tmx_trecv(c[2], from[s], sink, sizeof(sink), 0, TMX_TAG_ANY, NULL, &r), TMX_OK);
            assert_int_not_equal(tmx_request_wait(r, -1, NULL), TMX_INPROGRESS);
            tmx_request_free(r);
        }
    }
    offd_settle(c, 3);
    offd_reap(rv, nr, log, room, &at);
    for (unsigned i = 0; i < nr; i++) {
        if (!rv[i].done)
            assert_int_equal(tmx_request_cancel(rv[i].r), TMX_OK);
    }
    offd_reap(rv, nr, log, room, &at);
    for (unsigned i = 0; i < ns; i++) {
        assert_int_equal(tmx_request_wait(sreq[i], 10000000, NULL), TMX_OK);
        tmx_request_free(sreq[i]);
    }
    for (int i = 0; i < 3; i++)
        assert_int_equal(tmx_context_destroy(c[i]), TMX_OK);
    for (unsigned i = 0; i < nr; i++)
        free(rv[i].buf);
    for (unsigned i = 0; i < ns; i++)
        free(sbuf[i]);
    free(rv);
    free(sbuf);
    free(sreq);
    return log;
}

static void test_offload_same_as_software_racing(void **state)
{
    (void)state;
    offd_compare(offd_run_unsettled);
}

/* The offload engine with several application threads (TMX_THREAD_MULTIPLE):
 * each of three threads receives its own tag's messages, cancelling some
 * receives right after posting them, while the engine and a sender run.
 * Whatever the cancels hit, each tag's messages must arrive once each, in
 * the order sent (MPI's order of one sender's messages), whole or
 * truncated as the buffer says. */
enum { OFFMT_THREADS = 3, OFFMT_N = 300 };

typedef struct offmt {
    tmx_context_h a, b;
    tmx_peer_t to_b, from_a;
    int id;
    int bad;
} offmt_t;

static size_t offmt_size(unsigned seq)
{
    static const size_t sizes[] = {8, 1000, 30000, 100000};

    return sizes[seq % 4];
}

static void *offmt_recv(void *p)
{
    offmt_t *t = p;
    unsigned next = 0, seed = (unsigned)t->id;
    unsigned char *buf = malloc(100000);

    while (buf != NULL && next < OFFMT_N && !t->bad) {
        size_t len = rand_r(&seed) % 2 ? 100000 : 8;
        tmx_request_h r;
        tmx_completion_t c;
        tmx_status_t st;
        uint64_t seq;
        if (tmx_trecv(t->b, t->from_a, buf, len, (uint64_t)t->id, 0, NULL, &r) != TMX_OK) {
            t->bad = 1;
            break;
        }
        if (rand_r(&seed) % 3 == 0)
            (void)tmx_request_cancel(r); /* may race the message: then BUSY */
        st = tmx_request_wait(r, 20000000, &c);
        tmx_request_free(r);
        if (st == TMX_ERR_CANCELED)
            continue;
        memcpy(&seq, buf, sizeof(seq));
        if ((st != TMX_OK && st != TMX_ERR_TRUNCATED) || seq != next ||
            c.msg_length != offmt_size(next) || c.length != (len < c.msg_length ? len : c.msg_length)) {
            fprintf(stderr, "tag %d: %s, seq %llu (%u expected), %zu of %zu bytes\n", t->id,
                    tmx_strerror(st), (unsigned long long)seq, next, c.length, c.msg_length);
            t->bad = 1;
            break;
        }
        next++;
    }
    free(buf);
    return NULL;
}

static void *offmt_send(void *p)
{
    offmt_t *t = p;
    unsigned char *buf = calloc(OFFMT_THREADS * OFFMT_N, 100000);
    tmx_request_h *r = calloc(OFFMT_THREADS * OFFMT_N, sizeof(*r));

    for (unsigned i = 0; buf != NULL && r != NULL && i < OFFMT_N; i++) {
        for (int k = 0; k < OFFMT_THREADS; k++) {
            unsigned char *b = buf + (size_t)(i * OFFMT_THREADS + (unsigned)k) * 100000;
            uint64_t seq = i;
            tmx_status_t st;
            memcpy(b, &seq, sizeof(seq));
            while ((st = tmx_tsend(t->a, t->to_b, b, offmt_size(i), (uint64_t)k, NULL,
                                   &r[i * OFFMT_THREADS + (unsigned)k])) == TMX_ERR_AGAIN)
                tmx_progress(t->a);
            if (st != TMX_OK)
                t->bad = 1;
        }
    }
    for (unsigned i = 0; r != NULL && i < OFFMT_THREADS * OFFMT_N; i++) {
        if (r[i] != NULL && tmx_request_wait(r[i], 20000000, NULL) != TMX_OK)
            t->bad = 1;
        if (r[i] != NULL)
            tmx_request_free(r[i]);
    }
    t->bad |= buf == NULL || r == NULL;
    free(buf);
    free(r);
    return NULL;
}

static void test_offload_threads_cancel(void **state)
{
    static const char *const set[] = {"TMX_OFFLOAD_MIN=0", "TMX_OFFLOAD_TAGS=4", NULL};
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_TRANSPORTS | TMX_CONTEXT_FIELD_BOOT |
                                            TMX_CONTEXT_FIELD_OFFLOAD | TMX_CONTEXT_FIELD_SETTINGS |
                                            TMX_CONTEXT_FIELD_THREAD_MODE,
                              .thread_mode = TMX_THREAD_MULTIPLE,
                              .transports = "self,shm",
                              .boot = TMX_BOOT_NONE,
                              .offload = 1,
                              .settings = set};
    offmt_t t[OFFMT_THREADS + 1];
    pthread_t th[OFFMT_THREADS + 1];
    tmx_context_h a, b;
    tmx_peer_t to_b, from_a;

    (void)state;
    assert_int_equal(tmx_context_create(&p, &a), TMX_OK);
    assert_int_equal(tmx_context_create(&p, &b), TMX_OK);
    to_b = add_addr_of(a, b);
    from_a = add_addr_of(b, a);
    for (int i = 0; i <= OFFMT_THREADS; i++)
        t[i] = (offmt_t){.a = a, .b = b, .to_b = to_b, .from_a = from_a, .id = i};
    for (int i = 0; i <= OFFMT_THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, i < OFFMT_THREADS ? offmt_recv : offmt_send, &t[i]), 0);
    for (int i = 0; i <= OFFMT_THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_false(t[i].bad);
    }
    assert_int_equal(tmx_context_destroy(a), TMX_OK);
    assert_int_equal(tmx_context_destroy(b), TMX_OK);
}

/* The sender's context goes while the receiver reads its rendezvous
 * message, after a few progress passes of both, the receive held by the
 * offload engine and, to compare, without it: the receive must end,
 * failed with its peer (as shm's test_destroyed_sender_not_read has it)
 * or, if the read was done, whole. udp's read of a context that was
 * closing once ended with TMX_ERR_NOT_FOUND, the closing context's answer
 * to a read of memory it no longer lends. */
static void test_offload_sender_dies_mid_read(void **state)
{
    enum { BIG = 4 << 20 };
    static const char *const set[] = {"TMX_OFFLOAD_MIN=0", NULL};
    static const char *const tls[] = {"udp", "self,shm"};
    unsigned char *big = malloc(BIG), *got = malloc(BIG);

    (void)state;
    assert_non_null(big);
    assert_non_null(got);
    for (int k = 0; k < 2 * 2 * 4; k++) {
        tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_TRANSPORTS | TMX_CONTEXT_FIELD_BOOT |
                                                TMX_CONTEXT_FIELD_OFFLOAD | TMX_CONTEXT_FIELD_SETTINGS,
                                  .transports = tls[k % 2],
                                  .boot = TMX_BOOT_NONE,
                                  .offload = (k / 2) % 2,
                                  .settings = set};
        tmx_context_h a, b;
        tmx_peer_t pb, pa;
        tmx_request_h sr, rr;
        tmx_completion_t c;
        tmx_status_t st;

        assert_int_equal(tmx_context_create(&p, &a), TMX_OK);
        assert_int_equal(tmx_context_create(&p, &b), TMX_OK);
        pb = add_addr_of(a, b);
        pa = add_addr_of(b, a);
        fill(big, BIG, 3);
        memset(got, 0, BIG);
        assert_int_equal(tmx_trecv(b, pa, got, BIG, 9, 0, NULL, &rr), TMX_OK);
        assert_int_equal(tmx_tsend(a, pb, big, BIG, 9, NULL, &sr), TMX_OK);
        (void)sr; /* abandoned with its context */
        for (int i = 0; i < k / 4; i++) {
            tmx_progress(a);
            tmx_progress(b);
        }
        assert_int_equal(tmx_context_destroy(a), TMX_OK);
        st = tmx_request_wait(rr, 30000000, &c);
        if (st != TMX_OK && st != TMX_ERR_PEER_FAILED)
            fail_msg("%s, engine %s, %d passes: the receive ended with %s", tls[k % 2],
                     (k / 2) % 2 ? "on" : "off", k / 4, tmx_strerror(st));
        if (st == TMX_OK)
            check(got, BIG, 3);
        assert_int_equal(tmx_request_free(rr), TMX_OK);
        assert_int_equal(tmx_context_destroy(b), TMX_OK);
    }
    free(big);
    free(got);
}

/* The receiving context is destroyed while its offload engine holds
 * receives and reads rendezvous messages into some of them, the
 * application not progressing (the engine's thread does): nothing may
 * touch the freed context or the receive buffers after it returns. */
static void test_offload_destroy_while_reading(void **state)
{
    enum { N = 16, BIG = 1 << 20 };
    static const char *const set[] = {"TMX_OFFLOAD_MIN=0", "TMX_OFFLOAD_TAGS=8", NULL};
    static const char *const tls[] = {"udp", "self,shm"};
    unsigned char *big = malloc(BIG);

    (void)state;
    assert_non_null(big);
    fill(big, BIG, 5);
    for (int k = 0; k < 2 * 4; k++) {
        tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_TRANSPORTS | TMX_CONTEXT_FIELD_BOOT |
                                                TMX_CONTEXT_FIELD_OFFLOAD | TMX_CONTEXT_FIELD_SETTINGS,
                                  .transports = tls[k % 2],
                                  .boot = TMX_BOOT_NONE,
                                  .offload = 1,
                                  .settings = set};
        tmx_context_h a, b;
        tmx_peer_t pb, pa;
        unsigned char *got[N];
        struct timespec ts = {0, (long)(k / 2) * 300 * 1000};

        assert_int_equal(tmx_context_create(&p, &a), TMX_OK);
        assert_int_equal(tmx_context_create(&p, &b), TMX_OK);
        pb = add_addr_of(a, b);
        pa = add_addr_of(b, a);
        for (int i = 0; i < N; i++) {
            got[i] = malloc(BIG);
            assert_non_null(got[i]);
            assert_int_equal(tmx_trecv(b, i % 3 ? pa : TMX_ANY_SOURCE, got[i], BIG, (uint64_t)i, 0, NULL, NULL), TMX_OK);
        }
        for (int i = 0; i < N; i++)
            assert_int_equal(tmx_tsend(a, pb, big, (size_t)(i % 4 ? BIG : 100), (uint64_t)i, NULL, NULL), TMX_OK);
        nanosleep(&ts, NULL); /* the engines work */
        assert_int_equal(tmx_context_destroy(b), TMX_OK);
        for (int i = 0; i < N; i++) {
            memset(got[i], 0xEE, BIG); /* the engine must not write here any more */
            free(got[i]);
        }
        assert_int_equal(tmx_context_destroy(a), TMX_OK);
    }
    free(big);
}

/* Two contexts over udp alone, each the other's peer. */
static tmx_context_h ctx_udp(void)
{
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_TRANSPORTS | TMX_CONTEXT_FIELD_BOOT,
                              .transports = "udp",
                              .boot = TMX_BOOT_NONE};
    tmx_context_h c;

    assert_int_equal(tmx_context_create(&p, &c), TMX_OK);
    return c;
}

/* The sender of a rendezvous message is destroyed while its send waits
 * for the FIN, with segments of its own still unacknowledged, so that
 * closing udp lingers and reads the FIN, the receiver's ACKs and its
 * read requests: none of it may reach the layers above, which are going
 * (the FIN once completed a request of a context half freed). */
static void test_destroy_udp_rndv_waiting_for_fin(void **state)
{
    enum { BIG = 1 << 20 };
    unsigned char *big = malloc(BIG), *got = malloc(BIG);

    (void)state;
    assert_non_null(big);
    assert_non_null(got);
    for (int round = 0; round < 3; round++) {
        tmx_context_h a = ctx_udp(), b = ctx_udp();
        tmx_peer_t pb = add_addr_of(a, b), pa = add_addr_of(b, a);
        tmx_request_h sr, rr;

        fill(big, BIG, 7);
        assert_int_equal(tmx_tsend(a, pb, big, BIG, 9, NULL, &sr), TMX_OK);
        assert_int_equal(tmx_trecv(b, pa, got, BIG, 9, 0, NULL, &rr), TMX_OK);
        /* round 0: b has read all and sent its FIN; 1: b's reads are
         * under way; 2: b has only the RTS */
        for (long i = 0; i < 10000000 && tmx_request_test(rr, NULL) == TMX_INPROGRESS; i++) {
            tmx_progress(a);
            tmx_progress(b);
            if (round == 1 && i == 200)
                break;
            if (round == 2 && i == 2)
                break;
        }
        /* unacknowledged segments of a's own make its close linger */
        assert_int_equal(tmx_tsend(a, pb, big, 100, 10, NULL, NULL), TMX_OK);
        assert_int_equal(tmx_tsend(a, pb, big, 100, 11, NULL, NULL), TMX_OK);
        for (int i = 0; i < 100; i++)
            tmx_progress(b); /* b answers while a goes */
        assert_int_equal(tmx_context_destroy(a), TMX_OK);
        assert_int_equal(tmx_request_free(rr), TMX_OK);
        assert_int_equal(tmx_context_destroy(b), TMX_OK);
        (void)sr;
    }
    free(big);
    free(got);
}

/* A sender over udp with no memory to serve the receiver's read refuses
 * it at once: the receive fails with TMX_ERR_NOMEM and the send learns
 * it from the failed FIN, promptly, both alive (the request was once
 * dropped and the read waited until one of them failed). */
/* The completion queue grows when an operation is accepted, never when
 * it completes: with no memory to grow it, the operation is refused, and
 * every accepted one still reports its completion. */
static void test_cq_full_without_memory(void **state)
{
    fixture_t *f = *state;
    enum { N = 256 + 8 }; /* past the queue's first size */
    static uint64_t bufs[N];
    tmx_completion_t c[64];
    tmx_op_params_t nocq = {.field_mask = TMX_OP_FIELD_FLAGS, .flags = TMX_OP_FLAG_NO_CQ};
    tmx_request_h r;
    size_t got = 0, n;
    int posted = 0, refused = 0;

    for (int i = 0; i < N; i++) {
        if (i == N - 8)
            core_cq_test_fail_grow(1000);
        tmx_status_t st = tmx_trecv(f->ctx, TMX_ANY_SOURCE, &bufs[i], sizeof(bufs[i]), (uint64_t)i, 0,
                                    NULL, NULL);
        if (st == TMX_OK)
            posted++;
        else {
            assert_int_equal(st, TMX_ERR_NOMEM);
            refused++;
        }
    }
    /* an operation that reports no completion needs no slot */
    assert_int_equal(tmx_trecv(f->ctx, TMX_ANY_SOURCE, bufs, 8, 1u << 20, 0, &nocq, &r), TMX_OK);
    core_cq_test_fail_grow(0);
    assert_true(refused > 0);
    for (int i = 0; i < posted; i++) {
        uint64_t v = (uint64_t)i * 3;
        assert_int_equal(tmx_tinject(f->ctx, f->self, &v, sizeof(v), (uint64_t)i, 0, 0), TMX_OK);
    }
    for (long i = 0; i < 1000000 && got < (size_t)posted; i++) {
        assert_int_equal(tmx_cq_read(f->ctx, c, 64, &n), TMX_OK);
        for (size_t k = 0; k < n; k++) {
            assert_int_equal(c[k].status, TMX_OK);
            assert_int_equal(bufs[c[k].tag], c[k].tag * 3);
        }
        got += n;
    }
    assert_int_equal(got, posted);
    assert_int_equal(tmx_request_cancel(r), TMX_OK);
    assert_int_equal(tmx_request_free(r), TMX_OK);
}

static void test_udp_read_without_memory(void **state)
{
    enum { BIG = 1 << 20 };
    unsigned char *big = malloc(BIG), *got = calloc(1, BIG);
    tmx_context_h a = ctx_udp(), b = ctx_udp();
    tmx_peer_t pb = add_addr_of(a, b), pa = add_addr_of(b, a);
    tmx_request_h sr, rr;
    tmx_completion_t c;
    int64_t end;
    long i;

    (void)state;
    assert_non_null(big);
    assert_non_null(got);
    fill(big, BIG, 5);
    assert_int_equal(tmx_trecv(a, pb, got, BIG, 9, 0, NULL, &rr), TMX_OK);
    assert_int_equal(tmx_tsend(b, pa, big, BIG, 9, NULL, &sr), TMX_OK);
    /* until a matched and asked for the data; b has not seen the request */
    for (i = 0; i < 1000000 && match_recv_is_posted(&rr->p.recv); i++) {
        tmx_progress(a);
        if (match_recv_is_posted(&rr->p.recv))
            tmx_progress(b);
    }
    assert_false(match_recv_is_posted(&rr->p.recv));
    tl_emu_test_fail_alloc(1);
    end = core_now_us() + 3000000;
    while ((tmx_request_test(rr, NULL) == TMX_INPROGRESS || tmx_request_test(sr, NULL) == TMX_INPROGRESS) &&
           core_now_us() < end) {
        tmx_progress(b);
        tmx_progress(a);
    }
    tl_emu_test_fail_alloc(0);
    assert_int_equal(tmx_request_test(rr, &c), TMX_ERR_NOMEM);
    assert_int_equal(c.length, 0); /* nothing delivered */
    assert_int_equal(c.msg_length, BIG);
    assert_int_equal(tmx_request_test(sr, NULL), TMX_ERR_IO);
    assert_int_equal(tmx_request_free(rr), TMX_OK);
    assert_int_equal(tmx_request_free(sr), TMX_OK);
    /* and the next one goes through */
    assert_int_equal(tmx_trecv(a, pb, got, BIG, 10, 0, NULL, &rr), TMX_OK);
    assert_int_equal(tmx_tsend(b, pa, big, BIG, 10, NULL, &sr), TMX_OK);
    assert_int_equal(wait2(rr, a, b).status, TMX_OK);
    assert_int_equal(wait2(sr, b, a).status, TMX_OK);
    check(got, BIG, 5);
    assert_int_equal(tmx_context_destroy(a), TMX_OK);
    assert_int_equal(tmx_context_destroy(b), TMX_OK);
    free(big);
    free(got);
}

/* The argument checks of the operations name a peer while the offload
 * engine's thread, progressing the context, makes implicit peers of
 * processes that write to it (growing the table of implicit peers): the
 * application thread sends, injects, posts, cancels and probes naming an
 * implicit peer, never progressing (so that the engine does), while
 * strangers keep arriving. Under ThreadSanitizer the checks once raced
 * with the table's growth. */
typedef struct peer_race {
    tmx_context_h a;
    tmx_peer_t imp;
    atomic_int stop;
    unsigned ops;
} peer_race_t;

static void *peer_race_app(void *arg)
{
    peer_race_t *r = arg;
    unsigned char buf[8] = {0};
    tmx_op_params_t nocq = {.field_mask = TMX_OP_FIELD_FLAGS, .flags = TMX_OP_FLAG_NO_CQ};
    tmx_request_h rr;
    tmx_status_t st;

    while (!atomic_load(&r->stop)) {
        st = tmx_tinject(r->a, r->imp, buf, sizeof(buf), 1, 0, 0);
        assert_int_not_equal(st, TMX_ERR_INVALID);
        st = tmx_tsend(r->a, r->imp, buf, sizeof(buf), 2, &nocq, NULL);
        assert_int_not_equal(st, TMX_ERR_INVALID);
        if (tmx_trecv(r->a, r->imp, buf, sizeof(buf), 3, 0, &nocq, &rr) == TMX_OK) {
            tmx_request_cancel(rr);
            assert_int_equal(tmx_request_free(rr), TMX_OK);
        }
        if ((++r->ops & 1023) == 0) /* progresses: rarely, to leave it to the engine */
            assert_int_not_equal(tmx_tprobe(r->a, r->imp, 4, 0, 0, NULL, NULL), TMX_ERR_INVALID);
        usleep(50);
    }
    return NULL;
}

static void test_peer_checks_race_implicit_peers(void **state)
{
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_TRANSPORTS | TMX_CONTEXT_FIELD_BOOT |
                                            TMX_CONTEXT_FIELD_OFFLOAD,
                              .transports = "self,udp",
                              .boot = TMX_BOOT_NONE,
                              .offload = 1};
    unsigned char blob[TMX_ADDRESS_MAX];
    size_t len = sizeof(blob);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof(sa);
    peer_race_t r = {0};
    pthread_t t;
    udp_addr_t ua;
    uint32_t n;
    int fd;

    (void)state;
    assert_int_equal(tmx_context_create(&p, &r.a), TMX_OK);
    assert_int_equal(tmx_address(r.a, blob, &len), TMX_OK);
    memcpy(&ua, blob + len - sizeof(ua), sizeof(ua));
    sa.sin_addr.s_addr = ua.ip;
    assert_true((fd = socket(AF_INET, SOCK_DGRAM, 0)) >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    hello_from_socket(r.a, 0x7e57ab1e00ULL, fd, sa.sin_port);
    r.imp = core_peer_by_uuid(r.a, 0x7e57ab1e00ULL);
    assert_true(r.imp & TMX_PEER_IMPLICIT);
    assert_int_equal(pthread_create(&t, NULL, peer_race_app, &r), 0);
    for (uint64_t x = 1; x <= 300; x++) {
        hello_dgram(r.a, 0x7e57ab1e00ULL + x, fd, sa.sin_port);
        usleep(3000);
    }
    atomic_store(&r.stop, 1);
    pthread_join(t, NULL);
    core_lock(r.a); /* the engine may still be adding */
    n = r.a->n_ipeers;
    core_unlock(r.a);
    assert_true(n > 32); /* the table grew while the thread checked it */
    close(fd);
    assert_int_equal(tmx_context_destroy(r.a), TMX_OK);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_strerror),
        cmocka_unit_test(test_context_bad_params),
        cmocka_unit_test(test_context_params_ok),
        cmocka_unit_test(test_context_join_unreachable),
        cmocka_unit_test_setup_teardown(test_address, setup, teardown),
        cmocka_unit_test_setup_teardown(test_peer_add_bad, setup, teardown),
        cmocka_unit_test_setup_teardown(test_send_bad_args, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recv_bad_args, setup, teardown),
        cmocka_unit_test(test_request_bad_args),
        cmocka_unit_test_setup_teardown(test_probe_bad_args, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cq_bad_args, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sizes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wildcards, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stranger_failure_ignored, setup, teardown),
        cmocka_unit_test_setup_teardown(test_implicit_peers_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_peer_identity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_order_mixed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_probe_claim_discard, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_handles_after_burst, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_handle_after_failed_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pool_trim_wait_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_by_context, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cq_errors_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shm_sender_slots_reused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_cq_and_wait_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remote_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sync_send, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inject, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tinject, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cq_growth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wire_garbage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_null, setup, teardown),
        cmocka_unit_test(test_implicit_peer),
        cmocka_unit_test(test_implicit_peer_udp),
        cmocka_unit_test(test_implicit_peer_address_is_its_own),
        cmocka_unit_test(test_implicit_peer_recv_order),
        cmocka_unit_test_setup_teardown(test_threads, setup_mt, teardown),
        cmocka_unit_test_setup_teardown(test_wait_longest_timeout, setup_mt, teardown),
        cmocka_unit_test_setup_teardown(test_wait_timeout_while_busy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_completion_waiting, setup, teardown),
        cmocka_unit_test_setup_teardown(test_destroy_busy, setup, teardown),
        cmocka_unit_test(test_destroy_udp_rndv_waiting_for_fin),
        cmocka_unit_test(test_offload_shm),
        cmocka_unit_test(test_offload_post_after_rendezvous),
        cmocka_unit_test(test_offload_offer),
        cmocka_unit_test(test_offload_offer_order),
        cmocka_unit_test(test_offload_offer_stream),
        cmocka_unit_test(test_offload_udp),
        cmocka_unit_test(test_offload_spinning_test),
        cmocka_unit_test(test_offload_with_progress),
        cmocka_unit_test(test_offload_same_as_software),
        cmocka_unit_test(test_offload_same_as_software_racing),
        cmocka_unit_test(test_offload_threads_cancel),
        cmocka_unit_test(test_offload_sender_dies_mid_read),
        cmocka_unit_test(test_offload_destroy_while_reading),
        cmocka_unit_test(test_udp_read_without_memory),
        cmocka_unit_test_setup_teardown(test_cq_full_without_memory, setup, teardown),
        cmocka_unit_test(test_peer_checks_race_implicit_peers),
        cmocka_unit_test(test_keys_independent_of_uuid),
        cmocka_unit_test(test_destroyed_sender_not_read),
        cmocka_unit_test(test_host_sweep_args),
    };

    return UNIT_MAIN(argc, argv, tests);
}
