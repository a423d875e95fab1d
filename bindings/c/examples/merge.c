/* Many producer threads writing into ONE merged file through accio's merging file service
 * (the seed's shape: 60 threads x 100 buffers x 2 MiB), then the file is verified.
 *
 *   merge [--producers P] [--blocks F] [--size BYTES] [--budget BYTES] [--addr ADDR]
 *         [--sync] [--keep] FILE
 *   merge --help
 *
 * A missing FILE, an unknown option or a bad number prints the usage line and exits 2.
 *
 * Prints one line "merge: P producers x F blocks x S bytes ... GB/s" and, for scripts,
 * "throughput_bytes_per_s=N". Timed like `accio bench merge --placement threads`:
 * producers connect and prepare their buffer, the merger registers their first slots, then
 * they start together and write F blocks each (accio_producer_write: one copy into the
 * merger's slot on shm) and finish; the clock stops when accio_merger_close returned.
 *
 * Build: cc merge.c $(pkg-config --cflags --libs accio) -lpthread -o merge
 */
#include <accio.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(call)                                                                    \
    do {                                                                               \
        accio_status s_ = (call);                                                      \
        if (s_ != ACCIO_OK) {                                                          \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,         \
                    accio_last_error_message(), accio_status_name(s_));                \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

struct worker {
    pthread_t thread;
    unsigned id;
    const char *addr;
    unsigned long blocks;
    size_t size;
    pthread_barrier_t *go;
    accio_producer_summary summary;
};

static void *produce(void *arg) {
    struct worker *w = arg;
    accio_producer_options o = {.timeout_ms = 60000, .use_id = 1, .id = w->id};
    accio_producer *p;
    CHECK(accio_producer_connect(w->addr, &o, &p));
    /* The same pattern as the Rust bench's producers: a page-aligned buffer (a copy from a
     * few bytes past a page boundary can hit the CPU's 4 KiB aliasing penalty), every page
     * touched before timing. */
    uint8_t *src = NULL;
    if (posix_memalign((void **)&src, 4096, w->size)) { perror("posix_memalign"); exit(1); }
    for (size_t i = 0; i < w->size; i++) src[i] = (uint8_t)(i * 31 + 1);
    pthread_barrier_wait(w->go);
    for (unsigned long b = 0; b < w->blocks; b++)
        CHECK(accio_producer_write(p, src, w->size, NULL));
    CHECK(accio_producer_finish(p, &w->summary));
    free(src);
    return NULL;
}

/* Waits (at most 30 s) until every producer is connected and the merger has registered
 * the slots they asked for at connect time, as `accio bench merge` does, so that the clock
 * measures the merge and not the one-time setup. */
static void wait_warm(accio_merger *m, unsigned producers) {
    uint64_t last_slots = UINT64_MAX, last_active = 0;
    int steady = 0;
    for (int i = 0; i < 15000; i++) {
        accio_merger_counters s;
        CHECK(accio_merger_stats(m, &s));
        if (s.active == producers && s.slots == last_slots && s.active == last_active) {
            if (++steady >= 5) return;
        } else {
            steady = 0;
        }
        last_slots = s.slots;
        last_active = s.active;
        struct timespec t = {0, 2000000};
        nanosleep(&t, NULL);
    }
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static const char USAGE[] =
    "usage: merge [--producers P] [--blocks F] [--size BYTES] [--budget BYTES] [--addr ADDR]\n"
    "             [--sync] [--keep] FILE\n";

/* Prints `problem` (if any) and the usage line to stderr and exits 2: a usage error. */
static void usage_error(const char *problem, const char *arg) {
    if (problem) fprintf(stderr, "merge: %s%s%s\n", problem, arg ? " " : "", arg ? arg : "");
    fputs(USAGE, stderr);
    fputs("(merge --help explains each option)\n", stderr);
    exit(2);
}

static void help(void) {
    fputs(USAGE, stdout);
    fputs("\n"
          "P producer threads (default 60) each write F blocks (default 100) of BYTES bytes\n"
          "(default 2M; suffixes k, M, G) through one merger into FILE, then read it back\n"
          "and verify it.\n"
          "  --budget BYTES  the merger's slot memory (default: the library's)\n"
          "  --addr ADDR     where the merger listens (default shm://accio-c-merge-PID)\n"
          "  --sync          fsync the file at close\n"
          "  --keep          keep FILE (it is removed after a good verification)\n",
          stdout);
    exit(0);
}

/* A whole number above 0 for option `opt`, or a usage error. */
static unsigned long count_arg(const char *opt, const char *s) {
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || *s == '-' || v == 0 || v > UINT_MAX) {
        fprintf(stderr, "merge: %s takes a whole number above 0, not \"%s\"\n", opt, s);
        usage_error(NULL, NULL);
    }
    return v;
}

/* A byte count above 0 (suffixes k, M, G: powers of 1024) for option `opt`, or a usage
 * error. */
static size_t size_arg(const char *opt, const char *s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k': case 'K': v *= 1 << 10; end++; break;
    case 'm': case 'M': v *= 1 << 20; end++; break;
    case 'g': case 'G': v *= 1 << 30; end++; break;
    }
    if (errno || end == s || *end || !(v >= 1) || v > (double)(SIZE_MAX / 2)) {
        fprintf(stderr, "merge: %s takes a byte count above 0 (e.g. 4096, 64k, 2M), not \"%s\"\n",
                opt, s);
        usage_error(NULL, NULL);
    }
    return (size_t)v;
}

