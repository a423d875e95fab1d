/*
 * mpi_bw_lat.c: the MPI side of accio's scripts/compare-transport.sh.
 *
 * Two ranks, two tests, modelled on the OSU micro-benchmarks so that the figures read like
 * the ones people quote:
 *
 *   bw   osu_bw style: per iteration rank 0 posts a window of 64 MPI_Isend of SIZE bytes
 *        and waits for them, rank 1 posts 64 MPI_Irecv and waits, then acknowledges with a
 *        4-byte message. A sample is window * iterations * SIZE / elapsed, timed at rank 0
 *        from the first Isend to the acknowledgement of the last window (so it counts bytes
 *        the receiver has completed, like accio's stream_bw).
 *   lat  osu_latency style ping-pong with MPI_Send/MPI_Recv. Unlike osu_latency (which
 *        prints the mean), every round trip is timed on its own and a sample is the median
 *        round trip of one batch, halved: the same method as `accio bench transport`, so
 *        the two figures are comparable on a noisy machine. The batch mean is printed too.
 *
 * Buffers are page-aligned (posix_memalign) and touched before timing, for the same reasons
 * accio's are (4 KiB aliasing and slow first touch on the VMs accio is measured on).
 *
 * Usage: mpirun -np 2 mpi_bw_lat [-s SIZES] [-r REPS] [-t bw|lat|both]
 *   SIZES  comma-separated byte counts, binary suffixes K/M allowed (default 8,512K,2M)
 *   REPS   samples per figure (default 5)
 * Output (rank 0, one line per sample, easy to parse):
 *   bw SIZE GBPS
 *   lat SIZE MEDIAN_ONE_WAY_US MEAN_ONE_WAY_US
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64
#define MAX_SIZES 32

static double seconds_since(double t0) { return MPI_Wtime() - t0; }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

static long parse_size(const char *s) {
    char *end;
    long n = strtol(s, &end, 10);
    if (end == s || n <= 0) return -1;
    switch (*end) {
    case 'k': case 'K': n <<= 10; end++; break;
    case 'm': case 'M': n <<= 20; end++; break;
    case 'g': case 'G': n <<= 30; end++; break;
    }
    return (*end == '\0' || *end == ',') ? n : -1;
}

static void *page_buffer(size_t n, int fill) {
    void *p = NULL;
    if (posix_memalign(&p, 4096, n ? n : 1) != 0) {
        fprintf(stderr, "mpi_bw_lat: cannot allocate %zu bytes\n", n);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    memset(p, fill, n ? n : 1); /* first touch outside any timing */
    return p;
}

