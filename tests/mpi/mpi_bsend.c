/*
 * Buffered sends: every rank but 0 queues many MPI_Bsend and MPI_Ibsend
 * (eager and rendezvous sizes) to rank 0, which receives them only after
 * a pause; MPI_Buffer_detach must wait until all have gone. Then every
 * rank MPI_Bsends to every other rank at once.
 */
#include "mpi_check.h"

#define BS_COUNT 64
static const size_t bs_sizes[] = {16, 4000, 70000};
#define BS_NSIZES (sizeof(bs_sizes) / sizeof(bs_sizes[0]))

static uint64_t bs_seed(int from, int to, int i)
{
    return mc_mix((uint64_t)from << 40 ^ (uint64_t)to << 20 ^ (uint64_t)i);
}

static void bs_attach(size_t bytes)
{
    MC_CALL(MPI_Buffer_attach(mc_alloc(bytes), (int)bytes));
}

static void bs_detach(void)
{
    void *b;
    int n;

    MC_CALL(MPI_Buffer_detach(&b, &n));
    free(b);
}

static void bs_send(int to, int i, int immediate)
{
    size_t len = bs_sizes[i % BS_NSIZES];
    unsigned char *b = mc_alloc(len);
    MPI_Request q;

    mc_fill(b, len, bs_seed(mc_rank, to, i));
    if (immediate) {
        MC_CALL(MPI_Ibsend(b, (int)len, MPI_BYTE, to, i, MPI_COMM_WORLD, &q));
        MC_CALL(MPI_Request_free(&q));
    } else {
        MC_CALL(MPI_Bsend(b, (int)len, MPI_BYTE, to, i, MPI_COMM_WORLD));
    }
    memset(b, 0, len);   /* the buffered copy is what goes */
    free(b);
}

static void bs_recv(int from, int i)
{
    size_t len = bs_sizes[i % BS_NSIZES];
    unsigned char *b = mc_alloc(len);
    MPI_Status st;

    MC_CALL(MPI_Recv(b, (int)len, MPI_BYTE, from, i, MPI_COMM_WORLD, &st));
    mc_status("bsend recv", &st, from, i, len);
    mc_check("bsend payload", b, len, bs_seed(from, mc_rank, i));
    free(b);
}

static size_t bs_room(int messages)
{
    return (size_t)messages * (bs_sizes[BS_NSIZES - 1] + MPI_BSEND_OVERHEAD);
}

/* Many pending to a slow rank 0; detach waits for them. */
static void bs_slow_receiver(void)
{
    if (mc_rank == 0) {
        usleep(300 * 1000);
        for (int from = 1; from < mc_size; from++)
            for (int i = 0; i < BS_COUNT; i++)
                bs_recv(from, i);
        return;
    }
    bs_attach(bs_room(BS_COUNT));
    for (int i = 0; i < BS_COUNT; i++)
        bs_send(0, i, i & 1);
    bs_detach();
}

static void bs_all_to_all(void)
{
    bs_attach(bs_room(mc_size * 4));
    for (int d = 0; d < mc_size; d++)
        for (int i = 0; i < 4 && d != mc_rank; i++)
            bs_send(d, i, 0);
    for (int s = 0; s < mc_size; s++)
        for (int i = 0; i < 4 && s != mc_rank; i++)
            bs_recv(s, i);
    bs_detach();
}

int main(int argc, char **argv)
{
    mc_init(&argc, &argv, "mpi_bsend");
    bs_slow_receiver();
    MC_CALL(MPI_Barrier(MPI_COMM_WORLD));
    bs_all_to_all();
    mc_intercomm_phase(MC_INTER_BSEND); /* the same over an intercommunicator */
    mc_finish();
    return 0;
}
