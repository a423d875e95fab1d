// accio.hpp: RAII wrappers of the accio C API (accio.h) for C++17, in one header.
//
// Every object owns its handle and frees it in its destructor; every failing call throws
// accio::Error carrying the status and the library's message. Move-only, like the handles.
// The exceptions: an EndpointRef (what World::endpoint gives) refers to an endpoint its
// world owns, and try_send/try_recv report "would block" as false, not by throwing.
//
//   accio::World world;                     // in a program started by `accio run -n N`
//   for (size_t r = 0; r < world.size(); r++) {
//       if (r == world.rank()) continue;
//       accio::EndpointRef ep = world.endpoint(r);   // connected once, owned by the world
//       ep.send(&r, sizeof r);
//       std::vector<uint8_t> msg = ep.recv();
//   }
//   world.barrier();
//
//   accio::Merger merger("shm://events", "events.accio");
//   std::thread worker([&] {
//       accio::Producer p(merger.addr());
//       auto buf = p.buffer();              // written into the file once, at commit
//       std::memcpy(buf.data(), "event", 5);
//       buf.commit(5);
//       p.finish();
//   });
//   worker.join();
//   merger.close();
#ifndef ACCIO_HPP
#define ACCIO_HPP

#include <accio.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace accio {

/// A failed accio call: `status()` for control flow, `what()` for people.
class Error : public std::runtime_error {
public:
    Error(accio_status status, const std::string &message)
        : std::runtime_error(message), status_(status) {}
    accio_status status() const noexcept { return status_; }

private:
    accio_status status_;
};

