/* Runs a fuzz target over the files named on the command line, for
 * compilers without libFuzzer: the seed corpus becomes a regression test.
 * Each input is named before it runs, so that a crash, an abort from the
 * target's own checks or a sanitizer report points at it; a target that
 * returns anything but 0, or an input that cannot be read, fails the run. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay(const char *path)
{
    static unsigned char buf[1 << 20];
    FILE *f = fopen(path, "rb");
    size_t n;
    int rc;

    if (f == NULL) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return 1;
    }
    n = fread(buf, 1, sizeof(buf), f);
    if (ferror(f) || !feof(f)) {
        fprintf(stderr, "replay: %s: %s\n", path, ferror(f) ? "read error" : "larger than 1 MiB");
        fclose(f);
        return 1;
    }
    fclose(f);
    printf("replay: %s (%zu bytes)\n", path, n);
    fflush(stdout);
    if ((rc = LLVMFuzzerTestOneInput(buf, n)) != 0) {
        fprintf(stderr, "replay: %s: the target returned %d\n", path, rc);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int failed = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s INPUT...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++)
        failed += replay(argv[i]);
    printf("replayed %d inputs, %d failed\n", argc - 1, failed);
    return failed != 0;
}
