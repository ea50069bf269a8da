/*
 * One rank of a tmxrun test job (tests/tmxrun_test.sh).
 *
 * By default: put this rank's values (a short string and a blob that fills
 * a whole value), fence, read and check every other rank's, fence again,
 * exit 0. Odd ranks first wait for the even rank below them (rank 0 puts
 * late), so that deferred GETs are exercised.
 *
 *   --exit-rank R CODE  rank R exits with CODE at once
 *   --kill-rank R       rank R waits 0.3 s, then kills itself with SIGKILL
 *   --leave-rank R      rank R waits 0.3 s, then exits 0 without fencing;
 *                       the others must see their fence fail: they exit 42
 *   --sleep S           instead of the exchange, sleep S seconds, exit 0
 *   --ignore-term       ignore SIGTERM (tmxrun must escalate to SIGKILL)
 *   --bad-requests      send malformed requests over a raw connection and
 *                       check that each gets ERR and the service survives
 *   --many-keys N       put N distinct keys, pipelined, and read back every
 *                       1000th: the service must keep up however many keys
 *                       it holds
 *   --stalled-pipeline  send a GET that waits and more requests behind it
 *                       than the service buffers, then check that tmxrun
 *                       waits for the key without spinning
 * Other arguments are ignored (tests pass a unique marker for pgrep).
 * Exit status 1 means a check failed; the reason is on stderr.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "boot/boot.h"

#define BLOB_BYTES (BOOT_KVS_TOKEN_MAX / 2)
#define LEFT_FENCE_EXIT 42

typedef struct rank_opts {
    int exit_rank, exit_code, kill_rank, leave_rank, ignore_term, bad_requests, many_keys,
        stalled_pipeline;
    double sleep_s;
} rank_opts_t;

static boot_env_t env;

static void die(const char *what, tmx_status_t st)
{
    fprintf(stderr, "kvs_rank %u: %s: %s\n", env.rank, what, tmx_strerror(st));
    exit(1);
}

static void nap(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void parse(int argc, char **argv, rank_opts_t *o)
{
    *o = (rank_opts_t){.exit_rank = -1, .kill_rank = -1, .leave_rank = -1};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--exit-rank") == 0 && i + 2 < argc) {
            o->exit_rank = atoi(argv[++i]);
            o->exit_code = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--kill-rank") == 0 && i + 1 < argc) {
            o->kill_rank = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--leave-rank") == 0 && i + 1 < argc) {
            o->leave_rank = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--sleep") == 0 && i + 1 < argc) {
            o->sleep_s = atof(argv[++i]);
        } else if (strcmp(argv[i], "--ignore-term") == 0) {
            o->ignore_term = 1;
        } else if (strcmp(argv[i], "--bad-requests") == 0) {
            o->bad_requests = 1;
        } else if (strcmp(argv[i], "--many-keys") == 0 && i + 1 < argc) {
            o->many_keys = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--stalled-pipeline") == 0) {
            o->stalled_pipeline = 1;
        }
    }
}

/* ------------------------------------------------------------ exchange */

static void blob_of(uint32_t rank, unsigned char *blob)
{
    for (size_t i = 0; i < BLOB_BYTES; i++)
        blob[i] = (unsigned char)(rank * 7 + i * 13);
}

static void put_mine(boot_kvs_t *kvs)
{
    unsigned char blob[BLOB_BYTES];
    char key[32], word[64], hex[BOOT_KVS_TOKEN_MAX + 1];
    tmx_status_t st;

    snprintf(word, sizeof(word), "rank-%u-of-%u", env.rank, env.size);
    snprintf(key, sizeof(key), "word.%u", env.rank);
    if ((st = boot_hex_encode(word, strlen(word), hex, sizeof(hex))) != TMX_OK ||
        (st = boot_kvs_put(kvs, key, hex)) != TMX_OK)
        die("put word", st);
    blob_of(env.rank, blob);
    snprintf(key, sizeof(key), "blob.%u", env.rank);
    if ((st = boot_hex_encode(blob, sizeof(blob), hex, sizeof(hex))) != TMX_OK ||
        (st = boot_kvs_put(kvs, key, hex)) != TMX_OK)
        die("put blob", st);
}

static void check_word(boot_kvs_t *kvs, uint32_t r)
{
    char key[32], want[64], got[64], hex[BOOT_KVS_TOKEN_MAX + 1];
    size_t len = 0;
    tmx_status_t st;

    snprintf(key, sizeof(key), "word.%u", r);
    snprintf(want, sizeof(want), "rank-%u-of-%u", r, env.size);
    if ((st = boot_kvs_get(kvs, key, hex, sizeof(hex))) != TMX_OK ||
        (st = boot_hex_decode(hex, got, sizeof(got) - 1, &len)) != TMX_OK)
        die("get word", st);
    got[len] = '\0';
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "kvs_rank %u: %s is '%s', expected '%s'\n", env.rank, key, got, want);
        exit(1);
    }
}

