/* Remote-access keys and the access check (src/reg). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
#include <cmocka.h>

#include "unit.h"

#include "reg/reg.h"

/* The reference vector of SipHash-2-4 for an 8-byte message: key
 * 00 01 .. 0f, message 00 01 .. 07 (the paper's vectors.h, entry 8). */
static void siphash_reference_vector(void **state)
{
    (void)state;
    assert_int_equal(reg_siphash64(0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL,
                                   0x0706050403020100ULL),
                     0x93f5f5799a932462ULL);
}

static void key_names_its_slot(void **state)
{
    reg_keygen_t g;

    (void)state;
    assert_int_equal(reg_keygen_init(&g), TMX_OK);
    for (uint32_t slot = 0; slot < 4096; slot += 7)
        assert_int_equal(reg_key_slot(reg_key_make(&g, slot)), slot);
    assert_int_equal(reg_key_slot(reg_key_make(&g, REG_KEY_SLOTS - 1)), REG_KEY_SLOTS - 1);
}

/* Two generators (two contexts) never share a key stream, and one never
 * repeats the random part of a key for the same slot. */
static void keys_are_unpredictable(void **state)
{
    reg_keygen_t a, b;
    uint64_t prev = 0, ka, kb;
    int same = 0;

    (void)state;
    assert_int_equal(reg_keygen_init(&a), TMX_OK);
    assert_int_equal(reg_keygen_init(&b), TMX_OK);
    assert_true(a.k0 != b.k0 || a.k1 != b.k1);
    for (int i = 0; i < 1000; i++) {
        ka = reg_key_make(&a, 5);
        kb = reg_key_make(&b, 5);
        same += ka == kb;
        assert_true(ka != prev);
        prev = ka;
    }
    assert_int_equal(same, 0);
}

/* Every bit of the random part is used: over many keys each bit is set
 * roughly half of the time. */
static void random_bits_all_used(void **state)
{
    reg_keygen_t g;
    unsigned ones[64] = {0};

    (void)state;
    assert_int_equal(reg_keygen_init(&g), TMX_OK);
    for (int i = 0; i < 4096; i++) {
        uint64_t k = reg_key_make(&g, 0);
        for (int b = 0; b < 64; b++)
            ones[b] += (k >> b) & 1;
    }
    for (int b = 0; b < REG_KEY_SLOT_BITS; b++)
        assert_int_equal(ones[b], 0);
    for (int b = REG_KEY_SLOT_BITS; b < 64; b++) {
        assert_true(ones[b] > 1700);
        assert_true(ones[b] < 2400);
    }
}

static void access_check(void **state)
{
    reg_region_t r = {0x10000, 4096, 0xabcdef0000000003ULL};

    (void)state;
    assert_int_equal(reg_access_check(&r, 0x10000, 4096, r.key), TMX_OK);
    assert_int_equal(reg_access_check(&r, 0x10800, 2048, r.key), TMX_OK);
    assert_int_equal(reg_access_check(&r, 0x11000, 0, r.key), TMX_OK);
    assert_int_equal(reg_access_check(&r, 0x10000, 4096, r.key ^ (1ULL << 40)), TMX_ERR_NOT_FOUND);
    assert_int_equal(reg_access_check(NULL, 0x10000, 1, r.key), TMX_ERR_NOT_FOUND);
    assert_int_equal(reg_access_check(&r, 0xffff, 2, r.key), TMX_ERR_INVALID);
    assert_int_equal(reg_access_check(&r, 0x10801, 2048, r.key), TMX_ERR_INVALID);
    assert_int_equal(reg_access_check(&r, 0x10000, 4097, r.key), TMX_ERR_INVALID);
    /* addr + len wraps around */
    assert_int_equal(reg_access_check(&r, 0x10010, UINT64_MAX - 8, r.key), TMX_ERR_INVALID);
    assert_int_equal(reg_access_check(&r, UINT64_MAX, 2, r.key), TMX_ERR_INVALID);
}

/* Refusals are logged for the first and then every 2^k-th: a peer
 * hammering with a bad key does not fill the log. */
static void refusals_rate_limited(void **state)
{
    reg_region_t r = {.base = 0x10000, .len = 4096, .key = 42};
    FILE *f = tmpfile();
    int saved = dup(2), lines = 0, c;

    (void)state;
    assert_non_null(f);
    fflush(stderr);
    assert_true(dup2(fileno(f), 2) == 2);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(reg_access_check(&r, 0x10000, 1, 43), TMX_ERR_NOT_FOUND);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(f);
    while ((c = fgetc(f)) != EOF)
        lines += c == '\n';
    fclose(f);
    print_message("1000 refusals, %d log lines\n", lines);
    assert_true(lines >= 1 && lines <= 11); /* earlier refusals in this process shift which ones */
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(siphash_reference_vector),
        cmocka_unit_test(key_names_its_slot),
        cmocka_unit_test(keys_are_unpredictable),
        cmocka_unit_test(random_bits_all_used),
        cmocka_unit_test(access_check),
        cmocka_unit_test(refusals_rate_limited),
    };
    return UNIT_MAIN(argc, argv, tests);
}
