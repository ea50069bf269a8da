/*
 * What a process holds, read from /proc and from malloc, for the scale
 * tests (mp_test's scale case and bench/mpi/alltoall.c, which includes
 * this file too; Linux and glibc only).
 *
 * Sockets are counted by protocol: every descriptor of the process that is
 * a socket (/proc/self/fd/N links to "socket:[INODE]") is looked up by its
 * inode in the tables of the process's network namespace
 * (/proc/self/net/udp, udp6, tcp, tcp6). The same tables, counted whole,
 * give the namespace's (the test host's) sockets of each protocol at that
 * moment, whoever holds them.
 */
#ifndef MP_PROC_H
#define MP_PROC_H

#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MP_PROC_FD_MAX 65536

typedef struct mp_proc_sockets {
    unsigned fds;       /* open descriptors */
    unsigned sockets;   /* of them, sockets of any kind */
    unsigned udp;       /* of them, UDP (IPv4 or IPv6) */
    unsigned tcp;       /* of them, TCP (IPv4 or IPv6), listening ones included */
    unsigned ns_udp;    /* UDP sockets in the whole network namespace */
    unsigned ns_tcp;    /* TCP sockets in the whole namespace, any state */
} mp_proc_sockets_t;

typedef struct mp_proc_mem {
    size_t heap;        /* malloc'd bytes in use: mallinfo2() uordblks + hblkhd, and
                           what the library maps privately for itself */
    size_t rss_kb;      /* VmRSS */
    size_t hwm_kb;      /* VmHWM: peak RSS */
} mp_proc_mem_t;

static int mp_proc_cmp_ul(const void *a, const void *b)
{
    unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;

    return x < y ? -1 : x > y;
}

/* The inodes of the process's sockets, sorted; their number in *n. */
static unsigned long *mp_proc_socket_inodes(unsigned *fds, unsigned *n)
{
    unsigned long *ino = malloc(MP_PROC_FD_MAX * sizeof(*ino));
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    char path[300], link[64];

    *fds = 0;
    *n = 0;
    if (ino == NULL || d == NULL) {
        if (d != NULL)
            closedir(d);
        return ino;
    }
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || (unsigned)atoi(e->d_name) == (unsigned)dirfd(d))
            continue;
        (*fds)++;
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, link, sizeof(link) - 1);
        if (len <= 0)
            continue;
        link[len] = '\0';
        if (strncmp(link, "socket:[", 8) == 0 && *n < MP_PROC_FD_MAX)
            ino[(*n)++] = strtoul(link + 8, NULL, 10);
    }
    closedir(d);
    qsort(ino, *n, sizeof(*ino), mp_proc_cmp_ul);
    return ino;
}

/* Adds to *mine the rows of a /proc/net table whose inode is one of the
 * process's, and to *all every row. */
static void mp_proc_table(const char *path, const unsigned long *ino, unsigned n, unsigned *mine,
                          unsigned *all)
{
    FILE *f = fopen(path, "r");
    char line[512];

    if (f == NULL)
        return;
    if (fgets(line, sizeof(line), f) == NULL) { /* the column names */
        fclose(f);
        return;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long inode = 0;
        char *p = line;

        (*all)++;
        /* the inode is the 10th column: sl local rem st queues tr retr uid timeout inode */
        for (int col = 0; col < 9 && p != NULL; col++) {
            p += strspn(p, " ");
            p = strchr(p, ' ');
        }
        if (p == NULL)
            continue;
        inode = strtoul(p, NULL, 10);
        if (inode != 0 && bsearch(&inode, ino, n, sizeof(*ino), mp_proc_cmp_ul) != NULL)
            (*mine)++;
    }
    fclose(f);
}

static void mp_proc_sockets(mp_proc_sockets_t *s)
{
    unsigned n;
    unsigned long *ino = mp_proc_socket_inodes(&s->fds, &n);

    s->sockets = n;
    s->udp = s->tcp = s->ns_udp = s->ns_tcp = 0;
    if (ino == NULL)
        return;
    mp_proc_table("/proc/self/net/udp", ino, n, &s->udp, &s->ns_udp);
    mp_proc_table("/proc/self/net/udp6", ino, n, &s->udp, &s->ns_udp);
    mp_proc_table("/proc/self/net/tcp", ino, n, &s->tcp, &s->ns_tcp);
    mp_proc_table("/proc/self/net/tcp6", ino, n, &s->tcp, &s->ns_tcp);
    free(ino);
}

