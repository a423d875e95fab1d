/* Two processes, one-sided RMA and fence_signal over accio (shm:// or tcp://).
 *
 *   rma [ADDR]     forks: the parent listens and exposes a window, the child connects,
 *                  writes into it with accio_endpoint_write_to and signals with
 *                  accio_endpoint_fence_signal; the parent checks the bytes it sees.
 *   rma --help
 *
 * An unknown option or a second argument prints the usage line and exits 2.
 *
 * Build: cc rma.c $(pkg-config --cflags --libs accio) -o rma
 */
#include <accio.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

enum { WINDOW = 1 << 20, DATA_AT = 4096, DATA_LEN = 64 << 10 };

static unsigned char pattern(size_t i) { return (unsigned char)(i * 31 + 7); }

/* The client: learn the window's offset, write DATA_LEN bytes into it, then store 1 in
 * its first word once the data is there. */
static int client(const char *addr) {
    accio_endpoint *ep;
    CHECK(accio_endpoint_connect(addr, 10000, &ep));
    uint64_t remote;
    size_t len;
    CHECK(accio_endpoint_recv(ep, (uint8_t *)&remote, sizeof remote, &len, 10000));

    accio_window *local;
    uint8_t *mem;
    uint64_t local_off;
    CHECK(accio_window_register(ep, DATA_LEN, ACCIO_ACCESS_READ, &local));
    CHECK(accio_window_memory(local, &mem, NULL));
    CHECK(accio_window_offset(local, &local_off));
    for (size_t i = 0; i < DATA_LEN; i++) mem[i] = pattern(i);

    CHECK(accio_endpoint_write_to(ep, local_off, DATA_LEN, remote + DATA_AT, 0));
    accio_signal done = {.offset = remote, .value = 1};
    CHECK(accio_endpoint_fence_signal(ep, NULL, &done));

    /* An RMA past the window is refused with a status and a message naming it. */
    accio_status s = accio_endpoint_write_to(ep, local_off, 16, remote + WINDOW - 8, 0);
    if (s != ACCIO_OUT_OF_WINDOW) {
        fprintf(stderr, "client: expected ACCIO_OUT_OF_WINDOW, got %s\n", accio_status_name(s));
        return 1;
    }
    printf("client: refused as expected: %s\n", accio_last_error_message());

    char ack[8];
    CHECK(accio_endpoint_recv(ep, (uint8_t *)ack, sizeof ack, &len, 10000));
    CHECK(accio_window_destroy(local));
    CHECK(accio_endpoint_destroy(ep));
    return 0;
}

static const char USAGE[] = "usage: rma [ADDR]   (ADDR: shm://NAME or tcp://HOST:PORT)\n";

int main(int argc, char **argv) {
    char addr[256];
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        fputs(USAGE, stdout);
        fputs("\nTwo processes: the parent listens on ADDR (default shm://accio-c-rma-PID) and\n"
              "exposes a window; the child writes into it one-sidedly and raises a flag with\n"
              "fence_signal; the parent checks every byte it sees once the flag is up.\n",
              stdout);
        return 0;
    }
    if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
        fprintf(stderr, "rma: %s %s\n", argc > 2 ? "one ADDR at most, also got" : "unknown option",
                argc > 2 ? argv[2] : argv[1]);
        fputs(USAGE, stderr);
        return 2;
    }
    if (argc == 2)
        snprintf(addr, sizeof addr, "%s", argv[1]);
    else
        snprintf(addr, sizeof addr, "shm://accio-c-rma-%d", (int)getpid());

    /* Listen before forking so the child can connect at once; tcp://...:0 gets its port
     * here. No accio thread runs yet for shm; the child only uses its own endpoint. */
    accio_listener *l;
    CHECK(accio_listener_create(addr, &l));
    CHECK(accio_listener_addr(l, addr, sizeof addr, NULL));

    pid_t child = fork();
    if (child < 0) { perror("fork"); return 1; }
    if (child == 0) {
        int rc = client(addr);
        fflush(stdout);
        _exit(rc);
    }

    accio_endpoint *ep;
    accio_window *win;
    uint8_t *mem;
    uint64_t off;
    CHECK(accio_listener_accept(l, 10000, &ep));
    CHECK(accio_window_register(ep, WINDOW, ACCIO_ACCESS_READ_WRITE, &win));
    CHECK(accio_window_offset(win, &off));
    CHECK(accio_window_memory(win, &mem, NULL));
    CHECK(accio_endpoint_send(ep, (const uint8_t *)&off, sizeof off));

    /* fence_signal stores 1 only after the data landed: seeing it means seeing the data. */
    CHECK(accio_window_wait_u64(win, 0, 1, 10000));
    for (size_t i = 0; i < DATA_LEN; i++) {
        if (mem[DATA_AT + i] != pattern(i)) {
            fprintf(stderr, "server: byte %zu is %u, expected %u\n", i, mem[DATA_AT + i], pattern(i));
            return 1;
        }
    }
    CHECK(accio_endpoint_send(ep, (const uint8_t *)"ack", 3));
    int status;
    if (waitpid(child, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "server: the client process failed\n");
        return 1;
    }
    printf("server: %d bytes written one-sidedly by process %d arrived intact at %s\n",
           DATA_LEN, (int)child, addr);
    CHECK(accio_window_destroy(win));
    CHECK(accio_endpoint_destroy(ep));
    CHECK(accio_listener_destroy(l));
    return 0;
}
