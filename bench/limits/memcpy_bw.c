/* memcpy bandwidth of one core: the copy an eager (copy-in/copy-out)
 * shared-memory transport pays at least once per byte, and twice when it
 * bounces through a shared buffer.
 *
 * For each SIZE, copies a SIZE-byte buffer to another (both allocated and
 * touched beforehand) in a loop for about TRIAL_MS milliseconds, TRIALS
 * times, and reports the best and median trial in GB/s (1e9 bytes copied
 * per second; each byte is read once and written once).
 *
 * usage: memcpy_bw [-c CORE] [-t TRIALS] [-m TRIAL_MS] SIZE...
 * prints one line per size: memcpy size=<bytes> best_GBps=<x> median_GBps=<y>
 */
#include "common.h"
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int core = -1, trials = 7, ms = 150, opt;
    double r[64];

    while ((opt = getopt(argc, argv, "c:t:m:")) != -1) {
        switch (opt) {
        case 'c': core = atoi(optarg); break;
        case 't': trials = atoi(optarg); break;
        case 'm': ms = atoi(optarg); break;
        default: goto usage;
        }
    }
    if (optind >= argc || trials <= 0 || trials > 64 || ms <= 0)
        goto usage;
    if (core >= 0)
        pin(core);
    for (int a = optind; a < argc; a++) {
        size_t size = strtoull(argv[a], NULL, 0);
        char *src, *dst;
        if (size == 0 || posix_memalign((void **)&src, 4096, size) || posix_memalign((void **)&dst, 4096, size)) {
            fprintf(stderr, "memcpy_bw: bad size or out of memory: %s\n", argv[a]);
            return 1;
        }
        memset(src, 1, size);
        memset(dst, 2, size);
        for (int t = 0; t < trials; t++) {
            long n = 0;
            double t0 = now_s(), dt;
            do {
                for (int k = 0; k < 4; k++) {
                    memcpy(dst, src, size);
                    __asm__ volatile("" ::"r"(dst) : "memory");
                }
                n += 4;
                dt = now_s() - t0;
            } while (dt < ms * 1e-3);
            r[t] = (double)size * (double)n / dt / 1e9;
        }
        double best = r[0];
        for (int t = 1; t < trials; t++)
            if (r[t] > best)
                best = r[t];
        printf("memcpy size=%zu best_GBps=%.3f median_GBps=%.3f trials=%d\n", size, best, median(r, trials), trials);
        free(src);
        free(dst);
    }
    return 0;
usage:
    fprintf(stderr, "usage: memcpy_bw [-c CORE] [-t TRIALS] [-m TRIAL_MS] SIZE...\n");
    return 2;
}
