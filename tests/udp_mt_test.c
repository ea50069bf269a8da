/*
 * Multi-threaded use over udp: two processes, each with one context in
 * TMX_THREAD_MULTIPLE mode and two threads that send and wait at once,
 * so that one thread sleeps in the transport's wait while the other
 * progresses and sends through the same interface. Run under
 * ThreadSanitizer (scripts/test.sh), which reports any access the
 * transport contract (tl.h, "Threads") does not allow; in every build it
 * checks that every message arrives intact.
 *
 * Usage: udp_mt_test [messages per thread]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tmx.h"

#define BIG 65536 /* above udp's eager limit: rendezvous, a read */

typedef struct thr {
    tmx_context_h ctx;
    tmx_peer_t peer;
    int id;
    int n;
    int err;
} thr_t;

static int one_exchange(thr_t *t, int i, unsigned char *out, unsigned char *in)
{
    uint64_t tag = ((uint64_t)t->id << 32) | (unsigned)i;
    size_t len = i % 16 == 15 ? BIG : 8 + (size_t)(i % 64);
    tmx_request_h rr, sr;
    tmx_completion_t c;

    for (size_t k = 0; k < len; k++)
        out[k] = (unsigned char)(k * 7 + (size_t)i + (size_t)t->id);
    if (tmx_trecv(t->ctx, t->peer, in, BIG, tag, 0, NULL, &rr) != TMX_OK ||
        tmx_tsend(t->ctx, t->peer, out, len, tag, NULL, &sr) != TMX_OK)
        return 1;
    if (tmx_request_wait(rr, 30000000, &c) != TMX_OK || c.length != len ||
        tmx_request_wait(sr, 30000000, NULL) != TMX_OK)
        return 2;
    tmx_request_free(rr);
    tmx_request_free(sr);
    return memcmp(in, out, len) != 0 ? 3 : 0; /* the peer sends the same bytes */
}

static void *thr_main(void *arg)
{
    thr_t *t = arg;
    unsigned char *out = malloc(BIG), *in = malloc(BIG);

    for (int i = 0; i < t->n && t->err == 0 && out != NULL && in != NULL; i++) {
        t->err = one_exchange(t, i, out, in);
        if (t->err != 0)
            fprintf(stderr, "udp_mt_test: thread %d, message %d: failed (%d)\n", t->id, i, t->err);
    }
    if (out == NULL || in == NULL)
        t->err = 4;
    free(out);
    free(in);
    return NULL;
}

/* Creates the context and swaps addresses with the other process. */
static int join(int wfd, int rfd, tmx_context_h *ctx, tmx_peer_t *peer)
{
    tmx_context_params_t p = {.field_mask = TMX_CONTEXT_FIELD_THREAD_MODE | TMX_CONTEXT_FIELD_TRANSPORTS |
                                            TMX_CONTEXT_FIELD_BOOT,
                              .thread_mode = TMX_THREAD_MULTIPLE,
                              .transports = "udp",
                              .boot = TMX_BOOT_NONE};
    unsigned char mine[TMX_ADDRESS_MAX], theirs[TMX_ADDRESS_MAX];
    size_t len = sizeof(mine);
    ssize_t got;

    if (tmx_context_create(&p, ctx) != TMX_OK || tmx_address(*ctx, mine, &len) != TMX_OK)
        return 1;
    if (write(wfd, mine, len) != (ssize_t)len || (got = read(rfd, theirs, sizeof(theirs))) <= 0)
        return 1;
    return tmx_peer_add(*ctx, theirs, (size_t)got, peer) != TMX_OK;
}

static int run(int wfd, int rfd, int n)
{
    thr_t t[2];
    pthread_t th[2];
    tmx_context_h ctx;
    tmx_peer_t peer;
    int err = 0;

    if (join(wfd, rfd, &ctx, &peer) != 0) {
        fprintf(stderr, "udp_mt_test: no context or no peer\n");
        return 1;
    }
    for (int i = 0; i < 2; i++) {
        t[i] = (thr_t){ctx, peer, i, n, 0};
        pthread_create(&th[i], NULL, thr_main, &t[i]);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        err |= t[i].err;
    }
    /* both sides finished before either goes: the last ACKs get through */
    if (write(wfd, "x", 1) != 1 || read(rfd, &(char){0}, 1) != 1)
        err |= 8;
    tmx_context_destroy(ctx);
    return err;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2000, ab[2], ba[2], status = 0, err;
    pid_t pid;

    if (n <= 0 || pipe(ab) != 0 || pipe(ba) != 0)
        return 2;
    pid = fork();
    if (pid < 0)
        return 2;
    if (pid == 0)
        _exit(run(ba[1], ab[0], n));
    err = run(ab[1], ba[0], n);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        err |= 16;
    printf("udp_mt_test: %d messages per thread, 2 threads per process: %s\n", n, err ? "FAILED" : "ok");
    return err != 0;
}
