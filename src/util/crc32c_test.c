/* util_crc32c against a bitwise reference: every length across the
 * interleaved blocks' boundaries, unaligned starts, and chaining. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "unit.h"

#include "util/crc32c.h"

static uint32_t crc_ref(uint32_t crc, const unsigned char *p, size_t len)
{
    crc = ~crc;
    while (len--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1)));
    }
    return ~crc;
}

static unsigned char buf[65536 + 16];

static void fill(void)
{
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < sizeof(buf); i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
}

static void test_known_vector(void **state)
{
    (void)state;
    assert_int_equal(util_crc32c(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(util_crc32c(0, "", 0), 0);
}

static void test_every_length(void **state)
{
    (void)state;
    fill();
    for (size_t len = 0; len <= 4096; len++)
        for (size_t off = 0; off < 8; off += 3)
            assert_int_equal(util_crc32c(0, buf + off, len), crc_ref(0, buf + off, len));
}

/* Long buffers take every block size, up to rounds of 3 x 4096 bytes. */
static void test_long(void **state)
{
    (void)state;
    fill();
    for (size_t len = 4097; len <= sizeof(buf) - 8; len = len * 5 / 4 + 13)
        for (size_t off = 0; off < 8; off += 5)
            assert_int_equal(util_crc32c(0, buf + off, len), crc_ref(0, buf + off, len));
    assert_int_equal(util_crc32c(0, buf, sizeof(buf)), crc_ref(0, buf, sizeof(buf)));
}

static void test_chained(void **state)
{
    (void)state;
    fill();
    for (size_t cut = 0; cut <= 2000; cut += 37) {
        uint32_t c = util_crc32c(0, buf, cut);
        assert_int_equal(util_crc32c(c, buf + cut, 2000 - cut), crc_ref(0, buf, 2000));
    }
}

/* Each group runs the cases under one implementation; a group whose
 * implementation this CPU lacks fails its cases' setup only when the CPU
 * claims to have it. */
static int select_impl(int impl)
{
    return util_crc32c_limit(impl) == impl ? 0 : -1;
}

static int use_table(void **state)
{
    return select_impl(UTIL_CRC32C_TABLE);
}

static int use_sse42(void **state)
{
    return select_impl(UTIL_CRC32C_SSE42);
}

static int use_vpclmul(void **state)
{
    return select_impl(UTIL_CRC32C_VPCLMUL);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_vector),
        cmocka_unit_test(test_every_length),
        cmocka_unit_test(test_chained),
        cmocka_unit_test(test_long),
    };
    const size_t n = sizeof(tests) / sizeof(tests[0]);
    const unit_group_t all[] = {
        {"vpclmulqdq", tests, n, use_vpclmul, NULL},
        {"sse4.2", tests, n, use_sse42, NULL},
        {"table", tests, n, use_table, NULL},
    };
    int best = util_crc32c_limit(UTIL_CRC32C_VPCLMUL);

    /* Every implementation this CPU has, the best first. */
    if (best < UTIL_CRC32C_VPCLMUL)
        printf("crc32c_test: this CPU lacks %s: not tested here\n", all[UTIL_CRC32C_VPCLMUL - best - 1].name);
    return unit_main(argc, argv, all + (UTIL_CRC32C_VPCLMUL - best), (size_t)best + 1);
}
