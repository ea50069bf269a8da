/*
 * The registration cache (DESIGN.md, "Registration"; seed 003: "the mr
 * cache is per process ... the cached MR will be removed if the user
 * buffer is freed"). Registrations persist across messages and are found
 * by address range; one is invalidated as soon as its memory is unmapped
 * or its pages replaced (munmap, mremap, madvise(MADV_DONTNEED or
 * MADV_REMOVE), a brk shrink, and so glibc's free() and heap trims),
 * before a new buffer at the same address can be served from it.
 *
 * The kernel tells us through a userfaultfd opened for its non-cooperative
 * events only (unmap, remove, remap): every cached range is registered
 * with it in write-protect mode without any page ever being
 * write-protected, so faults behave as before. A thread that unmaps a
 * registered range is held in the kernel until the event is read; the
 * cache's monitor thread reads and invalidates under the cache's lock, so
 * when the unmap returns the entries it touched are already invalid
 * (docs/registration.md).
 *
 * Deadlock rule: nothing frees, unmaps or allocates memory while holding
 * the cache's lock (a free may trim a registered range and wait for the
 * monitor, which waits for the lock). Entries come from an array
 * allocated at creation.
 *
 * Where the kernel cannot tell us (no userfaultfd: ENOSYS, EPERM, seccomp,
 * valgrind; a file-backed mapping; every entry referenced), a get returns
 * an uncached registration: valid for the caller's one use, gone on put.
 *
 * All calls are thread-safe.
 */
#ifndef TMX_REG_RCACHE_H
#define TMX_REG_RCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "tmx.h"

typedef struct rcache rcache_t;

/* A registration as its holder sees it; read-only for the holder, and
 * unchanged while it holds a reference. */
typedef struct rcache_reg {
    uint64_t id;    /* unique for the process's life: a new registration at an
                     * old address has a new id */
    uint64_t base;  /* first byte, page-aligned */
    uint64_t len;   /* bytes, a whole number of pages */
} rcache_reg_t;

typedef struct rcache_stats {
    uint64_t hits;          /* gets served by a live entry */
    uint64_t misses;        /* gets that made a new entry */
    uint64_t uncached;      /* gets answered with an uncached registration */
    uint64_t evictions;     /* entries dropped to make room (least recently used first) */
    uint64_t invalidations; /* entries dropped because their memory went away */
    uint64_t entries;       /* live entries now */
    uint64_t bytes;         /* bytes they cover */
} rcache_stats_t;

/* The process-wide cache, with one more reference; NULL (logged) if out
 * of memory. The first acquire (after the last release) creates it with
 * these bounds: at most max_entries entries covering at most max_bytes
 * (0: no byte bound); later acquires share it and their bounds are
 * ignored. max_entries 0 gives a cache that caches nothing. If the
 * kernel's events cannot be had, the cache logs why once and serves
 * uncached registrations only. */
rcache_t *rcache_acquire(size_t max_entries, uint64_t max_bytes);

/* Drops a reference; the last one unregisters every range, stops the
 * monitor thread, closes the userfaultfd and frees the cache. Every
 * registration must have been put before. rc NULL: nothing. */
void rcache_release(rcache_t *rc);

/* A registration covering [addr, addr + len), holding a reference: a live
 * entry that covers the range (hit), else a new entry of the range
 * rounded out to pages (miss), evicting least recently used unreferenced
 * entries to stay within the bounds, else an uncached registration.
 * TMX_ERR_INVALID, logged, for rc, addr or out NULL, len 0 or a range
 * past the end of the address space; TMX_ERR_NOMEM, logged, if an
 * uncached registration cannot be allocated. *out is written on success
 * only. Takes the cache's lock and asks the kernel (one ioctl) whether
 * an unmap, remap or discard of cached memory is under way in another
 * thread: if so, waits (without the lock) until the monitor has read its
 * event, so that new memory at an address being unmapped is never served
 * by the old memory's entry; on a miss, one ioctl more. */
tmx_status_t rcache_get(rcache_t *rc, const void *addr, size_t len, rcache_reg_t **out);

/* Gives back the reference a get returned; reg NULL: nothing. */
void rcache_put(rcache_t *rc, rcache_reg_t *reg);

/* 1 while the memory reg covers is the memory it was made for; 0 once an
 * unmap, remap or discard has touched it, from the moment that call
 * returns. An atomic read, no lock; only while the monitor is between
 * reading events and applying them (microseconds) does it wait for it. An
 * uncached registration stays 1: it is for its holder's one use. */
int rcache_reg_valid(const rcache_reg_t *reg);

/* The counters and sizes now (consistent with each other). */
void rcache_stats(rcache_t *rc, rcache_stats_t *out);

/* Tests only: 1 makes caches created from now on run without the
 * kernel's events, as if userfaultfd were unavailable; 0 restores. */
void rcache_test_force_uncached(int on);

#endif