/* Rank 0 decides every count and broadcasts it, so both ranks loop the same number of times. */
static long bcast_long(long v) {
    MPI_Bcast(&v, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    return v;
}

static void bw(int rank, long size, int reps) {
    char *buf[WINDOW];
    MPI_Request req[WINDOW];
    char ack[4] = {0};
    /* All 64 requests of a window use distinct buffers, as receives of one window may
     * complete in any order; sends may share one source. */
    char *src = page_buffer((size_t)size, 0x5a);
    for (int i = 0; i < WINDOW; i++) buf[i] = rank == 0 ? src : page_buffer((size_t)size, 0);

    /* Iterations: a sample moves ~1 GiB, at least 4 windows, at most 1000. */
    long iters = (1L << 30) / (WINDOW * size);
    iters = iters < 4 ? 4 : iters > 1000 ? 1000 : iters;
    iters = bcast_long(iters);
    long skip = iters / 4 < 2 ? 2 : iters / 4;

    for (int r = 0; r < reps; r++) {
        double t0 = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (long it = 0; it < skip + iters; it++) {
            if (it == skip) t0 = MPI_Wtime();
            if (rank == 0) {
                for (int w = 0; w < WINDOW; w++)
                    MPI_Isend(buf[w], (int)size, MPI_CHAR, 1, 100, MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
                MPI_Recv(ack, 4, MPI_CHAR, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                for (int w = 0; w < WINDOW; w++)
                    MPI_Irecv(buf[w], (int)size, MPI_CHAR, 0, 100, MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
                MPI_Send(ack, 4, MPI_CHAR, 0, 101, MPI_COMM_WORLD);
            }
        }
        if (rank == 0) {
            double t = seconds_since(t0);
            printf("bw %ld %.6f\n", size, (double)size * WINDOW * iters / t / 1e9);
            fflush(stdout);
        }
    }
    if (rank != 0)
        for (int i = 0; i < WINDOW; i++) free(buf[i]);
    free(src);
}

static void lat(int rank, long size, int reps) {
    char *sbuf = page_buffer((size_t)size, 0x5a);
    char *rbuf = page_buffer((size_t)size, 0);
    int peer = 1 - rank;

    /* Calibrate on rank 0: warm-up round trips, then enough per batch for ~80 ms. */
    long warm = (16L << 20) / (2 * size);
    warm = warm < 2 ? 2 : warm > 200 ? 200 : warm;
    double t0 = MPI_Wtime();
    for (long i = 0; i < warm; i++) {
        if (rank == 0) {
            MPI_Send(sbuf, (int)size, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(rbuf, (int)size, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(rbuf, (int)size, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(sbuf, (int)size, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
        }
    }
    double rtt = seconds_since(t0) / (double)warm;
    long iters = rtt > 0 ? (long)(0.080 / rtt) : 100000;
    iters = iters < 1 ? 1 : iters > 100000 ? 100000 : iters;
    iters = bcast_long(iters);

    double *rt = malloc(sizeof(double) * (size_t)iters);
    for (int r = 0; r < reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime(), t = start;
        for (long i = 0; i < iters; i++) {
            if (rank == 0) {
                MPI_Send(sbuf, (int)size, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
                MPI_Recv(rbuf, (int)size, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                double now = MPI_Wtime();
                rt[i] = now - t;
                t = now;
            } else {
                MPI_Recv(rbuf, (int)size, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(sbuf, (int)size, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
            }
        }
        if (rank == 0) {
            double mean = (t - start) / (double)iters;
            printf("lat %ld %.6f %.6f\n", size, median(rt, (int)iters) / 2 * 1e6, mean / 2 * 1e6);
            fflush(stdout);
        }
    }
    free(rt);
    free(sbuf);
    free(rbuf);
}

int main(int argc, char **argv) {
    long sizes[MAX_SIZES];
    int nsizes = 0, reps = 5, do_bw = 1, do_lat = 1, rank, nranks;
    const char *size_arg = "8,512K,2M";

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-s") && i + 1 < argc) size_arg = argv[++i];
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) {
            const char *t = argv[++i];
            do_bw = !strcmp(t, "bw") || !strcmp(t, "both");
            do_lat = !strcmp(t, "lat") || !strcmp(t, "both");
        } else {
            if (rank == 0)
                fprintf(stderr, "usage: mpirun -np 2 %s [-s SIZES] [-r REPS] [-t bw|lat|both]\n",
                        argv[0]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (nranks != 2) {
        if (rank == 0) fprintf(stderr, "mpi_bw_lat: needs exactly 2 ranks, got %d\n", nranks);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (reps < 1) reps = 1;
    for (const char *p = size_arg; *p && nsizes < MAX_SIZES;) {
        long n = parse_size(p);
        if (n < 0 || n > (1L << 30)) {
            if (rank == 0) fprintf(stderr, "mpi_bw_lat: bad size in %s\n", size_arg);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        sizes[nsizes++] = n;
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    for (int i = 0; i < nsizes; i++) {
        if (do_bw) bw(rank, sizes[i], reps);
        if (do_lat) lat(rank, sizes[i], reps);
    }
    MPI_Finalize();
    return 0;
}
