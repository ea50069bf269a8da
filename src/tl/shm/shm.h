/* Internals of the shm transport, shared by its files. */
#ifndef TMX_TL_SHM_H
#define TMX_TL_SHM_H

#include <endian.h>
#include <stdatomic.h>
#include <stdint.h>

#include "tl/shm/shm_layout.h"
#include "tl/tl.h"
#include "tl/tl_emu.h"
#include "util/idmap.h"
#include "util/list.h"

enum shm_cma {
    SHM_CMA_ON = 0,   /* read peers' memory with process_vm_readv */
    SHM_CMA_OFF = 1   /* copy through cells (refused, or TMX_SHM_CMA=off) */
};

typedef struct shm_ep {
    tl_ep_t super;
    util_dlist_t link;          /* in shm_iface_t.eps */
    shm_seg_hdr_t *seg;         /* the peer's segment, mapped */
    union {
        struct {                /* our fast box (fbox), while we have one */
            uint64_t fb_write;  /* bytes we have written into it, ever */
            uint64_t fb_read;   /* its consumer's read, as we last saw it */
        };
        uint64_t after_pos;     /* while after_box is set (we then have no
                                   box): its bytes up to its last entry */
    };
    uint64_t ring_last;         /* our last cell in its ring that may be unconsumed; SHM_NO_CLAIM */
    uint32_t pid;
    int pidfd;                  /* readable once the peer exits; -1 if none */
    int seg_fd;                 /* our open of its memfd: holds our slot's lock */
    uint16_t slot;              /* our sender slot in its segment */
    uint16_t fbox_retry;        /* short sends until we look for a free box again */
    uint8_t has_slot;           /* slot is ours until we give it back */
    uint8_t failed;
    uint8_t lost;               /* a packet of ours was skipped: fail the peer */
    /* our fast box in its segment (shm_layout.h) */
    uint8_t fbox;               /* its index, or SHM_FBOX_NONE */
    uint8_t fb_use;             /* the transport sends through boxes (TMX_SHM_FBOX) */
    /* another endpoint of ours to the same context had a box (added twice
     * by the layer above): nothing of ours may go before what it put there */
    uint8_t after_box;          /* its box, or SHM_FBOX_NONE */
} shm_ep_t;
_Static_assert(sizeof(void *) != 8 || sizeof(shm_ep_t) == 88,
               "an endpoint is 88 bytes on 64-bit targets: one per node-local peer");

typedef struct shm_iface {
    tl_iface_t super;
    shm_seg_hdr_t *seg;         /* our receive ring */
    int fd;                     /* its memfd, named in our address */
    int wake_fd;                /* a Unix datagram socket: bound to our wake
                                   name, readable when a producer woke us
                                   (a sleep over several transports); and
                                   how we wake others' sleepers. -1: none */
    uint64_t wake_name;         /* that name (seg->wake_name), 0: unbound */
    uint32_t offer_next;        /* where offer_open looks first */
    uint64_t head;              /* next position we consume */
    _Atomic uint64_t wait_head; /* head, for shm_wait, which runs unlocked */
    int held;                   /* the head cell is left for later (cell_leave) */
    int fb_held;                /* a box's next entry is left for later */
    _Atomic uint64_t epoch;     /* progress calls that found work (mt only) */
    int mt;                     /* threads may wait at once */
    int wake_asym;              /* tl_iface_params_t's: see epoch_note */
    int closing;                /* iface_close is under way */
    uint64_t uuid;
    uint64_t host_id;
    int cma;                    /* enum shm_cma */
    int fbox;                   /* we send short packets through fast boxes */
    util_dlist_t eps;
    util_idmap_t ep_map;        /* uuid -> live shm_ep_t of eps */
    util_dlist_t closed_eps;    /* destroyed, freed when the transport closes */
    tl_emu_t emu;               /* copy-mode reads, both ways (tl_emu.h) */
    util_dlist_t helps;         /* shared copies waiting for the owner's write */
    uint64_t jobs_free;         /* bit j: seg->jobs[j] unused */
    uint64_t job_gen;
    uint64_t dropped;
    uint64_t skipped;           /* cells whose sender died before publishing */
    uint64_t stuck_head;        /* ring_unblock: the head that stays unpublished */
    int64_t stuck_since_us;     /* since when (0: not seen stuck) */
    unsigned empty_polls;       /* progress calls that found nothing */
    uint32_t reclaim_next;      /* the sender slot slots_reclaim looks at next */
    unsigned char *bounce;      /* spans gathered, for a layer above without stream */
    /* our fast boxes, as their consumer (shm_layout.h) */
    uint64_t fb_seen;           /* fbox_used as we last took it in */
    uint64_t fb_on;             /* boxes we poll: seen, with a sender, not broken */
    _Atomic uint64_t fb_broken; /* boxes a sender wrote nonsense into (read by shm_wait) */
    uint64_t fb_rd[SHM_N_FBOX]; /* bytes taken from each, ever */
    uint16_t fb_slot[SHM_N_FBOX]; /* each one's sender slot */
    uint8_t slot_fbox[SHM_N_SENDERS]; /* each sender slot's box, or SHM_FBOX_NONE */
    struct {                    /* the span being handed up (span_begin) */
        int on;
        uint16_t slot;          /* its sender's slot */
        uint32_t n, j;          /* its cells, and the next one due */
        uint64_t total;         /* its packet's bytes */
        uint64_t src;           /* its sender's uuid */
        size_t off;             /* bytes gathered in bounce so far */
        void *sink;             /* the layer above's (NULL: it wants no more) */
    } rx;
} shm_iface_t;

shm_cell_t *shm_cell_claim(shm_ep_t *ep, uint64_t *pos);
/* n consecutive cells, 1 to SHM_SPAN_CELLS (a span: shm_layout.h). */
shm_cell_t *shm_cells_claim(shm_ep_t *ep, uint32_t n, uint64_t *pos);
void shm_stop_help(void); /* test hook, TMX_SHM_TEST_STOP=help:N */
tmx_status_t shm_cell_publish(shm_ep_t *ep, shm_cell_t *cell, uint64_t pos, uint32_t kind, uint32_t len);

/* shm_get.c */
tmx_status_t shm_put(tl_ep_t *ep, const void *src, size_t len, uint64_t raddr, uint64_t rkey,
                     uint64_t lkey, unsigned kind);
tmx_status_t shm_get(tl_ep_t *ep, void *dst, size_t len, uint64_t raddr, uint64_t rkey,
                     unsigned kind, tl_get_op_t *op);
void shm_get_cell(shm_iface_t *si, shm_cell_t *cell, const shm_cell_head_t *ch);
int shm_get_progress(shm_iface_t *si);
void shm_get_fail_ep(shm_iface_t *si, shm_ep_t *ep);
void shm_get_init(shm_iface_t *si);
void shm_get_fini(shm_iface_t *si);
int shm_peer_dead(shm_ep_t *ep);

#endif
