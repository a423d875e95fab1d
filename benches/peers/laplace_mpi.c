/*
 * laplace_mpi.c: the hand-written MPI reference of `accio demo laplace`
 * (scripts/compare-laplace.sh runs both on the same grid and ranks, interleaved).
 *
 * The same workload, decomposition and kernel as crates/grid (seed 001's streaming
 * Jacobi/Laplacian), written the way an MPI user would:
 *   - MPI_Cart_create over DIMS (row-major ranks, as accio's), uneven splits the same way
 *     (the first n % d ranks of an axis get one cell more), ghost layers only on axes with
 *     neighbours;
 *   - halos of MPI_Type_create_subarray faces (MPI packs strided faces), exchanged one of
 *     three ways (-x), so that accio is measured against the best of them:
 *       sendrecv: two blocking MPI_Sendrecv shifts per axis (the textbook exchange);
 *       isend:    every face at once, MPI_Irecv and MPI_Isend of all faces and one
 *                 MPI_Waitall (what an expert writes: no shift waits for another);
 *       rma:      MPI-3 one-sided, MPI_Put of each face into the neighbour's ghost cells
 *                 of a window over the local array, between two MPI_Win_fence calls;
 *   - per iteration: compute (the stencil and the update, streamed over one slab buffer as
 *     accio's kernel is: Y of a slab computed in the loop that adds Y of the slab before to
 *     its X; same expression order), synchronize (MPI_Barrier), communicate
 *     (the Sendrecvs) -- the phases in accio's order, so the barrier absorbs load imbalance
 *     in both;
 *   - the same initial values and the same digest of the final grid (a wrapping sum of a
 *     hash of each cell's global index and bits), so the script checks that both computed
 *     the same grid bit for bit.
 *
 * Build: mpicc -O3 -ffp-contract=off -o laplace_mpi laplace_mpi.c
 * Usage: mpirun -np N laplace_mpi -g 4096x4096 [-i ITERS] [-d 2x1] [-p] [-h HALO]
 *                                  [-x sendrecv|isend|rma]
 * Output (rank 0): "phase NAME MEDIAN_MS MAX_MS" for compute, synchronize, communicate and
 * total (over ranks x iterations), "halo_bytes B" (rank 0's per iteration), "digest 0x...".
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int parse_list(const char *s, long *out, int max) {
    int n = 0;
    while (*s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v <= 0) return -1;
        out[n++] = v;
        s = end;
        if (*s == 'x' || *s == 'X') s++;
        else if (*s) return -1;
    }
    return n;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    long g[3] = {0}, d[3] = {0};
    int ng = 0, nd = 0, iters = 100, periodic = 0, halo = 1;
    enum { SENDRECV, ISEND, RMA } how = SENDRECV;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-g") && i + 1 < argc) ng = parse_list(argv[++i], g, 3);
        else if (!strcmp(argv[i], "-d") && i + 1 < argc) nd = parse_list(argv[++i], d, 3);
        else if (!strcmp(argv[i], "-i") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-h") && i + 1 < argc) halo = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-p")) periodic = 1;
        else if (!strcmp(argv[i], "-x") && i + 1 < argc) {
            const char *x = argv[++i];
            if (!strcmp(x, "sendrecv")) how = SENDRECV;
            else if (!strcmp(x, "isend")) how = ISEND;
            else if (!strcmp(x, "rma")) how = RMA;
            else {
                if (rank == 0) fprintf(stderr, "laplace_mpi: -x %s: sendrecv, isend or rma\n", x);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
        }
        else {
            if (rank == 0) fprintf(stderr, "laplace_mpi: unknown argument %s\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (ng < 2 || ng > 3 || (nd && nd != ng) || iters < 1 || halo < 1) {
        if (rank == 0) fprintf(stderr, "usage: laplace_mpi -g NYxNX|NZxNYxNX [-d DIMS] [-i ITERS] [-p] [-h HALO] [-x sendrecv|isend|rma]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* Everything in 3 axes, the unused one of a 2D grid of extent 1 (as crates/grid). */
    long shape[3] = {1, 1, 1};
    int dims[3] = {1, 1, 1}, per[3] = {0, 0, 0};
    for (int a = 0; a < ng; a++) {
        shape[3 - ng + a] = g[a];
        per[3 - ng + a] = periodic;
        if (nd) dims[3 - ng + a] = (int)d[a];
    }
    if (!nd) MPI_Dims_create(size, 3, dims);
    if ((long)dims[0] * dims[1] * dims[2] != size) {
        if (rank == 0) fprintf(stderr, "laplace_mpi: dims do not multiply to %d ranks\n", size);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 3, dims, per, 0, &cart);
    int c[3];
    MPI_Cart_coords(cart, rank, 3, c);

    long start[3], len[3], h[3], alloc[3];
    for (int a = 0; a < 3; a++) {
        long base = shape[a] / dims[a], extra = shape[a] % dims[a];
        start[a] = c[a] * base + (c[a] < extra ? c[a] : extra);
        len[a] = base + (c[a] < extra);
        h[a] = (a >= 3 - ng && (dims[a] > 1 || per[a])) ? halo : 0;
        alloc[a] = len[a] + 2 * h[a];
    }
    size_t elems = (size_t)(alloc[0] * alloc[1] * alloc[2]);
    double *x = NULL;
    if (posix_memalign((void **)&x, 4096, elems * sizeof(double))) MPI_Abort(MPI_COMM_WORLD, 1);
    memset(x, 0, elems * sizeof(double));