int main(int argc, char **argv) {
    unsigned producers = 60;
    unsigned long blocks = 100;
    size_t size = 2 << 20, budget = 0;
    int sync = 0, keep = 0;
    char addr[256] = "";
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) help();
        else if (!strcmp(a, "--sync")) sync = 1;
        else if (!strcmp(a, "--keep")) keep = 1;
        else if (!strcmp(a, "--producers") || !strcmp(a, "--blocks") || !strcmp(a, "--size") ||
                 !strcmp(a, "--budget") || !strcmp(a, "--addr")) {
            if (!has_value) usage_error("missing the value of", a);
            const char *v = argv[++i];
            if (!strcmp(a, "--producers")) producers = (unsigned)count_arg(a, v);
            else if (!strcmp(a, "--blocks")) blocks = count_arg(a, v);
            else if (!strcmp(a, "--size")) size = size_arg(a, v);
            else if (!strcmp(a, "--budget")) budget = size_arg(a, v);
            else snprintf(addr, sizeof addr, "%s", v);
        } else if (a[0] == '-') usage_error("unknown option", a);
        else if (path) usage_error("more than one FILE:", a);
        else path = a;
    }
    if (!path) usage_error("missing the output FILE", NULL);
    if (!addr[0]) snprintf(addr, sizeof addr, "shm://accio-c-merge-%d", (int)getpid());

    /* Slots as large as the blocks (rounded up to pages), as the Rust bench does. */
    accio_merger_options mo = {
        .budget = budget,
        .slot_bytes = (size + 4095) / 4096 * 4096,
        .sync = sync ? ACCIO_SYNC_ON_CLOSE : ACCIO_SYNC_NEVER,
    };
    accio_merger *m;
    CHECK(accio_merger_create(addr, path, &mo, &m));
    CHECK(accio_merger_addr(m, addr, sizeof addr, NULL));

    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, producers + 1);
    struct worker *ws = calloc(producers, sizeof *ws);
    for (unsigned i = 0; i < producers; i++) {
        ws[i] = (struct worker){.id = i, .addr = addr, .blocks = blocks, .size = size, .go = &go};
        if (pthread_create(&ws[i].thread, NULL, produce, &ws[i])) { perror("pthread_create"); return 1; }
    }
    wait_warm(m, producers);
    pthread_barrier_wait(&go);
    double t0 = now();
    for (unsigned i = 0; i < producers; i++) pthread_join(ws[i].thread, NULL);
    accio_merge_summary s;
    CHECK(accio_merger_close(m, &s));
    double secs = now() - t0;

    unsigned long long want = (unsigned long long)producers * blocks;
    if (s.blocks != want || s.payload_bytes != want * size || s.producers_finished != producers) {
        fprintf(stderr, "merge: wrote %llu blocks / %llu bytes for %llu producers, expected %llu / %llu / %u\n",
                (unsigned long long)s.blocks, (unsigned long long)s.payload_bytes,
                (unsigned long long)s.producers_finished, want, want * size, producers);
        return 1;
    }
    double rate = s.payload_bytes / secs;
    printf("merge: %u producers x %lu blocks x %zu bytes into %s in %.3f s: %.2f GB/s\n",
           producers, blocks, size, path, secs, rate / 1e9);
    printf("throughput_bytes_per_s=%.0f\n", rate);

    /* Read the file back: closed, every checksum right, every producer's sequence whole. */
    accio_reader *r;
    accio_verification v;
    CHECK(accio_reader_open(path, &r));
    CHECK(accio_reader_verify(r, &v));
    if (v.problems || v.blocks != want || v.producers != producers) {
        fprintf(stderr, "merge: %s is not whole: %llu problems (%s), %llu blocks, %llu producers\n",
                path, (unsigned long long)v.problems, accio_last_error_message(),
                (unsigned long long)v.blocks, (unsigned long long)v.producers);
        return 1;
    }
    printf("verified: %llu blocks from %llu producers, every checksum and sequence whole\n",
           (unsigned long long)v.blocks, (unsigned long long)v.producers);
    CHECK(accio_reader_destroy(r));
    if (!keep) unlink(path);
    free(ws);
    pthread_barrier_destroy(&go);
    return 0;
}
