// The shape of ROOT's TParallelMergingFile over accio (seed 004): worker threads simulate
// events, fill an in-memory file, and on Write() hand its content to the merging server,
// which writes ONE output file; then the output is read back and checked.
//
//   merging_file [--workers N] [--writes W] [--events E] [--processes] [FILE]
//   merging_file --help
//
// An unknown option, a bad number or a second FILE prints the usage line and exits 2.
//
// With --processes the worker threads run in a second process (this program, started
// with --worker ADDR), as the seed's workers ran on the coprocessor and the server on the
// host; by default they are threads of the server's process.
//
// Build: c++ -std=c++17 merging_file.cpp $(pkg-config --cflags --libs accio) -lpthread
#include <accio.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

// One simulated event: what a Geant4 step would leave in a TTree branch.
struct Event {
    uint32_t worker;
    uint32_t number;
    double energy;
};

// A TParallelMergingFile-like writer: Fill() appends to the current buffer (on shm the
// merger's own memory, so nothing is copied), Write() uploads it as one block and starts
// a fresh one, as TParallelMergingFile::Write uploads and resets its TTrees.
class ParallelMergingFile {
public:
    explicit ParallelMergingFile(const std::string &server) : producer_(server) {}

    void Fill(const Event &e) {
        if (buf_ && used_ + sizeof e > buf_.capacity()) Write();
        if (!buf_) buf_ = producer_.buffer();
        std::memcpy(buf_.data() + used_, &e, sizeof e);
        used_ += sizeof e;
    }

    void Write() {
        if (buf_ && used_) buf_.commit(used_);
        buf_.release();
        used_ = 0;
    }

    accio_producer_summary Close() {
        Write();
        return producer_.finish();
    }

private:
    accio::Producer producer_;
    accio::Buffer buf_;
    size_t used_ = 0;
};

static double simulate(uint32_t worker, uint32_t n) {
    // Stand-in for a Geant4 computation: a little arithmetic per event.
    double e = 0;
    for (uint32_t i = 0; i < 1000; i++) e += (worker + 1) * 1e-3 / (n + i + 1);
    return e;
}

extern char **environ;

// The worker side (the seed's coprocessor): threads that each fill a merging file.
static int run_workers(const std::string &addr, unsigned workers, unsigned writes,
                       unsigned events) {
    std::vector<std::thread> pool;
    std::vector<std::string> errors(workers);
    for (unsigned w = 0; w < workers; w++) {
        pool.emplace_back([&, w] {
            try {
                ParallelMergingFile file(addr);
                uint32_t n = 0;
                for (unsigned k = 0; k < writes; k++) {
                    for (unsigned e = 0; e < events; e++, n++)
                        file.Fill(Event{w, n, simulate(w, n)});
                    file.Write();
                }
                file.Close();
            } catch (const accio::Error &e) {
                errors[w] = e.what();
            }
        });
    }
    for (auto &t : pool) t.join();
    for (unsigned w = 0; w < workers; w++)
        if (!errors[w].empty()) {
            std::fprintf(stderr, "worker %u: %s\n", w, errors[w].c_str());
            return 1;
        }
    return 0;
}

static const char USAGE[] =
    "usage: merging_file [--workers N] [--writes W] [--events E] [--processes] [FILE]\n";

// Prints `problem` and the usage line to stderr and exits 2: a usage error.
[[noreturn]] static void usage_error(const std::string &problem) {
    std::fprintf(stderr, "merging_file: %s\n%s", problem.c_str(), USAGE);
    std::exit(2);
}

// A whole number above 0 for option `opt`, or a usage error.
static unsigned count_arg(const std::string &opt, const char *s) {
    char *end;
    errno = 0;
    unsigned long v = std::strtoul(s, &end, 10);
    if (errno || end == s || *end || *s == '-' || v == 0 || v > 1000000)
        usage_error(opt + " takes a whole number from 1 to 1000000, not \"" + s + "\"");
    return static_cast<unsigned>(v);
}

