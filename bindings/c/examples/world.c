/* Every rank of a world talks to every other rank over the backend the rule picks for the
 * pair: the first program to write with accio in C, the way an MPI program starts.
 *
 *   accio run -n 4 ./world        (with a libaccio built --features mpi: mpirun -n 4 ./world)
 *   world --help
 *
 * Any argument but --help prints the usage line and exits 2.
 *
 * Each rank prints where it runs, then, for every other rank, one line
 *
 *   rank 0 <-> rank 1: shm (same node ...): message and 4088-byte RMA write ok
 *
 * once a message went each way and the peer's one-sided write landed intact in this rank's
 * memory. Each rank lends every peer one page of a single region of its own (one window per
 * peer over the same memory, accio_window_register_view); the peer writes its pattern there
 * with accio_endpoint_vwrite_to and raises a flag with accio_endpoint_fence_signal, which is
 * stored only after the data landed. A barrier ends the run.
 *
 * Build: cc world.c $(pkg-config --cflags --libs accio) -o world
 */
#include <accio.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                    \
    do {                                                                               \
        accio_status s_ = (call);                                                      \
        if (s_ != ACCIO_OK) {                                                          \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,         \
                    accio_last_error_message(), accio_status_name(s_));                \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

enum { TIMEOUT_MS = 30000 };

/* The byte rank `from` writes at byte i of the page it was lent. */
static uint8_t pattern(size_t from, size_t i) { return (uint8_t)(i * 7 + from * 31 + 1); }

/* What a rank tells its peer first: who it is and where the page it lends starts. */
struct hello {
    uint64_t rank;
    uint64_t offset;
};

/* Both ranks of the pair run this, in the same order of pairs, so neither waits for a
 * peer busy with a third rank for long. */
static void exchange(accio_world *w, accio_region *region, size_t me, size_t peer) {
    accio_endpoint *ep; /* owned by the world: not destroyed here */
    CHECK(accio_world_endpoint(w, peer, &ep));

    /* Page `peer` of this rank's region is lent to `peer`: word 0 is the flag, the rest
     * its data. */
    accio_window *page;
    uint8_t *mem;
    size_t len;
    uint64_t offset;
    CHECK(accio_window_register_view(ep, region, peer * ACCIO_PAGE, ACCIO_PAGE,
                                     ACCIO_ACCESS_WRITE, &page));
    CHECK(accio_window_memory(page, &mem, &len));
    CHECK(accio_window_offset(page, &offset));

    /* A message each way: the peer learns the page's offset (announcing a window with a
     * message is also what makes it visible to the peer). */
    struct hello mine = {me, offset}, theirs;
    size_t got;
    CHECK(accio_endpoint_send(ep, (const uint8_t *)&mine, sizeof mine));
    CHECK(accio_endpoint_recv(ep, (uint8_t *)&theirs, sizeof theirs, &got, TIMEOUT_MS));
    if (got != sizeof theirs || theirs.rank != peer) {
        fprintf(stderr, "rank %zu: the hello from rank %zu says rank %llu (%zu bytes)\n", me,
                peer, (unsigned long long)theirs.rank, got);
        exit(1);
    }

    /* One-sided: write this rank's pattern into the peer's page, then its flag. */
    size_t data = ACCIO_PAGE - 8;
    uint8_t out[ACCIO_PAGE - 8];
    for (size_t i = 0; i < data; i++) out[i] = pattern(me, i);
    CHECK(accio_endpoint_vwrite_to(ep, out, data, theirs.offset + 8, 0));
    accio_signal flag = {.offset = theirs.offset, .value = 1};
    CHECK(accio_endpoint_fence_signal(ep, NULL, &flag));

    /* The peer's flag up means its data is in this rank's page. */
    CHECK(accio_window_wait_u64(page, 0, 1, TIMEOUT_MS));
    for (size_t i = 0; i < data; i++) {
        if (mem[8 + i] != pattern(peer, i)) {
            fprintf(stderr, "rank %zu: byte %zu written by rank %zu is %u, expected %u\n", me,
                    i, peer, mem[8 + i], pattern(peer, i));
            exit(1);
        }
    }

    const char *scheme, *reason;
    CHECK(accio_world_choice(w, peer, &scheme, &reason));
    printf("rank %zu <-> rank %zu: %s (%s): message and %zu-byte RMA write ok\n", me, peer,
           scheme, reason, data);
    /* The peer has written all it will: the handle may go (the window itself stays
     * registered on the endpoint, which the world closes at accio_world_destroy). */
    CHECK(accio_window_destroy(page));
}

int main(int argc, char **argv) {
    static const char USAGE[] = "usage: world   (start it with: accio run -n N ./world)\n";
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        fputs(USAGE, stdout);
        fputs("\nEvery rank exchanges a message and a one-sided RMA write (checked by the\n"
              "receiver) with every other rank, over the backend accio chose for the pair,\n"
              "and prints one line per peer with the backend and the reason. Under mpirun\n"
              "it needs a libaccio built with MPI (cargo build -p accio-capi --features mpi).\n",
              stdout);
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "world: takes no arguments, got %s\n", argv[1]);
        fputs(USAGE, stderr);
        return 2;
    }
    /* One write per line, so the lines of ranks sharing a terminal or pipe do not mix. */
    setvbuf(stdout, NULL, _IOLBF, 0);

    accio_world *w;
    size_t me, size;
    CHECK(accio_world_join(&w));
    CHECK(accio_world_rank(w, &me));
    CHECK(accio_world_size(w, &size));

    char node[256];
    size_t shared[64], nshared;
    CHECK(accio_world_node(w, me, node, sizeof node, NULL));
    accio_status s = accio_world_node_ranks(w, shared, 64, &nshared);
    if (s != ACCIO_BUFFER_TOO_SMALL) CHECK(s);
    printf("rank %zu of %zu on %s, %zu rank(s) on this node\n", me, size, node, nshared);

    /* One page per rank: page p is lent to rank p (page `me` stays unused). */
    accio_region *region;
    CHECK(accio_region_create(size * ACCIO_PAGE, &region));

    /* Every pair (x, y), x < y, in the same order on every rank. */
    for (size_t x = 0; x < size; x++)
        for (size_t y = x + 1; y < size; y++)
            if (me == x || me == y) exchange(w, region, me, me == x ? y : x);

    /* Nobody leaves (closing its endpoints) while a peer may still be checking. */
    CHECK(accio_world_barrier(w, TIMEOUT_MS));
    if (me == 0) printf("world: %zu ranks, every pair ok\n", size);
    CHECK(accio_region_destroy(region));
    CHECK(accio_world_destroy(w));
    return 0;
}
