/* copy_pipeline.c: the bare two-core copy pipeline a two-sided shared-memory stream is,
 * with no protocol at all: a sender thread copies each message from its own buffer into a
 * ring of chunk-sized slots, a receiver thread on another CPU copies every slot into its
 * own buffer, both with glibc memcpy, one flag word per side. Its rate bounds what any
 * two-sided stream of that message and chunk size can reach between these two cores
 * (scripts/compare-transport-mpi.sh puts it beside accio's shm stream and memcpy).
 *
 * Usage: copy_pipeline MSG CHUNK RING SECONDS CPU_SEND CPU_RECV
 *   prints "pipeline MSG GBPS" for each of 5 passes of about SECONDS/5 each.
 * Build: cc -O2 -pthread -o copy_pipeline copy_pipeline.c
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static size_t msg, chunk, slots;
static long count;
static char *ring;
static _Atomic long head, tail;
static int cpu_recv;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static char *buffer(size_t len, int fill) {
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("copy_pipeline: mmap");
        exit(1);
    }
    memset(p, fill, len);
    return p;
}

static void *receiver(void *arg) {
    (void)arg;
    pin(cpu_recv);
    char *dst = buffer(msg, 0);
    long t = atomic_load(&tail);
    for (long m = 0; m < count; m++)
        for (size_t o = 0; o < msg; o += chunk) {
            while (atomic_load_explicit(&head, memory_order_acquire) == t)
                ;
            memcpy(dst + o, ring + (t % slots) * chunk, chunk);
            atomic_store_explicit(&tail, ++t, memory_order_release);
        }
    munmap(dst, msg);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: copy_pipeline MSG CHUNK RING SECONDS CPU_SEND CPU_RECV\n");
        return 2;
    }
    msg = strtoul(argv[1], NULL, 0);
    chunk = strtoul(argv[2], NULL, 0);
    size_t ring_bytes = strtoul(argv[3], NULL, 0);
    double seconds = atof(argv[4]);
    int cpu_send = atoi(argv[5]);
    cpu_recv = atoi(argv[6]);
    if (chunk == 0 || msg % chunk || ring_bytes % chunk || ring_bytes < 2 * chunk) {
        fprintf(stderr, "copy_pipeline: MSG and RING must be multiples of CHUNK, RING >= 2 CHUNK\n");
        return 2;
    }
    slots = ring_bytes / chunk;
    ring = buffer(ring_bytes, 0);
    char *src = buffer(msg, 1);
    pin(cpu_send);
    /* Calibrate: messages for about a fifth of the time per pass. */
    count = 64;
    for (int pass = -1; pass < 5; pass++) {
        pthread_t th;
        atomic_store(&head, 0);
        atomic_store(&tail, 0);
        pthread_create(&th, NULL, receiver, NULL);
        double t0 = now();
        long h = 0;
        for (long m = 0; m < count; m++)
            for (size_t o = 0; o < msg; o += chunk) {
                while (h - atomic_load_explicit(&tail, memory_order_acquire) >= (long)slots)
                    ;
                memcpy(ring + (h % slots) * chunk, src + o, chunk);
                atomic_store_explicit(&head, ++h, memory_order_release);
            }
        pthread_join(th, NULL);
        double s = now() - t0;
        if (pass < 0) {
            long c = (long)(count * (seconds / 5) / s);
            count = c < 16 ? 16 : c;
            continue;
        }
        printf("pipeline %zu %.3f\n", msg, msg * (double)count / s / 1e9);
    }
    return 0;
}
