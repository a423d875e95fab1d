// The CUDA C reference for `accio bench device`: the same copies with the same method
// (NVIDIA nvbandwidth's copy-engine tests, as crates/device/src/copy.rs describes them),
// written with the CUDA runtime so that it shares no code with accio.
//
//   nvcc -O2 -o nvbw_ref benches/peers/nvbw_ref.cu && ./nvbw_ref [GPU] [PASSES]
//
// For each size from 4 KiB to 512 MiB (x4 steps) and each test (host->device and
// device->host from pinned and from pageable memory, both ways at once from pinned, device
// ->device): one warm-up pass, then PASSES (default 5) passes of copies_per_pass(size)
// cudaMemcpyAsync on one stream (two for both ways) between two events; the figure is the
// median of bytes / event time. Latency: 8-byte copies from/to pinned memory, each followed
// by cudaStreamSynchronize, host wall time per copy, median of the passes.
// Prints one JSON object per figure per line, in accio's names (metric, memory, size).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#define CHECK(call)                                                                  \
    do {                                                                             \
        cudaError_t e_ = (call);                                                     \
        if (e_ != cudaSuccess) {                                                     \
            fprintf(stderr, "nvbw_ref: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

enum Copy { H2D, D2H, BIDIR, D2D };
static const char *metric_name[] = {"h2d", "d2h", "bidir", "d2d"};

// As accio's copies_per_pass: about 1 GiB per pass, 4 to 1000 copies.
static unsigned long long copies_per_pass(size_t size) {
    unsigned long long n = (1ull << 30) / (size ? size : 1);
    return std::min(1000ull, std::max(4ull, n));
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Buffers {
    char *dev_a, *dev_b, *pinned_a, *pinned_b, *pageable;
    cudaStream_t s0, s1;
    cudaEvent_t start, mid, stop;
};

// One timed pass; returns seconds of event time.
static double pass(Buffers &b, Copy copy, bool pageable, size_t size, unsigned long long copies) {
    char *host_a = pageable ? b.pageable : b.pinned_a;
    CHECK(cudaEventRecord(b.start, b.s0));
    if (copy == BIDIR) CHECK(cudaStreamWaitEvent(b.s1, b.start, 0));
    for (unsigned long long i = 0; i < copies; i++) {
        switch (copy) {
        case H2D: CHECK(cudaMemcpyAsync(b.dev_a, host_a, size, cudaMemcpyDefault, b.s0)); break;
        case D2H: CHECK(cudaMemcpyAsync(host_a, b.dev_a, size, cudaMemcpyDefault, b.s0)); break;
        case BIDIR:
            CHECK(cudaMemcpyAsync(b.dev_a, b.pinned_a, size, cudaMemcpyDefault, b.s0));
            CHECK(cudaMemcpyAsync(b.pinned_b, b.dev_b, size, cudaMemcpyDefault, b.s1));
            break;
        case D2D: CHECK(cudaMemcpyAsync(b.dev_b, b.dev_a, size, cudaMemcpyDefault, b.s0)); break;
        }
    }
    if (copy == BIDIR) {
        CHECK(cudaEventRecord(b.mid, b.s1));
        CHECK(cudaStreamWaitEvent(b.s0, b.mid, 0));
    }
    CHECK(cudaEventRecord(b.stop, b.s0));
    CHECK(cudaEventSynchronize(b.stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, b.start, b.stop));
    return ms / 1e3;
}

static double latency_pass(Buffers &b, bool to_device, int copies) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < copies; i++) {
        if (to_device)
            CHECK(cudaMemcpyAsync(b.dev_a, b.pinned_a, 8, cudaMemcpyDefault, b.s0));
        else
            CHECK(cudaMemcpyAsync(b.pinned_a, b.dev_a, 8, cudaMemcpyDefault, b.s0));
        CHECK(cudaStreamSynchronize(b.s0));
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int main(int argc, char **argv) {
    int gpu = argc > 1 ? atoi(argv[1]) : 0;
    int passes = argc > 2 ? std::max(1, atoi(argv[2])) : 5;
    std::vector<size_t> sizes;
    for (size_t s = 4 << 10; s <= (256u << 20); s *= 4) sizes.push_back(s);
    sizes.push_back(512u << 20);
    size_t max = sizes.back();

    CHECK(cudaSetDevice(gpu));
    Buffers b;
    CHECK(cudaMalloc(&b.dev_a, max));
    CHECK(cudaMalloc(&b.dev_b, max));
    CHECK(cudaMemset(b.dev_a, 0xa5, max));
    CHECK(cudaMemset(b.dev_b, 0xa5, max));
    CHECK(cudaHostAlloc(&b.pinned_a, max, cudaHostAllocDefault));
    CHECK(cudaHostAlloc(&b.pinned_b, max, cudaHostAllocDefault));
    memset(b.pinned_a, 0x5a, max);
    memset(b.pinned_b, 0x5a, max);
    b.pageable = (char *)malloc(max);
    memset(b.pageable, 0x5a, max);
    CHECK(cudaStreamCreateWithFlags(&b.s0, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&b.s1, cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&b.start));
    CHECK(cudaEventCreate(&b.mid));
    CHECK(cudaEventCreate(&b.stop));

    struct Test { Copy copy; bool pageable; const char *memory; };
    const Test tests[] = {{H2D, false, "pinned"},   {D2H, false, "pinned"},
                          {H2D, true, "pageable"},  {D2H, true, "pageable"},
                          {BIDIR, false, "pinned"}, {D2D, false, "device"}};
    for (const Test &t : tests) {
        for (size_t size : sizes) {
            unsigned long long copies = copies_per_pass(size);
            double bytes = (double)size * copies * (t.copy == BIDIR ? 2 : 1);
            pass(b, t.copy, t.pageable, size, copies);
            std::vector<double> gbps;
            for (int p = 0; p < passes; p++)
                gbps.push_back(bytes / pass(b, t.copy, t.pageable, size, copies) / 1e9);
            printf("{\"metric\":\"%s\",\"memory\":\"%s\",\"size\":%zu,\"value\":%.4f,\"unit\":\"GB/s\"}\n",
                   metric_name[t.copy], t.memory, size, median(gbps));
            fflush(stdout);
        }
    }
    for (int way = 0; way < 2; way++) {
        const int copies = 200;
        latency_pass(b, way == 0, copies / 4);
        std::vector<double> us;
        for (int p = 0; p < passes; p++) us.push_back(latency_pass(b, way == 0, copies) / copies * 1e6);
        printf("{\"metric\":\"%s\",\"memory\":\"pinned\",\"size\":8,\"value\":%.4f,\"unit\":\"us\"}\n",
               way == 0 ? "latency_h2d" : "latency_d2h", median(us));
    }
    return 0;
}
