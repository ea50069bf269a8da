/* process_vm_readv bandwidth between two processes: the single-copy path
 * (Linux CMA) that a rendezvous transport uses for large messages.
 *
 * The parent (core A) allocates and touches a SIZE-byte buffer, then
 * waits; the child (core B) reads it with process_vm_readv(2) into its own
 * touched buffer in a loop for about TRIAL_MS milliseconds, TRIALS times,
 * and reports the best and median trial in GB/s (1e9 bytes per second).
 * Buffers are reused, as a benchmark's message buffers are.
 *
 * usage: cma_bw [-a CORE_A] [-b CORE_B] [-t TRIALS] [-m TRIAL_MS] SIZE...
 * prints one line per size: process_vm_readv size=<bytes> best_GBps=<x> median_GBps=<y>
 * exits 3 if the kernel refuses process_vm_readv (EPERM/ENOSYS).
 */
#include "common.h"
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int ca = 0, cb = 1, trials = 7, ms = 150, opt;

    while ((opt = getopt(argc, argv, "a:b:t:m:")) != -1) {
        switch (opt) {
        case 'a': ca = atoi(optarg); break;
        case 'b': cb = atoi(optarg); break;
        case 't': trials = atoi(optarg); break;
        case 'm': ms = atoi(optarg); break;
        default: goto usage;
        }
    }
    if (optind >= argc || trials <= 0 || trials > 64 || ms <= 0)
        goto usage;
    pin(ca);
    for (int a = optind; a < argc; a++) {
        size_t size = strtoull(argv[a], NULL, 0);
        char *src;
        if (size == 0 || posix_memalign((void **)&src, 4096, size)) {
            fprintf(stderr, "cma_bw: bad size or out of memory: %s\n", argv[a]);
            return 1;
        }
        memset(src, 1, size);
        pid_t parent = getpid();
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            double r[64];
            char *dst;
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the parent */
            pin(cb);
            if (posix_memalign((void **)&dst, 4096, size))
                _exit(1);
            memset(dst, 2, size);
            for (int t = 0; t < trials; t++) {
                long n = 0;
                double t0 = now_s(), dt;
                do {
                    struct iovec l = {dst, size}, rv = {src, size};
                    ssize_t got = process_vm_readv(parent, &l, 1, &rv, 1, 0);
                    if (got < 0) {
                        fprintf(stderr, "cma_bw: process_vm_readv: %s\n", strerror(errno));
                        _exit(errno == EPERM || errno == ENOSYS ? 3 : 1);
                    }
                    if ((size_t)got != size) {
                        fprintf(stderr, "cma_bw: short read %zd of %zu\n", got, size);
                        _exit(1);
                    }
                    n++;
                    dt = now_s() - t0;
                } while (dt < ms * 1e-3);
                r[t] = (double)size * (double)n / dt / 1e9;
            }
            double best = r[0];
            for (int t = 1; t < trials; t++)
                if (r[t] > best)
                    best = r[t];
            printf("process_vm_readv size=%zu best_GBps=%.3f median_GBps=%.3f trials=%d\n", size, best, median(r, trials), trials);
            fflush(stdout);
            _exit(0);
        }
        int st;
        if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
        free(src);
    }
    return 0;
usage:
    fprintf(stderr, "usage: cma_bw [-a CORE_A] [-b CORE_B] [-t TRIALS] [-m TRIAL_MS] SIZE...\n");
    return 2;
}