static void check_blob(boot_kvs_t *kvs, uint32_t r)
{
    unsigned char want[BLOB_BYTES], got[BLOB_BYTES];
    char key[32], hex[BOOT_KVS_TOKEN_MAX + 1];
    size_t len = 0;
    tmx_status_t st;

    snprintf(key, sizeof(key), "blob.%u", r);
    blob_of(r, want);
    if ((st = boot_kvs_get(kvs, key, hex, sizeof(hex))) != TMX_OK ||
        (st = boot_hex_decode(hex, got, sizeof(got), &len)) != TMX_OK)
        die("get blob", st);
    if (len != sizeof(want) || memcmp(got, want, len) != 0) {
        fprintf(stderr, "kvs_rank %u: %s differs from what rank %u put\n", env.rank, key, r);
        exit(1);
    }
}

static void fence(boot_kvs_t *kvs, const rank_opts_t *o)
{
    tmx_status_t st = boot_kvs_fence(kvs);

    if (st == TMX_ERR_PEER_FAILED && o->leave_rank >= 0) {
        printf("kvs_rank %u: fence failed as expected\n", env.rank);
        exit(LEFT_FENCE_EXIT);
    }
    if (st != TMX_OK)
        die("fence", st);
    if (o->leave_rank >= 0) {
        fprintf(stderr, "kvs_rank %u: fence succeeded without rank %d\n", env.rank,
                o->leave_rank);
        exit(1);
    }
}

static void exchange(boot_kvs_t *kvs, const rank_opts_t *o)
{
    if (env.rank % 2 == 1)
        check_word(kvs, env.rank - 1); /* usually before rank-1 has put it */
    if (env.rank == 0 && env.size > 1)
        nap(0.2);
    put_mine(kvs);
    fence(kvs, o);
    for (uint32_t r = 0; r < env.size; r++) {
        if (r != env.rank) {
            check_word(kvs, r);
            check_blob(kvs, r);
        }
    }
    fence(kvs, o);
    if (env.rank == 0)
        printf("kvs_rank: %u ranks exchanged values\n", env.size);
}

/* ------------------------------------------------------- bad requests */

static int raw_connect(void)
{
    boot_addr_t a;
    int fd;

    if (boot_addr_parse(env.kvs_addr, &a) != TMX_OK)
        die("parse address", TMX_ERR_INVALID);
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a.sa, a.len) != 0)
        die("raw connect", TMX_ERR_IO);
    return fd;
}

/* Sends req (len bytes) and checks that the next reply line starts with
 * want. */
static void raw_expect(int fd, const char *req, size_t len, const char *want)
{
    char line[BOOT_KVS_LINE_MAX];
    size_t n = 0;

    if (send(fd, req, len, MSG_NOSIGNAL) != (ssize_t)len)
        die("raw send", TMX_ERR_IO);
    while (n < sizeof(line) - 1 && (n == 0 || line[n - 1] != '\n')) {
        if (recv(fd, line + n, 1, 0) != 1)
            die("raw recv", TMX_ERR_IO);
        n++;
    }
    line[n] = '\0';
    if (strncmp(line, want, strlen(want)) != 0) {
        fprintf(stderr, "kvs_rank: request '%.40s' got '%s', expected '%s...'\n", req, line,
                want);
        exit(1);
    }
}

static void raw_expect_str(int fd, const char *req, const char *want)
{
    raw_expect(fd, req, strlen(req), want);
}

static void bad_requests(void)
{
    static const char *const bad[] = {
        "HELLO\n", "\n", "PUT a\n", "PUT a b c\n", "PUT  a b\n", "PUT a b \n", "GET\n",
        "GET a b\n", "FENCE now\n", "put a b\n", "PUT a\tb c\n", "GET a\x01\n", "GET \xff\n",
    };
    char big[BOOT_KVS_LINE_MAX + 100];
    int fd = raw_connect();

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        raw_expect_str(fd, bad[i], "ERR ");
    raw_expect(fd, "GET a\0b\n", 8, "ERR ");
    memset(big, 'k', sizeof(big));
    memcpy(big, "PUT ", 4);
    big[4 + BOOT_KVS_TOKEN_MAX + 1] = ' ';
    memcpy(big + 4 + BOOT_KVS_TOKEN_MAX + 2, "v\n", 2);
    raw_expect(fd, big, 4 + BOOT_KVS_TOKEN_MAX + 4, "ERR "); /* key one byte too long */
    memset(big, 'x', sizeof(big));
    big[sizeof(big) - 1] = '\n';
    raw_expect(fd, big, sizeof(big), "ERR ");                 /* line too long */
    raw_expect_str(fd, "PUT k v\nGET k\n", "OK");             /* two at once */
    raw_expect_str(fd, "", "VAL v");
    raw_expect_str(fd, "PUT k w\n", "OK");
    raw_expect_str(fd, "GET k\n", "VAL w");
    raw_expect_str(fd, "FENCE\n", "OK");
    close(fd);
    printf("kvs_rank: every bad request got ERR\n");
}

