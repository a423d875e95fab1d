/* The Jacobi halo exchange (seed 001) on a world of ranks: an N x N grid of doubles cut
 * into blocks, one per rank; each iteration every rank sends its faces to its neighbours,
 * receives theirs into its ghost cells, then relaxes its block.
 *
 *   accio run -n 4 ./laplace [--size N] [--iterations K]
 *   laplace --help
 *
 * An unknown option or a bad number prints the usage line and exits 2.
 *
 * Rank 0 prints the decomposition, the time per iteration split into compute and
 * communicate (the slowest rank's), and a checksum of the final grid. The checksum is the
 * same on 1, 2 or 4 ranks: every point is computed by the same floating-point operations in
 * the same order whichever rank owns it, and the checksum adds up a hash of each point's
 * position and value, which does not depend on how the grid was cut.
 *
 * Faces: a row is contiguous in memory, so it goes out straight from the grid and lands
 * straight in the neighbour's ghost row; a column is packed into a buffer and unpacked on
 * arrival. Every face is sent before any is received (a face fits the transport's buffer:
 * shm's ring holds 4 MiB, so no send waits for its receiver), and faces are taken in the
 * order they arrive: accio_endpoint_try_recv never waits, accio_endpoint_recv only when no
 * face is there yet.
 *
 * Build: cc -O2 laplace.c $(pkg-config --cflags --libs accio) -o laplace
 */