namespace detail {
inline void check(accio_status s) {
    if (s != ACCIO_OK)
        throw Error(s, std::string(accio_status_name(s)) + ": " + accio_last_error_message());
}

/// A string the library copies out: asks again with the size it reports.
template <class F> std::string text(F &&get) {
    std::string out(64, '\0');
    size_t len = 0;
    accio_status s = get(out.data(), out.size(), &len);
    if (s == ACCIO_BUFFER_TOO_SMALL) {
        out.assign(len + 1, '\0');
        s = get(out.data(), out.size(), &len);
    }
    check(s);
    out.resize(len);
    return out;
}

/// Owns one handle; `Destroy` frees it.
template <class T, accio_status (*Destroy)(T *)> class Owned {
public:
    Owned() = default;
    explicit Owned(T *h) noexcept : h_(h) {}
    Owned(Owned &&o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
    Owned &operator=(Owned &&o) noexcept {
        if (this != &o) {
            reset();
            h_ = std::exchange(o.h_, nullptr);
        }
        return *this;
    }
    Owned(const Owned &) = delete;
    Owned &operator=(const Owned &) = delete;
    ~Owned() { reset(); }
    T *get() const noexcept { return h_; }
    T *release() noexcept { return std::exchange(h_, nullptr); }
    void reset() noexcept {
        if (h_) Destroy(std::exchange(h_, nullptr));
    }

private:
    T *h_ = nullptr;
};
} // namespace detail

/// Page-aligned memory of the caller's that windows on any number of endpoints may expose
/// (EndpointRef::register_view). Valid until destroyed.
class Region {
public:
    explicit Region(size_t len) {
        accio_region *h;
        detail::check(accio_region_create(len, &h));
        h_ = decltype(h_)(h);
    }
    uint8_t *data() const {
        uint8_t *p;
        detail::check(accio_region_memory(h_.get(), &p, nullptr));
        return p;
    }
    size_t size() const {
        size_t n;
        detail::check(accio_region_memory(h_.get(), nullptr, &n));
        return n;
    }
    accio_region *handle() const noexcept { return h_.get(); }

private:
    detail::Owned<accio_region, accio_region_destroy> h_;
};

/// A registered window: memory the peer reaches with RMA.
class Window {
public:
    explicit Window(accio_window *h) : h_(h) {}
    uint64_t offset() const {
        uint64_t o;
        detail::check(accio_window_offset(h_.get(), &o));
        return o;
    }
    uint8_t *data() const {
        uint8_t *p;
        detail::check(accio_window_memory(h_.get(), &p, nullptr));
        return p;
    }
    size_t size() const {
        size_t n;
        detail::check(accio_window_memory(h_.get(), nullptr, &n));
        return n;
    }
    void wait_u64(size_t at, uint64_t value, int64_t timeout_ms = ACCIO_FOREVER) const {
        detail::check(accio_window_wait_u64(h_.get(), at, value, timeout_ms));
    }
    uint64_t load_u64(size_t at) const {
        uint64_t v;
        detail::check(accio_window_load_u64(h_.get(), at, &v));
        return v;
    }
    accio_window *handle() const noexcept { return h_.get(); }

private:
    detail::Owned<accio_window, accio_window_destroy> h_;
};

/// The operations of an endpoint, on a handle it does not own: what World::endpoint gives
/// (the world frees it), and the base of the owning Endpoint.
class EndpointRef {
public:
    explicit EndpointRef(accio_endpoint *h) noexcept : h_(h) {}
    void send(const void *data, size_t len) const {
        detail::check(accio_endpoint_send(h_, static_cast<const uint8_t *>(data), len));
    }
    /// Sends the message if it can be enqueued whole without waiting; false when it cannot
    /// (nothing was sent). Up to the backend's limit (256 KiB on shm and tcp).
    bool try_send(const void *data, size_t len) const {
        accio_status s = accio_endpoint_try_send(h_, static_cast<const uint8_t *>(data), len);
        if (s == ACCIO_WOULD_BLOCK) return false;
        detail::check(s);
        return true;
    }
    /// The next message, whatever its size.
    std::vector<uint8_t> recv(int64_t timeout_ms = ACCIO_FOREVER) const {
        std::vector<uint8_t> buf(256);
        size_t len = 0;
        accio_status s = accio_endpoint_recv(h_, buf.data(), buf.size(), &len, timeout_ms);
        if (s == ACCIO_BUFFER_TOO_SMALL) {
            buf.resize(len);
            s = accio_endpoint_recv(h_, buf.data(), buf.size(), &len, timeout_ms);
        }
        detail::check(s);
        buf.resize(len);
        return buf;
    }
    /// Receives the next message into `buf` (`cap` bytes) and returns its length; one longer
    /// than `cap` throws ACCIO_BUFFER_TOO_SMALL and is kept for the next receive.
    size_t recv(void *buf, size_t cap, int64_t timeout_ms = ACCIO_FOREVER) const {
        size_t len = 0;
        detail::check(
            accio_endpoint_recv(h_, static_cast<uint8_t *>(buf), cap, &len, timeout_ms));
        return len;
    }
    /// Receives the next message into `msg` if one is there (true), else leaves `msg`
    /// alone and returns false, without waiting.
    bool try_recv(std::vector<uint8_t> &msg) const {
        std::vector<uint8_t> buf(256);
        size_t len = 0;
        accio_status s = accio_endpoint_try_recv(h_, buf.data(), buf.size(), &len);
        if (s == ACCIO_BUFFER_TOO_SMALL) {
            buf.resize(len);
            s = accio_endpoint_try_recv(h_, buf.data(), buf.size(), &len);
        }
        if (s == ACCIO_WOULD_BLOCK) return false;
        detail::check(s);
        buf.resize(len);
        msg = std::move(buf);
        return true;
    }
    Window register_window(size_t len, uint32_t access = ACCIO_ACCESS_READ_WRITE) const {
        accio_window *w;
        detail::check(accio_window_register(h_, len, access, &w));
        return Window(w);
    }
    /// A window over `len` bytes of `region` from byte `start` (a multiple of ACCIO_PAGE):
    /// the peer reaches that memory itself.
    Window register_view(const Region &region, size_t start, size_t len,
                         uint32_t access = ACCIO_ACCESS_READ_WRITE) const {
        accio_window *w;
        detail::check(accio_window_register_view(h_, region.handle(), start, len, access, &w));
        return Window(w);
    }
    void unregister(uint64_t offset) const {
        detail::check(accio_endpoint_unregister(h_, offset));
    }
    void write_to(uint64_t local_off, size_t len, uint64_t remote_off, uint32_t flags = 0) const {
        detail::check(accio_endpoint_write_to(h_, local_off, len, remote_off, flags));
    }
    void read_from(uint64_t local_off, size_t len, uint64_t remote_off, uint32_t flags = 0) const {
        detail::check(accio_endpoint_read_from(h_, local_off, len, remote_off, flags));
    }
    void vwrite_to(const void *src, size_t len, uint64_t remote_off, uint32_t flags = 0) const {
        detail::check(accio_endpoint_vwrite_to(h_, static_cast<const uint8_t *>(src), len,
                                               remote_off, flags));
    }
    void vread_from(void *dst, size_t len, uint64_t remote_off, uint32_t flags = 0) const {
        detail::check(accio_endpoint_vread_from(h_, static_cast<uint8_t *>(dst), len,
                                                remote_off, flags));
    }
    uint64_t fence_mark() const {
        uint64_t m;
        detail::check(accio_endpoint_fence_mark(h_, &m));
        return m;
    }
    void fence_wait(uint64_t mark) const { detail::check(accio_endpoint_fence_wait(h_, mark)); }
    /// Stores `value` at the peer's `remote_off` once every earlier RMA completed.
    void fence_signal_remote(uint64_t remote_off, uint64_t value) const {
        accio_signal s{remote_off, value};
        detail::check(accio_endpoint_fence_signal(h_, nullptr, &s));
    }
    std::string peer_addr() const {
        return detail::text([&](char *b, size_t c, size_t *l) {
            return accio_endpoint_peer_addr(h_, b, c, l);
        });
    }
    accio_endpoint *handle() const noexcept { return h_; }

protected:
    accio_endpoint *h_;
};

/// One end of a connection, owned: closed and freed when destroyed.
class Endpoint : public EndpointRef {
public:
    explicit Endpoint(accio_endpoint *h) noexcept : EndpointRef(h) {}
    static Endpoint connect(const std::string &addr, int64_t timeout_ms = 10000) {
        accio_endpoint *h;
        detail::check(accio_endpoint_connect(addr.c_str(), timeout_ms, &h));
        return Endpoint(h);
    }
    Endpoint(Endpoint &&o) noexcept : EndpointRef(std::exchange(o.h_, nullptr)) {}
    Endpoint &operator=(Endpoint &&o) noexcept {
        if (this != &o) {
            reset();
            h_ = std::exchange(o.h_, nullptr);
        }
        return *this;
    }
    Endpoint(const Endpoint &) = delete;
    Endpoint &operator=(const Endpoint &) = delete;
    ~Endpoint() { reset(); }

private:
    void reset() noexcept {
        if (h_) accio_endpoint_destroy(std::exchange(h_, nullptr));
    }
};

/// The backend chosen for a pair of ranks and the rule's reason.
struct Choice {
    std::string scheme;
    std::string reason;
};

/// This process's place in its world of ranks (a program started by `accio run -n N`, or
/// by mpirun with a libaccio built with MPI). Joining is collective: every rank makes one.
class World {
public:
    World() {
        accio_world *h;
        detail::check(accio_world_join(&h));
        h_ = decltype(h_)(h);
    }
    size_t rank() const {
        size_t r;
        detail::check(accio_world_rank(h_.get(), &r));
        return r;
    }
    size_t size() const {
        size_t n;
        detail::check(accio_world_size(h_.get(), &n));
        return n;
    }
    /// The node `rank` runs on (host, boot id, network namespace).
    std::string node(size_t rank) const {
        return detail::text([&](char *b, size_t c, size_t *l) {
            return accio_world_node(h_.get(), rank, b, c, l);
        });
    }
    std::string node() const { return node(rank()); }
    /// The ranks sharing this rank's node, itself included, ascending.
    std::vector<size_t> node_ranks() const {
        std::vector<size_t> ranks(size());
        size_t n = 0;
        detail::check(accio_world_node_ranks(h_.get(), ranks.data(), ranks.size(), &n));
        ranks.resize(n);
        return ranks;
    }
    /// The endpoint to `peer` over the backend chosen for the pair: the first call connects
    /// (`peer` asks for this rank too), later ones return the same endpoint. The world owns
    /// it: it stays valid until the World is destroyed.
    EndpointRef endpoint(size_t peer) const {
        accio_endpoint *e;
        detail::check(accio_world_endpoint(h_.get(), peer, &e));
        return EndpointRef(e);
    }
    Choice choice(size_t peer) const {
        const char *scheme, *reason;
        detail::check(accio_world_choice(h_.get(), peer, &scheme, &reason));
        return Choice{scheme, reason};
    }
    /// Waits until every rank called barrier() as often; a timeout throws ACCIO_TIMEOUT and
    /// the next call resumes the same barrier.
    void barrier(int64_t timeout_ms = ACCIO_FOREVER) const {
        detail::check(accio_world_barrier(h_.get(), timeout_ms));
    }
    accio_world *handle() const noexcept { return h_.get(); }

private:
    detail::Owned<accio_world, accio_world_destroy> h_;
};

/// A bound address accepting connections.
class Listener {
public:
    explicit Listener(const std::string &addr) {
        accio_listener *h;
        detail::check(accio_listener_create(addr.c_str(), &h));
        h_ = decltype(h_)(h);
    }
    Endpoint accept(int64_t timeout_ms = ACCIO_FOREVER) const {
        accio_endpoint *e;
        detail::check(accio_listener_accept(h_.get(), timeout_ms, &e));
        return Endpoint(e);
    }
    std::string addr() const {
        return detail::text([&](char *b, size_t c, size_t *l) {
            return accio_listener_addr(h_.get(), b, c, l);
        });
    }

private:
    detail::Owned<accio_listener, accio_listener_destroy> h_;
};

class Producer;

/// A buffer lent by the merger: fill `data()`, then `commit(len)`. Destroyed (or assigned
/// over) uncommitted, it goes back unused. A default-constructed Buffer holds nothing.
/// It must not outlive its Producer.
class Buffer {
public:
    Buffer() noexcept = default;
    Buffer(Buffer &&o) noexcept
        : p_(std::exchange(o.p_, nullptr)), data_(o.data_), capacity_(o.capacity_) {}
    Buffer &operator=(Buffer &&o) noexcept {
        if (this != &o) {
            release();
            p_ = std::exchange(o.p_, nullptr);
            data_ = o.data_;
            capacity_ = o.capacity_;
        }
        return *this;
    }
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;
    ~Buffer() { release(); }
    /// True while the buffer is lent (not committed or given back).
    explicit operator bool() const noexcept { return p_ != nullptr; }
    /// Gives the buffer back uncommitted.
    void release() noexcept {
        if (p_) accio_producer_release(std::exchange(p_, nullptr));
    }
    uint8_t *data() const noexcept { return data_; }
    size_t capacity() const noexcept { return capacity_; }
    /// Commits the first `len` bytes as one block; returns its sequence number.
    uint64_t commit(size_t len) {
        uint64_t seq;
        detail::check(accio_producer_commit(std::exchange(p_, nullptr), len, &seq));
        return seq;
    }

private:
    friend class Producer;
    Buffer(accio_producer *p, uint8_t *data, size_t capacity)
        : p_(p), data_(data), capacity_(capacity) {}
    accio_producer *p_ = nullptr;
    uint8_t *data_ = nullptr;
    size_t capacity_ = 0;
};

/// One producer's connection to a merger; use it from one thread (open one per thread).
class Producer {
public:
    explicit Producer(const std::string &addr, const accio_producer_options *opts = nullptr) {
        accio_producer *h;
        detail::check(accio_producer_connect(addr.c_str(), opts, &h));
        h_ = decltype(h_)(h);
    }
    uint32_t id() const {
        uint32_t v;
        detail::check(accio_producer_id(h_.get(), &v));
        return v;
    }
    /// A buffer to fill, waiting for a free slot (back-pressure).
    Buffer buffer() {
        uint8_t *data;
        size_t cap;
        detail::check(accio_producer_buffer(h_.get(), &data, &cap));
        return Buffer(h_.get(), data, cap);
    }
    uint64_t write(const void *data, size_t len) {
        uint64_t seq;
        detail::check(accio_producer_write(h_.get(), static_cast<const uint8_t *>(data), len, &seq));
        return seq;
    }
    void write_record(const void *data, size_t len) {
        detail::check(accio_producer_write_record(h_.get(), static_cast<const uint8_t *>(data), len));
    }
    /// Waits until every block is in the file and says goodbye.
    accio_producer_summary finish() {
        accio_producer_summary s;
        detail::check(accio_producer_finish(h_.release(), &s));
        return s;
    }

private:
    detail::Owned<accio_producer, accio_producer_destroy> h_;
};

/// The server side of the merging file service: one container file, many producers.
/// Destroyed without `close()`, it stops like a crash would (the file keeps its blocks).
class Merger {
public:
    Merger(const std::string &addr, const std::string &path,
           const accio_merger_options *opts = nullptr) {
        accio_merger *h;
        detail::check(accio_merger_create(addr.c_str(), path.c_str(), opts, &h));
        h_ = decltype(h_)(h);
    }
    std::string addr() const {
        return detail::text([&](char *b, size_t c, size_t *l) {
            return accio_merger_addr(h_.get(), b, c, l);
        });
    }
    /// Waits for the producers, closes the file (index, trailer) and returns what it holds.
    accio_merge_summary close() {
        accio_merge_summary s;
        detail::check(accio_merger_close(h_.release(), &s));
        return s;
    }

private:
    detail::Owned<accio_merger, accio_merger_destroy> h_;
};

/// An accio container file opened for reading.
class Reader {
public:
    explicit Reader(const std::string &path) {
        accio_reader *h;
        detail::check(accio_reader_open(path.c_str(), &h));
        h_ = decltype(h_)(h);
    }
    size_t size() const {
        size_t n;
        detail::check(accio_reader_block_count(h_.get(), &n));
        return n;
    }
    accio_block_info info(size_t i) const {
        accio_block_info b;
        detail::check(accio_reader_block(h_.get(), i, &b));
        return b;
    }
    std::vector<uint8_t> read(size_t i) const {
        std::vector<uint8_t> buf(info(i).len);
        size_t len;
        detail::check(accio_reader_read(h_.get(), i, buf.data(), buf.size(), &len));
        return buf;
    }
    accio_verification verify() const {
        accio_verification v;
        detail::check(accio_reader_verify(h_.get(), &v));
        return v;
    }

private:
    detail::Owned<accio_reader, accio_reader_destroy> h_;
};

} // namespace accio

#endif // ACCIO_HPP
