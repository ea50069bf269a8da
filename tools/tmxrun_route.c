/*
 * tmxrun: which of this host's addresses the ranks on other hosts can
 * reach, when --kvs-addr does not say.
 *
 * The kernel knows: a UDP socket connected to a host's address (which
 * sends nothing) is given the source address of the route there, which
 * getsockname() reads. The hosts' addresses come from their names
 * (getaddrinfo); names that do not resolve here (network namespaces, ssh
 * aliases) are asked instead: the agent runs `hostname -I` on the first
 * host, which lists that host's addresses. Loopback answers (a host that
 * is this one) are skipped. Without any answer, the caller falls back to
 * the first interface address and says so.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tmxrun.h"

#define ROUTE_NAMES_MAX 16       /* host names resolved at most */
#define ROUTE_PROBE_MS 5000      /* the agent's answer, at most */
#define ROUTE_PROBE_CMD "hostname -I"

/* The source address of the route to dst; 0 unless none or loopback. */
static int route_source(struct in_addr dst, struct in_addr *src)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr = dst};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), ok;

    if (fd < 0)
        return -1;
    ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
         getsockname(fd, (struct sockaddr *)&sa, &len) == 0;
    close(fd);
    if (!ok || (ntohl(sa.sin_addr.s_addr) >> 24) == 127 || (ntohl(dst.s_addr) >> 24) == 127)
        return -1;
    *src = sa.sin_addr;
    return 0;
}

/* Through the hosts' names. */
static int route_by_names(const run_job_t *job, struct in_addr *src)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *res, *r;

    for (int i = 0; i < job->opts.nhosts && i < ROUTE_NAMES_MAX; i++) {
        int found = 0;
        if (getaddrinfo(job->opts.hosts[i], NULL, &hints, &res) != 0)
            continue;
        for (r = res; r != NULL && !found; r = r->ai_next)
            found = route_source(((struct sockaddr_in *)r->ai_addr)->sin_addr, src) == 0;
        freeaddrinfo(res);
        if (found)
            return 0;
    }
    return -1;
}

/* Runs cmd through sh -c, stdin from /dev/null, and reads its output
 * into buf (NUL-terminated) for at most ROUTE_PROBE_MS. */
static int probe_run(const char *cmd, char *buf, size_t cap)
{
    int pfd[2], status;
    size_t used = 0;
    int64_t end = now_ms() + ROUTE_PROBE_MS;
    pid_t pid;

    if (pipe(pfd) != 0)
        return -1;
    if ((pid = fork()) == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        close(0);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    while (pid > 0 && used + 1 < cap) {
        struct pollfd p = {pfd[0], POLLIN, 0};
        int64_t left = end - now_ms(); /* read once: poll() waits for ever below 0 */
        ssize_t n;
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            break;
        if ((n = read(pfd[0], buf + used, cap - 1 - used)) <= 0)
            break;
        used += (size_t)n;
    }
    buf[used] = '\0';
    close(pfd[0]);
    if (pid > 0) {
        kill(pid, SIGKILL); /* gone already, or too slow */
        waitpid(pid, &status, 0);
    }
    return pid > 0 ? 0 : -1;
}

/* Through the first host's own list of its addresses. */
static int route_by_agent(const run_job_t *job, struct in_addr *src)
{
    char out[1024], *cmd, *save = NULL;

    if (job->opts.agent == NULL || agent_probe_command(job, job->opts.hosts[0], ROUTE_PROBE_CMD, &cmd) != 0)
        return -1;
    if (probe_run(cmd, out, sizeof(out)) != 0)
        out[0] = '\0';
    free(cmd);
    for (char *w = strtok_r(out, " \t\n", &save); w != NULL; w = strtok_r(NULL, " \t\n", &save)) {
        struct in_addr dst;
        if (inet_pton(AF_INET, w, &dst) == 1 && route_source(dst, src) == 0)
            return 0;
    }
    return -1;
}

int route_kvs_ip(const run_job_t *job, char *ip, size_t cap)
{
    struct in_addr src;

    if (route_by_names(job, &src) != 0 && route_by_agent(job, &src) != 0)
        return -1;
    return inet_ntop(AF_INET, &src, ip, (socklen_t)cap) != NULL ? 0 : -1;
}