#include <accio.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                    \
    do {                                                                               \
        accio_status s_ = (call);                                                      \
        if (s_ != ACCIO_OK) {                                                          \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,         \
                    accio_last_error_message(), accio_status_name(s_));                \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

enum { TIMEOUT_MS = 60000 };
enum side { UP, DOWN, LEFT, RIGHT, SIDES };

/* This rank's block: global rows [r0, r0 + nr) and columns [c0, c0 + nc), stored with a
 * ring of ghost cells, (nr + 2) x (nc + 2) doubles, row after row. */
struct block {
    size_t n, r0, c0, nr, nc;
    accio_endpoint *ep[SIDES];       /* the neighbour on each side; NULL at the grid's edge */
    double *out[SIDES], *in[SIDES];  /* packed columns (LEFT, RIGHT only) */
};

static size_t stride(const struct block *b) { return b->nc + 2; }
static double *at(const struct block *b, double *u, size_t i, size_t j) {
    return &u[i * stride(b) + j];
}
static size_t face_len(const struct block *b, enum side s) {
    return s == UP || s == DOWN ? b->nc : b->nr;
}

/* The fixed boundary: the top edge is held at 1, the other edges at 0; inside starts at 0. */
static double boundary(size_t gi, size_t gj, size_t n) {
    (void)gj;
    (void)n;
    return gi == 0 ? 1.0 : 0.0;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Where the face from side `s` lands: the ghost row itself, or the column's buffer. */
static double *face_in(const struct block *b, double *u, enum side s) {
    switch (s) {
    case UP: return at(b, u, 0, 1);
    case DOWN: return at(b, u, b->nr + 1, 1);
    default: return b->in[s];
    }
}

/* The face from side `s` arrived (`len` bytes): a column goes into its ghost column. */
static void arrived(const struct block *b, double *u, enum side s, size_t len) {
    if (len != face_len(b, s) * sizeof(double)) {
        fprintf(stderr, "laplace: a face of %zu bytes, expected %zu\n", len,
                face_len(b, s) * sizeof(double));
        exit(1);
    }
    if (s == UP || s == DOWN) return;
    size_t j = s == LEFT ? 0 : b->nc + 1;
    for (size_t i = 0; i < b->nr; i++) *at(b, u, i + 1, j) = b->in[s][i];
}

/* One halo exchange: every face out, then every face in, in the order they arrive. */
static void exchange(struct block *b, double *u) {
    for (enum side s = UP; s < SIDES; s++) {
        if (!b->ep[s]) continue;
        const double *face;
        if (s == UP) face = at(b, u, 1, 1);
        else if (s == DOWN) face = at(b, u, b->nr, 1);
        else {
            size_t j = s == LEFT ? 1 : b->nc;
            for (size_t i = 0; i < b->nr; i++) b->out[s][i] = *at(b, u, i + 1, j);
            face = b->out[s];
        }
        CHECK(accio_endpoint_send(b->ep[s], (const uint8_t *)face, face_len(b, s) * sizeof(double)));
    }
    unsigned pending = 0;
    for (enum side s = UP; s < SIDES; s++)
        if (b->ep[s]) pending |= 1u << s;
    while (pending) {
        unsigned before = pending;
        for (enum side s = UP; s < SIDES; s++) {
            if (!(pending & 1u << s)) continue;
            size_t len;
            accio_status st = accio_endpoint_try_recv(b->ep[s], (uint8_t *)face_in(b, u, s),
                                                      face_len(b, s) * sizeof(double), &len);
            if (st == ACCIO_WOULD_BLOCK) continue;
            CHECK(st);
            arrived(b, u, s, len);
            pending &= ~(1u << s);
        }
        if (pending != before) continue;
        /* No face arrived: wait for the first one still missing. */
        enum side s = UP;
        while (!(pending & 1u << s)) s++;
        size_t len;
        CHECK(accio_endpoint_recv(b->ep[s], (uint8_t *)face_in(b, u, s),
                                  face_len(b, s) * sizeof(double), &len, TIMEOUT_MS));
        arrived(b, u, s, len);
        pending &= ~(1u << s);
    }
}

/* One Jacobi sweep from u into v over the block's points off the grid's boundary (which
 * both arrays hold from the start and never change). */
static void relax(const struct block *b, const double *restrict u, double *restrict v) {
    size_t w = stride(b);
    size_t i0 = b->r0 == 0 ? 2 : 1, i1 = b->r0 + b->nr == b->n ? b->nr - 1 : b->nr;
    size_t j0 = b->c0 == 0 ? 2 : 1, j1 = b->c0 + b->nc == b->n ? b->nc - 1 : b->nc;
    for (size_t i = i0; i <= i1; i++)
        for (size_t j = j0; j <= j1; j++)
            v[i * w + j] = 0.25 * ((u[(i - 1) * w + j] + u[(i + 1) * w + j]) +
                                   (u[i * w + j - 1] + u[i * w + j + 1]));
}

/* A 64-bit mix (splitmix64's finalizer): nearby inputs give unrelated outputs. */
static uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static double max(double a, double b) { return a > b ? a : b; }

/* What each rank reports to rank 0 at the end. */
struct report {
    double compute, communicate; /* seconds, all iterations */
    uint64_t checksum;           /* sum of the hashes of this block's points */
    double max;                  /* the largest value off the boundary */
};

static struct report summarize(const struct block *b, double *u, double compute, double comm) {
    struct report r = {compute, comm, 0, 0.0};
    for (size_t i = 0; i < b->nr; i++) {
        for (size_t j = 0; j < b->nc; j++) {
            size_t gi = b->r0 + i, gj = b->c0 + j;
            double x = *at(b, u, i + 1, j + 1);
            uint64_t bits;
            memcpy(&bits, &x, sizeof bits);
            r.checksum += mix(bits ^ mix(gi * b->n + gj));
            int inside = gi > 0 && gj > 0 && gi + 1 < b->n && gj + 1 < b->n;
            if (inside && x > r.max) r.max = x;
        }
    }
    return r;
}

static const char USAGE[] = "usage: laplace [--size N] [--iterations K]   "
                            "(start it with: accio run -n P ./laplace)\n";

static void usage_error(const char *problem, const char *arg) {
    fprintf(stderr, "laplace: %s %s\n", problem, arg);
    fputs(USAGE, stderr);
    exit(2);
}

/* A whole number of at least `min` for option `opt`, or a usage error. */
static size_t number(const char *opt, const char *s, size_t min) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-' || v < min || v > 1u << 30) {
        fprintf(stderr, "laplace: %s takes a whole number from %zu to 2^30, not \"%s\"\n", opt,
                min, s);
        fputs(USAGE, stderr);
        exit(2);
    }
    return (size_t)v;
}

