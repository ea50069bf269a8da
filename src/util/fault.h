/*
 * Failures a test asks for: a counter of the next operations to fail
 * (tl_emu_test_fail_alloc, proto_test_fail_alloc), which the code under
 * test takes one at a time. Zero, as in every run but a test's, costs one
 * relaxed load.
 */
#ifndef TMX_UTIL_FAULT_H
#define TMX_UTIL_FAULT_H

#include <stdatomic.h>

/* 1 if a failure is left in *left, taking it; else 0. */
static inline int util_fault_take(atomic_uint *left)
{
    unsigned n = atomic_load_explicit(left, memory_order_relaxed);

    while (n != 0) {
        if (atomic_compare_exchange_weak(left, &n, n - 1))
            return 1;
    }
    return 0;
}

#endif
