/*
 * The protocols: eager below the transport's limit, rendezvous above it
 * (seed 000): the sender posts TMH|RVH, the receiver reads the sender's
 * buffer straight into the user buffer once matched and answers FIN; the
 * sender's request completes on FIN only. Synchronous sends always use
 * rendezvous, so that they complete only after the match.
 */
#ifndef TMX_PROTO_H
#define TMX_PROTO_H

#include "core/core.h"

/* Starts a send. On TMX_OK the request completes now (eager) or on FIN;
 * on error nothing was sent and the request is untouched. */
/* Sends an eager message that keeps no request (TMX_OP_FLAG_INJECT). */
tmx_status_t proto_inject(tmx_context_h ctx, tmx_peer_t peer, const void *buf, size_t len,
                          uint64_t tag, int has_data, uint64_t data);
tmx_status_t proto_send(tmx_context_h ctx, struct tmx_request *req, tmx_peer_t peer,
                        const void *buf, size_t len, uint64_t tag);

/* Matches a new receive against the unexpected messages, or posts it. */
tmx_status_t proto_recv(tmx_context_h ctx, struct tmx_request *req);

/* Delivers an unexpected message (matched or claimed) into a receive and
 * frees the message. */
void proto_msg_deliver(tmx_context_h ctx, struct tmx_message *msg, struct tmx_request *req);

/* Drops a claimed message; a rendezvous sender still gets its FIN. */
void proto_msg_discard(tmx_context_h ctx, struct tmx_message *msg);

/* The transports' upward callback (tl_recv_cb_t). */
void proto_recv_cb(void *arg, uint64_t src_uuid, const void *data, size_t len);

/* The transports' admission callback (tl_admit_cb_t): 0 for a packet
 * that would be one more unexpected message while they hold as many bytes
 * as TMX_UNEXPECTED_MAX allows. */
int proto_admit_cb(void *arg, uint64_t src_uuid, const void *data, size_t len);

/* Retries control packets that found the transport full. */
int proto_progress(tmx_context_h ctx);

/* Frees control packets still waiting (context teardown). */
void proto_fini(tmx_context_h ctx);

#endif