/* A "Name:   N kB" line of /proc/self/status, in kB (0 if absent). Read
 * without stdio: a stream's buffer, freed by fclose, would sit in glibc's
 * per-thread cache, which mallinfo2() counts as in use, and show in the
 * next reading as the library's. */
static size_t mp_proc_status_kb(const char *name)
{
    char buf[8192];
    size_t len = strlen(name), got = 0;
    ssize_t r;
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return 0;
    while (got < sizeof(buf) - 1 && (r = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
        got += (size_t)r;
    close(fd);
    buf[got] = '\0';
    for (char *line = buf; line != NULL && *line != '\0'; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, name, len) == 0 && line[len] == ':')
            return strtoul(line + len + 1, NULL, 10);
    }
    return 0;
}

/* The program's own buffers, mapped outside malloc: allocated and freed
 * between two readings of the heap, blocks from malloc would stay in
 * glibc's per-thread cache (counted as in use) and be taken for the
 * library's. Zeroed. */
static void *mp_proc_map(size_t len)
{
    void *p = mmap(NULL, len ? len : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    return p == MAP_FAILED ? NULL : p;
}

static void mp_proc_unmap(void *p, size_t len)
{
    if (p != NULL)
        munmap(p, len ? len : 1);
}

/* extra: what the library holds outside malloc (tmx: the pools it maps
 * privately, tmx_context_memory), counted in the heap figure too. */
static void mp_proc_mem(mp_proc_mem_t *m, size_t extra)
{
    struct mallinfo2 mi = mallinfo2();

    m->heap = mi.uordblks + mi.hblkhd + extra;
    m->rss_kb = mp_proc_status_kb("VmRSS");
    m->hwm_kb = mp_proc_status_kb("VmHWM");
}

/* The network namespace's inode: the test host a process runs on. */
static unsigned long mp_proc_netns(void)
{
    char link[64];
    ssize_t len = readlink("/proc/self/ns/net", link, sizeof(link) - 1);

    if (len <= 0)
        return 0;
    link[len] = '\0';
    return strncmp(link, "net:[", 5) == 0 ? strtoul(link + 5, NULL, 10) : 0;
}

/* How long a program lets its library settle after the exchange before
 * the last measurement: calling into it (to send the ACKs it delays, end
 * what the exchange left under way), as an application that goes on
 * computing and communicating would. */
#define MP_PROC_SETTLE_US 200000

/* One line per process, "scale key=value ...", for bench/scale.sh:
 * the heap at four points (before any message, after the small
 * all-to-all, after the large one, and MP_PROC_SETTLE_US later, the
 * library having been called meanwhile) and the rest at the end. */
static void mp_proc_print(const char *lib, unsigned rank, unsigned size,
                          const mp_proc_mem_t *m0, const mp_proc_mem_t *m1,
                          const mp_proc_mem_t *m2, const mp_proc_mem_t *m3,
                          const mp_proc_sockets_t *s)
{
    unsigned remote = size > 1 ? size - 1 : 1;

    printf("scale lib=%s rank=%u size=%u netns=%lu udp=%u tcp=%u sockets=%u fds=%u ns_udp=%u "
           "ns_tcp=%u hwm_kb=%zu rss_kb=%zu heap0=%zu heap_small=%zu heap_large=%zu "
           "heap_settled=%zu peer_bytes=%lld\n",
           lib, rank, size, mp_proc_netns(), s->udp, s->tcp, s->sockets, s->fds, s->ns_udp,
           s->ns_tcp, m3->hwm_kb, m3->rss_kb, m0->heap, m1->heap, m2->heap, m3->heap,
           ((long long)m1->heap - (long long)m0->heap) / (long long)remote);
}

#endif