int main(int argc, char **argv) {
    size_t n = 4096, iterations = 100;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(USAGE, stdout);
            fputs("\nJacobi iterations on an N x N grid of doubles (default 4096) whose top edge\n"
                  "is held at 1 and other edges at 0, K iterations (default 100), the grid cut\n"
                  "into P blocks (P = 4: 2 x 2), faces exchanged with the neighbours every\n"
                  "iteration through the world's endpoints. Prints the time per iteration\n"
                  "(compute, communicate) and a checksum of the final grid, the same for any P.\n",
                  stdout);
            return 0;
        }
        if (strcmp(a, "--size") && strcmp(a, "--iterations")) usage_error("unknown option", a);
        if (i + 1 == argc) usage_error("missing the value of", a);
        if (!strcmp(a, "--size")) n = number(a, argv[++i], 3);
        else iterations = number(a, argv[++i], 1);
    }

    accio_world *world;
    size_t rank, size;
    CHECK(accio_world_join(&world));
    CHECK(accio_world_rank(world, &rank));
    CHECK(accio_world_size(world, &size));

    /* py x px blocks, as square as P allows (rows first: a row face needs no packing). */
    size_t px = 1;
    for (size_t d = 1; d * d <= size; d++)
        if (size % d == 0) px = d;
    size_t py = size / px;
    if (n < py || n < px) {
        if (rank == 0) fprintf(stderr, "laplace: --size %zu is too small for %zu x %zu blocks\n", n, py, px);
        return 2;
    }
    size_t by = rank / px, bx = rank % px;
    struct block b = {.n = n};
    b.r0 = by * n / py;
    b.nr = (by + 1) * n / py - b.r0;
    b.c0 = bx * n / px;
    b.nc = (bx + 1) * n / px - b.c0;

    /* The neighbours' endpoints, connected now rather than in the first timed iteration. */
    size_t neighbour[SIDES] = {rank - px, rank + px, rank - 1, rank + 1};
    int has[SIDES] = {by > 0, by + 1 < py, bx > 0, bx + 1 < px};
    for (enum side s = UP; s < SIDES; s++) {
        if (!has[s]) continue;
        CHECK(accio_world_endpoint(world, neighbour[s], &b.ep[s]));
        if (s == LEFT || s == RIGHT) {
            b.out[s] = malloc(b.nr * sizeof(double));
            b.in[s] = malloc(b.nr * sizeof(double));
            if (!b.out[s] || !b.in[s]) { perror("malloc"); return 1; }
        }
    }

    size_t cells = (b.nr + 2) * (b.nc + 2);
    double *u, *v;
    if (posix_memalign((void **)&u, 64, cells * sizeof(double)) ||
        posix_memalign((void **)&v, 64, cells * sizeof(double))) {
        perror("posix_memalign");
        return 1;
    }
    memset(u, 0, cells * sizeof(double));
    for (size_t i = 0; i < b.nr; i++)
        for (size_t j = 0; j < b.nc; j++)
            *at(&b, u, i + 1, j + 1) = boundary(b.r0 + i, b.c0 + j, n);
    memcpy(v, u, cells * sizeof(double));

    CHECK(accio_world_barrier(world, TIMEOUT_MS));
    double compute = 0, communicate = 0;
    for (size_t it = 0; it < iterations; it++) {
        double t0 = now();
        exchange(&b, u);
        double t1 = now();
        relax(&b, u, v);
        double t2 = now();
        communicate += t1 - t0;
        compute += t2 - t1;
        double *t = u;
        u = v;
        v = t;
    }

    /* Rank 0 gathers the reports: the slowest rank's times, the sum of the checksums. */
    struct report mine = summarize(&b, u, compute, communicate);
    if (rank != 0) {
        accio_endpoint *ep0;
        CHECK(accio_world_endpoint(world, 0, &ep0));
        CHECK(accio_endpoint_send(ep0, (const uint8_t *)&mine, sizeof mine));
    } else {
        struct report all = mine;
        for (size_t r = 1; r < size; r++) {
            accio_endpoint *ep;
            struct report got;
            size_t len;
            CHECK(accio_world_endpoint(world, r, &ep));
            CHECK(accio_endpoint_recv(ep, (uint8_t *)&got, sizeof got, &len, TIMEOUT_MS));
            all.compute = max(all.compute, got.compute);
            all.communicate = max(all.communicate, got.communicate);
            all.checksum += got.checksum;
            all.max = max(all.max, got.max);
        }
        double k = (double)iterations;
        printf("laplace: %zu x %zu grid, %zu iterations, %zu rank(s) as %zu x %zu blocks of about "
               "%zu x %zu\n",
               n, n, iterations, size, py, px, b.nr, b.nc);
        printf("per iteration: compute %.3f ms, communicate %.3f ms (the slowest rank's)\n",
               all.compute / k * 1e3, all.communicate / k * 1e3);
        printf("checksum %016llx, largest value inside %.17g\n",
               (unsigned long long)all.checksum, all.max);
    }

    /* Nobody leaves (closing its endpoints) while rank 0 still gathers. */
    CHECK(accio_world_barrier(world, TIMEOUT_MS));
    CHECK(accio_world_destroy(world));
    for (enum side s = UP; s < SIDES; s++) {
        free(b.out[s]);
        free(b.in[s]);
    }
    free(u);
    free(v);
    return 0;
}