/* --------------------------------------------------------- many keys */

/* Reads one reply line into line (cap bytes, NUL-terminated). */
static void raw_line(int fd, char *line, size_t cap)
{
    size_t n = 0;

    while (n < cap - 1 && (n == 0 || line[n - 1] != '\n')) {
        if (recv(fd, line + n, 1, 0) != 1)
            die("raw recv", TMX_ERR_IO);
        n++;
    }
    line[n] = '\0';
}

/* Puts keys first..first+count-1 in one send, then reads their replies. */
static void put_batch(int fd, int first, int count)
{
    static char req[64 * 1000];
    char line[256];
    size_t len = 0;

    for (int i = first; i < first + count; i++)
        len += (size_t)snprintf(req + len, sizeof(req) - len, "PUT many.%d v%d\n", i, i);
    if (send(fd, req, len, MSG_NOSIGNAL) != (ssize_t)len)
        die("raw send", TMX_ERR_IO);
    for (int i = 0; i < count; i++) {
        raw_line(fd, line, sizeof(line));
        if (strcmp(line, "OK\n") != 0) {
            fprintf(stderr, "kvs_rank: PUT many.%d got '%s'\n", first + i, line);
            exit(1);
        }
    }
}

static void many_keys(int n)
{
    char req[64], want[64], line[256];
    int fd = raw_connect();

    for (int i = 0; i < n; i += 1000)
        put_batch(fd, i, n - i < 1000 ? n - i : 1000);
    for (int i = 0; i < n; i += 1000) {
        snprintf(req, sizeof(req), "GET many.%d\n", i);
        snprintf(want, sizeof(want), "VAL v%d\n", i);
        if (send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req))
            die("raw send", TMX_ERR_IO);
        raw_line(fd, line, sizeof(line));
        if (strcmp(line, want) != 0) {
            fprintf(stderr, "kvs_rank: GET many.%d got '%s'\n", i, line);
            exit(1);
        }
    }
    close(fd);
    printf("kvs_rank: %d keys put and read back\n", n);
}

/* --------------------------------------------------- stalled pipeline */

/* The CPU time tmxrun (our parent) has used, in seconds. */
static double parent_cpu_s(void)
{
    char path[64], stat[1024], *p;
    unsigned long utime = 0, stime = 0;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)getppid());
    if ((f = fopen(path, "r")) == NULL)
        die("open parent's stat", TMX_ERR_IO);
    n = fread(stat, 1, sizeof(stat) - 1, f);
    fclose(f);
    stat[n] = '\0';
    /* after "pid (comm) ": state is field 3, utime 14, stime 15 */
    if ((p = strrchr(stat, ')')) == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2)
        die("parse parent's stat", TMX_ERR_IO);
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

static void stalled_pipeline(void)
{
    char req[2 * BOOT_KVS_LINE_MAX];
    size_t len = 0;
    double cpu;
    int fd = raw_connect();

    len += (size_t)snprintf(req, sizeof(req), "GET never.put\n");
    while (len + 32 < sizeof(req))
        len += (size_t)snprintf(req + len, sizeof(req) - len, "PUT behind.%zu v\n", len);
    if (send(fd, req, len, MSG_NOSIGNAL) != (ssize_t)len)
        die("raw send", TMX_ERR_IO);
    nap(0.2);
    cpu = parent_cpu_s();
    nap(2);
    cpu = parent_cpu_s() - cpu;
    if (cpu > 0.5) {
        fprintf(stderr, "kvs_rank: tmxrun used %.2f s of CPU in 2 s while our GET waited\n", cpu);
        exit(1);
    }
    close(fd);
    printf("kvs_rank: tmxrun idle behind a waiting GET (%.2f s of CPU in 2 s)\n", cpu);
}

int main(int argc, char **argv)
{
    rank_opts_t o;
    boot_kvs_t *kvs;
    tmx_status_t st;

    parse(argc, argv, &o);
    if ((st = boot_env(&env)) != TMX_OK)
        die("boot_env", st);
    if (o.ignore_term)
        signal(SIGTERM, SIG_IGN);
    if ((int)env.rank == o.exit_rank)
        return o.exit_code;
    if ((int)env.rank == o.kill_rank) {
        nap(0.3);
        raise(SIGKILL);
    }
    if ((int)env.rank == o.leave_rank) {
        nap(0.3);
        return 0;
    }
    if (o.sleep_s > 0) {
        nap(o.sleep_s);
        return 0;
    }
    if (o.bad_requests) {
        bad_requests();
        return 0;
    }
    if (o.stalled_pipeline) {
        stalled_pipeline();
        return 0;
    }
    if (o.many_keys > 0) {
        many_keys(o.many_keys);
        return 0;
    }
    if ((st = boot_kvs_connect(env.kvs_addr, &kvs)) != TMX_OK)
        die("connect", st);
    exchange(kvs, &o);
    boot_kvs_close(kvs);
    return 0;
}
