/* tcp_stream.c: the bare loopback socket, the limit of the work a tcp transport does for
 * large messages (scripts/compare-transport.sh's tcp ceiling).
 *
 * Two processes on 127.0.0.1, pinned one per CPU, move SIZE-byte messages with nothing
 * else: no header, no credit, no progress thread. The sender calls send() until each
 * message is out; the receiver reads each message whole into one buffer it reuses (the
 * cache-friendliest case), polling with MSG_DONTWAIT as a transport's progress loop does,
 * so no wake-up lies on the path. Two figures:
 *
 *   stream    one sender, one receiver, 1 GiB: 128 MiB not timed, then the median of
 *             three timed thirds of the rest (as accio's bench takes a median of 3): GB/s
 *   pingpong  each side sends a message, then waits for the other's: the median
 *             round trip over ITERS (a tenth more not timed), halved: one-way us
 *
 * Usage: tcp_stream stream|pingpong SIZE CPU_A CPU_B [ITERS]
 * Prints one number. Build: cc -O2 -o tcp_stream tcp_stream.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what) {
    fprintf(stderr, "tcp_stream: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) die("sched_setaffinity");
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void send_all(int s, const char *b, size_t n) {
    for (size_t o = 0; o < n;) {
        ssize_t k = send(s, b + o, n - o, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) die("send");
        o += (size_t)k;
    }
}

static void recv_all(int s, char *b, size_t n) {
    for (size_t o = 0; o < n;) {
        ssize_t k = recv(s, b + o, n - o, MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (k == 0) {
            fprintf(stderr, "tcp_stream: recv: the peer closed the connection\n");
            exit(1);
        }
        if (k < 0) die("recv");
        o += (size_t)k;
    }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 5 || (strcmp(argv[1], "stream") && strcmp(argv[1], "pingpong"))) {
        fprintf(stderr, "usage: tcp_stream stream|pingpong SIZE CPU_A CPU_B [ITERS]\n");
        return 2;
    }
    int stream = !strcmp(argv[1], "stream");
    size_t size = strtoull(argv[2], NULL, 10);
    int cpu_a = atoi(argv[3]), cpu_b = atoi(argv[4]);
    long iters = argc > 5 ? atol(argv[5]) : 1000;
    if (size == 0 || iters < 1) {
        fprintf(stderr, "tcp_stream: SIZE and ITERS must be positive\n");
        return 2;
    }
    long msgs = stream ? (long)((1UL << 30) / size) : iters + iters / 10;
    if (msgs < 8) msgs = 8;
    long untimed = stream ? msgs / 8 : iters / 10;

    int l = socket(AF_INET, SOCK_STREAM, 0);
    if (l < 0) die("socket");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) ||
        getsockname(l, (struct sockaddr *)&a, &alen))
        die("listen on 127.0.0.1");
    int one = 1;
    char *buf = malloc(size);
    if (!buf) die("malloc");
    memset(buf, 1, size);

    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) { /* the sender (stream) or the side that pings first */
        pin(cpu_a);
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a)) die("connect");
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        for (long i = 0; i < msgs; i++) {
            send_all(s, buf, size);
            if (!stream) recv_all(s, buf, size);
        }
        if (stream) recv_all(s, buf, 1); /* the receiver's "done" */
        _exit(0);
    }
    pin(cpu_b);
    int s = accept(l, NULL, NULL);
    if (s < 0) die("accept");
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    double *rt = stream ? NULL : malloc(sizeof(double) * (size_t)iters);
    /* Stream: the timed messages in three equal samples, each from its first message's
     * start to the next sample's. */
    long per = (msgs - untimed) / 3;
    double marks[4] = {0};
    for (long i = 0; i < msgs; i++) {
        double t = now();
        if (stream && i >= untimed && (i - untimed) % per == 0 && (i - untimed) / per <= 3)
            marks[(i - untimed) / per] = t;
        recv_all(s, buf, size);
        if (!stream) {
            send_all(s, buf, size);
            /* The round trip from this side: its receive wait and its answer, one message
             * each way (the sender's send ran while this side waited). */
            if (i >= untimed) rt[i - untimed] = now() - t;
        }
    }
    if (stream) {
        if (untimed + 3 * per == msgs) marks[3] = now();
        send_all(s, buf, 1);
        double gbs[3];
        for (int k = 0; k < 3; k++) gbs[k] = (double)per * (double)size / (marks[k + 1] - marks[k]) / 1e9;
        qsort(gbs, 3, sizeof(double), cmp);
        printf("%.4f\n", gbs[1]);
    } else {
        qsort(rt, (size_t)iters, sizeof(double), cmp);
        printf("%.3f\n", rt[iters / 2] / 2 * 1e6);
    }
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