int main(int argc, char **argv) {
    unsigned workers = 8, writes = 20, events = 1000;
    std::string path = "merging_file.accio", worker_of;
    bool processes = false, have_path = false;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            std::printf("%s\nWorker threads (default 8) each simulate W x E events (default 20 x\n"
                        "1000) and hand each filled buffer to one merging file FILE (default\n"
                        "merging_file.accio), which is then read back and checked, and removed.\n"
                        "  --processes  run the workers in a second process, not as threads\n",
                        USAGE);
            return 0;
        } else if (a == "--workers" || a == "--writes" || a == "--events" || a == "--worker") {
            if (i + 1 >= argc) usage_error("missing the value of " + a);
            const char *v = argv[++i];
            if (a == "--workers") workers = count_arg(a, v);
            else if (a == "--writes") writes = count_arg(a, v);
            else if (a == "--events") events = count_arg(a, v);
            else worker_of = v;  // internal: this process runs the workers of --processes
        } else if (a == "--processes") processes = true;
        else if (!a.empty() && a[0] == '-') usage_error("unknown option " + a);
        else if (have_path) usage_error("more than one FILE: " + a);
        else { path = a; have_path = true; }
    }
    if (static_cast<uint64_t>(writes) * events > UINT32_MAX)
        usage_error("--writes x --events must stay below 2^32 events per worker");
    try {
        if (!worker_of.empty()) return run_workers(worker_of, workers, writes, events);

        // The server side: one merger, one output file.
        accio_merger_options opts{};
        opts.slot_bytes = 256 << 10;
        opts.budget = 16 << 20;
        accio::Merger server("shm://accio-cpp-merging-" + std::to_string(getpid()), path, &opts);
        const std::string addr = server.addr();

        if (processes) {
            // The workers in another process, as on the seed's host + coprocessor.
            std::vector<std::string> args = {argv[0], "--worker", addr,
                                             "--workers", std::to_string(workers),
                                             "--writes", std::to_string(writes),
                                             "--events", std::to_string(events)};
            std::vector<char *> cargs;
            for (auto &s : args) cargs.push_back(s.data());
            cargs.push_back(nullptr);
            pid_t pid;
            int status = 0;
            if (posix_spawn(&pid, argv[0], nullptr, nullptr, cargs.data(), environ) != 0 ||
                waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
                std::fprintf(stderr, "the worker process failed\n");
                return 1;
            }
        } else if (run_workers(addr, workers, writes, events)) {
            return 1;
        }
        accio_merge_summary s = server.close();

        // Read the one file back: every worker's events, in order, none lost.
        accio::Reader reader(path);
        accio_verification v = reader.verify();
        if (v.problems) {
            std::fprintf(stderr, "%s is not whole: %s\n", path.c_str(), accio_last_error_message());
            return 1;
        }
        std::map<uint32_t, uint32_t> next;
        for (size_t i = 0; i < reader.size(); i++) {
            std::vector<uint8_t> block = reader.read(i);
            for (size_t at = 0; at + sizeof(Event) <= block.size(); at += sizeof(Event)) {
                Event e;
                std::memcpy(&e, block.data() + at, sizeof e);
                if (e.number != next[e.worker]++ || e.energy != simulate(e.worker, e.number)) {
                    std::fprintf(stderr, "event %u of worker %u is wrong or out of order\n",
                                 e.number, e.worker);
                    return 1;
                }
            }
        }
        for (unsigned w = 0; w < workers; w++)
            if (next[w] != writes * events) {
                std::fprintf(stderr, "worker %u: %u events in the file, expected %u\n", w,
                             next[w], writes * events);
                return 1;
            }
        std::printf("merging_file: %u workers (%s) x %u events into %s: %llu blocks, %llu "
                    "bytes, all events back in order\n",
                    workers, processes ? "in a worker process" : "threads", writes * events,
                    path.c_str(), (unsigned long long)s.blocks,
                    (unsigned long long)s.payload_bytes);
        std::remove(path.c_str());
    } catch (const accio::Error &e) {
        std::fprintf(stderr, "merging_file: %s\n", e.what());
        return 1;
    }
    return 0;
}