#define IDX(z, y, xx) (((size_t)(z) * alloc[1] + (size_t)(y)) * alloc[2] + (size_t)(xx))

    /* Initial values: 1.0 on non-periodic global borders, hashed values inside (seed 1). */
    const uint64_t seed = 1;
    for (long z = h[0]; z < h[0] + len[0]; z++)
        for (long y = h[1]; y < h[1] + len[1]; y++)
            for (long xx = h[2]; xx < h[2] + len[2]; xx++) {
                long gz = start[0] + z - h[0], gy = start[1] + y - h[1], gx = start[2] + xx - h[2];
                long gg[3] = {gz, gy, gx};
                int border = 0;
                for (int a = 3 - ng; a < 3; a++)
                    if (!per[a] && (gg[a] == 0 || gg[a] + 1 == shape[a])) border = 1;
                uint64_t linear = (uint64_t)((gz * shape[1] + gy) * shape[2] + gx);
                x[IDX(z, y, xx)] = border ? 1.0
                    : (double)(mix(linear ^ mix(seed)) >> 11) / (double)(1ULL << 53);
            }

    /* Face and ghost datatypes per side: subarrays of the local array; and for RMA, where
     * each face lands in the neighbour's array (its extent along the axis may differ by
     * one cell: uneven splits). */
    MPI_Datatype face[6], ghost[6], remote[6];
    int nbr[6];
    int asizes[3] = {(int)alloc[0], (int)alloc[1], (int)alloc[2]};
    long halo_bytes = 0;
    for (int a = 0; a < 3; a++) {
        int lo_nbr, hi_nbr;
        MPI_Cart_shift(cart, a, 1, &lo_nbr, &hi_nbr);
        for (int up = 0; up < 2; up++) {
            int k = a * 2 + up;
            nbr[k] = h[a] ? (up ? hi_nbr : lo_nbr) : MPI_PROC_NULL;
            face[k] = ghost[k] = remote[k] = MPI_DATATYPE_NULL;
            if (!h[a]) continue; /* no ghosts on this axis: nothing to exchange */
            int sub[3], fst[3], gst[3];
            for (int b = 0; b < 3; b++) {
                sub[b] = (int)len[b];
                fst[b] = gst[b] = (int)h[b];
            }
            sub[a] = (int)h[a];
            fst[a] = (int)(up ? len[a] : h[a]);
            gst[a] = (int)(up ? len[a] + h[a] : 0);
            MPI_Type_create_subarray(3, asizes, sub, fst, MPI_ORDER_C, MPI_DOUBLE, &face[k]);
            MPI_Type_create_subarray(3, asizes, sub, gst, MPI_ORDER_C, MPI_DOUBLE, &ghost[k]);
            MPI_Type_commit(&face[k]);
            MPI_Type_commit(&ghost[k]);
            if (nbr[k] != MPI_PROC_NULL) {
                /* My face k goes to neighbour k: into its ghost on the other side (its low
                 * ghost at 0 when it is my high neighbour, its high ghost past its cells
                 * when it is my low one). */
                int nc[3];
                MPI_Cart_coords(cart, nbr[k], 3, nc);
                long base = shape[a] / dims[a], extra = shape[a] % dims[a];
                long nlen = base + (nc[a] < extra);
                int nsizes[3] = {asizes[0], asizes[1], asizes[2]}, rst[3];
                nsizes[a] = (int)(nlen + 2 * h[a]);
                for (int b = 0; b < 3; b++) rst[b] = (int)h[b];
                rst[a] = up ? 0 : (int)(nlen + h[a]);
                MPI_Type_create_subarray(3, nsizes, sub, rst, MPI_ORDER_C, MPI_DOUBLE, &remote[k]);
                MPI_Type_commit(&remote[k]);
            }
            if (nbr[k] != MPI_PROC_NULL && nbr[k] != rank)
                halo_bytes += (long)sub[0] * sub[1] * sub[2] * (long)sizeof(double);
        }
    }

    /* The cells updated: owned minus fixed borders. */
    long lo[3], hi[3];
    for (int a = 0; a < 3; a++) {
        lo[a] = h[a];
        hi[a] = h[a] + len[a];
        if (a >= 3 - ng && !per[a]) {
            if (start[a] == 0) lo[a]++;
            if (start[a] + len[a] == shape[a]) hi[a]--;
        }
        if (hi[a] < lo[a]) hi[a] = lo[a];
    }
    const double coef = ng == 2 ? 0.2 : 0.1;
    long w = hi[2] - lo[2];
    int s_axis = 3 - ng;
    long rows = ng == 3 ? hi[1] - lo[1] : 1;
    double *y = NULL; /* Y of one slab */
    if (posix_memalign((void **)&y, 4096, (size_t)(rows * w + 1) * sizeof(double)))
        MPI_Abort(MPI_COMM_WORLD, 1);
    const size_t row = (size_t)alloc[2], plane = (size_t)(alloc[1] * alloc[2]);

    MPI_Win win = MPI_WIN_NULL;
    if (how == RMA)
        MPI_Win_create(x, (MPI_Aint)(elems * sizeof(double)), sizeof(double), MPI_INFO_NULL, cart,
                       &win);
    double *times = malloc(sizeof(double) * 3 * (size_t)iters);
    for (int it = -1; it < iters; it++) {
        double t0 = MPI_Wtime();
        if (it >= 0 && w > 0 && rows > 0 && hi[s_axis] > lo[s_axis]) {
            /* Y of the first slab into the buffer; then per next slab s, in one loop per row:
             * Y of s, X += coef * Y of s - 1 (the buffer), the buffer takes Y of s. The cell
             * of s - 1 is read by no later stencil, so it may be updated right there. */
            const size_t back = ng == 2 ? row : plane;
            for (long s = lo[s_axis]; s <= hi[s_axis]; s++) {
                for (long k = 0; k < rows; k++) {
                    long zz = ng == 3 ? (s < hi[s_axis] ? s : s - 1) : lo[0];
                    long yy = ng == 3 ? lo[1] + k : (s < hi[s_axis] ? s : s - 1);
                    double *m = x + IDX(zz, yy, lo[2]);
                    double *ys = y + k * w;
                    if (s == hi[s_axis]) { /* the last slab's update */
                        for (long i = 0; i < w; i++) m[i] += coef * ys[i];
                        continue;
                    }
                    if (s == lo[s_axis]) { /* the first slab's Y */
                        for (long i = 0; i < w; i++)
                            ys[i] = ng == 2
                                ? (m[i - 1] + m[i + 1]) + (m[i - row] + m[i + row]) - 4.0 * m[i]
                                : ((m[i - 1] + m[i + 1]) + (m[i - row] + m[i + row]))
                                      + (m[i - plane] + m[i + plane]) - 6.0 * m[i];
                        continue;
                    }
                    /* The next row's operand from memory (its down row in 2D, the plane
                     * behind in 3D) asked for now, as accio's kernel does: the hardware
                     * prefetcher alone leaves this loop waiting on memory. */
                    size_t ahead = (size_t)(m - x) + row + (ng == 2 ? row : plane);
                    for (long i = 0; i < w; i += 8)
                        if (ahead + (size_t)i < elems) __builtin_prefetch(x + ahead + i);
                    double *restrict done = m - back;
                    const double *restrict c = m;
                    if (ng == 2) {
                        for (long i = 0; i < w; i++) {
                            double v = (c[i - 1] + c[i + 1]) + (done[i] + c[i + row]) - 4.0 * c[i];
                            done[i] += coef * ys[i];
                            ys[i] = v;
                        }
                    } else {
                        for (long i = 0; i < w; i++) {
                            double v = ((c[i - 1] + c[i + 1]) + (c[i - row] + c[i + row]))
                                + (done[i] + c[i + plane]) - 6.0 * c[i];
                            done[i] += coef * ys[i];
                            ys[i] = v;
                        }
                    }
                }
            }
        }
        double t1 = MPI_Wtime();
        MPI_Barrier(cart);
        double t2 = MPI_Wtime();
        if (how == SENDRECV) {
            for (int a = 0; a < 3; a++) {
                if (!h[a]) continue;
                /* my +face to the +neighbour, the -neighbour's +face into my -ghost; then back. */
                MPI_Sendrecv(x, 1, face[a * 2 + 1], nbr[a * 2 + 1], a * 2,
                             x, 1, ghost[a * 2], nbr[a * 2], a * 2, cart, MPI_STATUS_IGNORE);
                MPI_Sendrecv(x, 1, face[a * 2], nbr[a * 2], a * 2 + 1,
                             x, 1, ghost[a * 2 + 1], nbr[a * 2 + 1], a * 2 + 1, cart, MPI_STATUS_IGNORE);
            }
        } else if (how == ISEND) {
            /* Every receive posted first, then every send, one wait: faces are owned cells
             * only (no corners), so no exchange depends on another. Face k goes to
             * neighbour k with tag k; the ghost on side k comes from neighbour k, which
             * sent it as its face on the other side (tag k ^ 1). */
            MPI_Request req[12];
            int n = 0;
            for (int k = 0; k < 6; k++)
                if (ghost[k] != MPI_DATATYPE_NULL)
                    MPI_Irecv(x, 1, ghost[k], nbr[k], k ^ 1, cart, &req[n++]);
            for (int k = 0; k < 6; k++)
                if (face[k] != MPI_DATATYPE_NULL)
                    MPI_Isend(x, 1, face[k], nbr[k], k, cart, &req[n++]);
            MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
        } else {
            /* One access and exposure epoch: every face put into its neighbour's ghost.
             * No RMA precedes the first fence; no local store and no RMA follow inside the
             * epoch before the second. */
            MPI_Win_fence(MPI_MODE_NOPRECEDE, win);
            for (int k = 0; k < 6; k++)
                if (remote[k] != MPI_DATATYPE_NULL)
                    MPI_Put(x, 1, face[k], nbr[k], 0, 1, remote[k], win);
            MPI_Win_fence(MPI_MODE_NOSTORE | MPI_MODE_NOSUCCEED, win);
        }
        double t3 = MPI_Wtime();
        if (it >= 0) {
            times[3 * it] = (t1 - t0) * 1e3;
            times[3 * it + 1] = (t2 - t1) * 1e3;
            times[3 * it + 2] = (t3 - t2) * 1e3;
        }
    }

    if (win != MPI_WIN_NULL) MPI_Win_free(&win);
    uint64_t digest = 0, total_digest = 0;
    for (long z = h[0]; z < h[0] + len[0]; z++)
        for (long y = h[1]; y < h[1] + len[1]; y++)
            for (long xx = h[2]; xx < h[2] + len[2]; xx++) {
                long gz = start[0] + z - h[0], gy = start[1] + y - h[1], gx = start[2] + xx - h[2];
                uint64_t linear = (uint64_t)((gz * shape[1] + gy) * shape[2] + gx);
                uint64_t bits;
                memcpy(&bits, &x[IDX(z, y, xx)], 8);
                digest += mix(linear ^ mix(bits));
            }
    MPI_Reduce(&digest, &total_digest, 1, MPI_UINT64_T, MPI_SUM, 0, cart);

    double *all = rank == 0 ? malloc(sizeof(double) * 3 * (size_t)iters * (size_t)size) : NULL;
    MPI_Gather(times, 3 * iters, MPI_DOUBLE, all, 3 * iters, MPI_DOUBLE, 0, cart);
    if (rank == 0) {
        size_t n = (size_t)iters * (size_t)size;
        double *v = malloc(sizeof(double) * n);
        const char *names[4] = {"compute", "synchronize", "communicate", "total"};
        for (int p = 0; p < 4; p++) {
            for (size_t i = 0; i < n; i++)
                v[i] = p < 3 ? all[3 * i + p] : all[3 * i] + all[3 * i + 1] + all[3 * i + 2];
            qsort(v, n, sizeof *v, cmp_double);
            printf("phase %s %.6f %.6f\n", names[p], v[n / 2], v[n - 1]);
        }
        printf("halo_bytes %ld\n", halo_bytes);
        printf("digest 0x%016llx\n", (unsigned long long)total_digest);
        free(v);
        free(all);
    }
    MPI_Finalize();
    return 0;
}
