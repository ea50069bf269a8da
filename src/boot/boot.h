/*
 * Bootstrap: who am I, how many are we, and a key-value service through
 * which the processes of a job exchange their addresses.
 *
 * A process started by tmxrun finds in its environment
 *
 *   TMX_RANK   its rank, decimal, 0 <= rank < size
 *   TMX_SIZE   the number of processes in the job, decimal, >= 1
 *   TMX_JOBID  16 hex digits, random per job
 *   TMX_KVS    the address of tmxrun's key-value service
 *   TMX_HOST   with tmxrun --hosts: the name of the host the rank was
 *              started on (boot_env() does not read it)
 *
 * Addresses of the key-value service:
 *
 *   unix:@NAME   Unix stream socket in the abstract namespace (what tmxrun
 *                uses: nothing is ever left in the filesystem)
 *   unix:PATH    Unix stream socket bound to a filesystem path
 *   tcp:HOST:PORT  TCP over IPv4 (what tmxrun --hosts uses); HOST is a
 *                dotted quad or a name resolved with getaddrinfo, PORT
 *                1..65535. Both ends set TCP_NODELAY.
 *
 * Protocol: text, one request per line, one reply line per request, in
 * order. Keys and values are tokens of 1..BOOT_KVS_TOKEN_MAX printable
 * ASCII characters other than space (values are hex-encoded blobs).
 *
 *   PUT <key> <value>  ->  OK                    (a later PUT replaces)
 *   GET <key>          ->  VAL <value>           (deferred until some rank
 *                                                 PUTs the key)
 *   FENCE              ->  OK                    (once all ranks of the job
 *                                                 have sent FENCE; repeatable)
 *   any request        ->  ERR <reason>          (malformed request, or the
 *                                                 job is failing: a deferred
 *                                                 GET or FENCE is answered
 *                                                 with ERR instead of hanging)
 *
 * Each rank takes part in fences through one connection. Calls are not
 * thread safe: the owner of a boot_kvs_t serialises them.
 */
#ifndef TMX_BOOT_H
#define TMX_BOOT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "tmx.h"

#define BOOT_KVS_TOKEN_MAX 4096 /* longest key or value, in bytes */
#define BOOT_ADDR_MAX 256       /* longest TMX_KVS address, with its NUL */
#define BOOT_JOBID_DIGITS 16    /* hex digits in TMX_JOBID */
#define BOOT_TCP_CONNECT_MS 5000 /* how long a tcp: connect keeps trying */

/* Longest request line, newline included: "PUT " key " " value "\n". */
#define BOOT_KVS_LINE_MAX (4 + BOOT_KVS_TOKEN_MAX + 1 + BOOT_KVS_TOKEN_MAX + 1)

typedef struct boot_env {
    uint32_t rank;
    uint32_t size;
    uint64_t jobid;
    char kvs_addr[BOOT_ADDR_MAX];
} boot_env_t;

/* Reads TMX_RANK, TMX_SIZE, TMX_JOBID and TMX_KVS. Returns TMX_ERR_NOT_FOUND
 * (without logging) when TMX_KVS is unset, i.e. the process was not started
 * by tmxrun; TMX_ERR_INVALID, with a log line naming the variable, when any
 * of the four is missing or malformed. *env is written only on success. */
tmx_status_t boot_env(boot_env_t *env);

/* A socket address parsed from an address string. */
typedef struct boot_addr {
    struct sockaddr_storage sa;
    socklen_t len;
} boot_addr_t;

/* Parses an address string (see the top of this file), resolving a tcp:
 * host name (which may block). Returns TMX_ERR_INVALID for a malformed
 * address, TMX_ERR_NOT_FOUND for a name that does not resolve. Errors are
 * logged. The server and the clients both use this, so that an abstract
 * name means the same bytes on both sides. */
tmx_status_t boot_addr_parse(const char *addr, boot_addr_t *out);

/* True when tok[0..len) is a valid key or value: 1..BOOT_KVS_TOKEN_MAX
 * bytes, each printable ASCII and not a space. */
int boot_kvs_token_ok(const char *tok, size_t len);

/* A connection to the service. After TMX_ERR_IO or TMX_ERR_PROTO it is out
 * of step with the server and every later call fails: close it. */
typedef struct boot_kvs boot_kvs_t;

/* Connects to the key-value service at addr. Blocks for the connection
 * only: a unix: address is tried once (the server listens before any rank
 * starts); a tcp: one is tried again for up to BOOT_TCP_CONNECT_MS, since
 * the network of another host or namespace may come up late. TMX_ERR_IO
 * when it cannot connect, a tcp: host name that does not resolve included;
 * TMX_ERR_INVALID for a malformed address. *out is set on success; on
 * failure nothing is left open. */
tmx_status_t boot_kvs_connect(const char *addr, boot_kvs_t **out);

/* Stores value under key; returns once the server has stored it. */
tmx_status_t boot_kvs_put(boot_kvs_t *kvs, const char *key, const char *value);

/* Blocks until key has a value, then copies it with its NUL into value.
 * TMX_ERR_NO_SPACE if it does not fit in cap bytes; TMX_ERR_PEER_FAILED if
 * the server gave up on the job (a rank failed) while waiting. */
tmx_status_t boot_kvs_get(boot_kvs_t *kvs, const char *key, char *value, size_t cap);

/* Blocks until every rank of the job has called boot_kvs_fence(); PUTs made
 * before the fence are visible to every GET after it. TMX_ERR_PEER_FAILED if
 * a rank exited or failed, so that the fence can never complete. */
tmx_status_t boot_kvs_fence(boot_kvs_t *kvs);

/* Has idle(arg) called about every millisecond while a call waits for the
 * server's reply (NULL: just block). */
void boot_kvs_set_idle(boot_kvs_t *kvs, void (*idle)(void *arg), void *arg);

/* Closes the connection and frees kvs. NULL is accepted. */
tmx_status_t boot_kvs_close(boot_kvs_t *kvs);

/* Writes the 2*len lowercase hex digits of data and a NUL into out.
 * TMX_ERR_NO_SPACE if cap < 2*len+1 (out untouched). */
tmx_status_t boot_hex_encode(const void *data, size_t len, char *out, size_t cap);

/* Decodes the hex string hex (either case) into out and sets *len to the
 * number of bytes. TMX_ERR_PROTO if hex has odd length or a non-hex
 * character (it usually comes from another process through the service),
 * TMX_ERR_NO_SPACE if the result exceeds cap. Errors are logged. */
tmx_status_t boot_hex_decode(const char *hex, void *out, size_t cap, size_t *len);

#endif
