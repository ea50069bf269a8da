/*
 * The protocol table: for each transport, which protocol carries a
 * message of a given size. Eager copies the payload into packets; the
 * rendezvous protocols differ in how the receiver's read moves the data
 * (the transport's mechanisms, enum tl_get_kind):
 *
 *   eager   the payload in the packet (up to the transport's eager limit)
 *   get     rendezvous; the receiver copies from the sender's buffer
 *   coop    rendezvous; sender and receiver copy a part each
 *   copy    rendezvous; the sender's side sends the bytes as packets
 *   write   rendezvous by write (seed 003): the receiver answers with its
 *           buffer and key, the sender writes into it (where the sender
 *           cannot, the receiver reads with the transport's first read)
 *
 * The defaults follow what each transport offers: eager up to its limit,
 * then get (or copy where one-sided copies are not offered), and coop from
 * PROTO_COOP_MIN where it is offered, unless the offload engine runs (a
 * coop needs the owner's core while the reader copies, which an
 * application that computes meanwhile does not lend). TMX_PROTO replaces the table of
 * the transports it names:
 *
 *   TMX_PROTO = TRANSPORT:RULE[,RULE...][;TRANSPORT:...]
 *   RULE      = PROTOCOL@SIZE     from SIZE bytes on (suffix k, m or g)
 *
 * Rules ascend by size. eager may only be the first, from 0; a table that does
 * not start at 0 starts with eager. Eager never carries more than the
 * transport's limit: above it, and for synchronous sends, the first
 * rendezvous rule applies (get or copy when there is none).
 */
#ifndef TMX_PROTO_TABLE_H
#define TMX_PROTO_TABLE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tl/tl.h"
#include "tmx.h"

#define PROTO_MAX_TLS 4
#define PROTO_MAX_RULES 8
#define PROTO_COOP_MIN (128u * 1024)

enum proto_kind {
    PROTO_EAGER = 0,             /* otherwise, one enum tl_get_kind bit */
    PROTO_GET = TL_GET_DIRECT,
    PROTO_COOP = TL_GET_SHARED,
    PROTO_COPY = TL_GET_COPY,
    PROTO_WRITE = 1u << 8        /* not a read: offered where tl_iface_t.put_kinds is */
};

typedef struct proto_rule {
    uint64_t from;               /* bytes */
    unsigned kind;               /* enum proto_kind */
} proto_rule_t;

/* TMX_PROTO as parsed, before any transport is open. */
typedef struct proto_spec {
    int n;
    struct {
        char tl[8];
        int n_rules;
        proto_rule_t rules[PROTO_MAX_RULES];
    } t[PROTO_MAX_TLS];
    int offload; /* set by the context: the offload engine runs (no coop by default) */
} proto_spec_t;

/* One open transport's table, compiled against what it offers. */
typedef struct proto_tl {
    const tl_iface_t *iface;
    size_t eager_end;            /* shorter messages go eagerly (unless synchronous) */
    int n_rules;                 /* >= 1 */
    proto_rule_t rules[PROTO_MAX_RULES]; /* rendezvous kinds, ascending; rules[0]
                                            covers everything from eager_end */
    int set;                     /* from TMX_PROTO, not the defaults */
} proto_tl_t;

/* Parses TMX_PROTO's value. 0 for a bad one, with *why saying what. */
int proto_spec_parse(const char *v, proto_spec_t *spec, const char **why);

/* Compiles iface's table from spec (its rules for this transport, or the
 * defaults). TMX_ERR_INVALID, logged, when the rules name a protocol the
 * transport does not offer. */
tmx_status_t proto_tl_compile(proto_tl_t *t, const proto_spec_t *spec, const tl_iface_t *iface);

/* The read mechanism for a rendezvous message of len bytes. */
static inline unsigned proto_tl_kind(const proto_tl_t *t, uint64_t len)
{
    int i = t->n_rules - 1;

    while (i > 0 && t->rules[i].from > len)
        i--;
    return t->rules[i].kind;
}

/* Prints the table, one line per size range. */
void proto_tl_print(FILE *f, const proto_tl_t *t);

/* The protocol's name in TMX_PROTO. */
const char *proto_kind_name(unsigned kind);

#endif
