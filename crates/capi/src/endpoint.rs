//! Listeners, endpoints, registered windows and the regions behind them, RMA and fences.

use std::ffi::c_char;
use std::sync::{Arc, Mutex, PoisonError, TryLockError};
use std::time::Duration;

use accio::device::DeviceRma;
use accio::{Access, Endpoint, Listener, MemView, Progress, Region, RmaFlags, Window};

use crate::{
    accio_status, bytes, bytes_mut, c_str, destroy, guard, guard_progress, into_handle, need, obj,
    put, put_text, take, timeout, CResult, Failure, Object,
};

/// The page size windows are aligned to: a window made by `accio_window_register_view`
/// starts at a multiple of it in its region.
pub const ACCIO_PAGE: usize = 4096;
// A literal above so that cbindgen can write it into accio.h; the same as the library's.
const _: () = assert!(ACCIO_PAGE == accio::PAGE);

/// The peer may read the window (`read_from`).
pub const ACCIO_ACCESS_READ: u32 = 1;
/// The peer may write the window (`write_to`, `fence_signal`).
pub const ACCIO_ACCESS_WRITE: u32 = 2;
/// The peer may read and write the window.
pub const ACCIO_ACCESS_READ_WRITE: u32 = 3;

/// RMA flag: return only once the data is in the peer's window (SCIF's `SCIF_RMA_SYNC`).
/// Without it a write may return once the source was consumed; a fence awaits completion.
pub const ACCIO_RMA_SYNC: u32 = 1;

/// A bound address accepting connections (from `accio_listener_create`).
pub struct accio_listener {
    _opaque: [u8; 0],
}

/// One end of a connection (from `accio_endpoint_connect`, `accio_listener_accept` or
/// `accio_world_endpoint`). Every call may come from any thread; sends are serialized
/// whole, and so are receives.
pub struct accio_endpoint {
    _opaque: [u8; 0],
}

/// A registered window: memory the peer reaches with RMA (from `accio_window_register` or
/// `accio_window_register_view`).
pub struct accio_window {
    _opaque: [u8; 0],
}

/// Page-aligned memory of the caller's that windows on any number of endpoints may expose
/// (from `accio_region_create`; see `accio_window_register_view`).
pub struct accio_region {
    _opaque: [u8; 0],
}

/// One 8-byte store of `accio_endpoint_fence_signal`: `value` at window offset `offset`
/// (8-byte aligned).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct accio_signal {
    /// Offset in the registered address space (local or the peer's).
    pub offset: u64,
    /// The value stored.
    pub value: u64,
}

pub(crate) struct ListenerObj(Box<dyn Listener>);

impl Object for ListenerObj {
    const MAGIC: u64 = 0x6c73_6e72_6163_6331; // "accio listener"
    const NAME: &'static str = "accio_listener";
    type Opaque = accio_listener;
}

/// A received message that did not fit the caller's buffer: kept for the next call.
#[derive(Default)]
struct Inbox {
    buf: Vec<u8>,
    pending: Option<usize>,
}

pub(crate) struct EndpointObj {
    ep: Box<dyn Endpoint>,
    inbox: Mutex<Inbox>,
    /// Made by `accio_world_endpoint`: the world frees it, `accio_endpoint_destroy` refuses.
    world_owned: bool,
}

impl Object for EndpointObj {
    const MAGIC: u64 = 0x656e_6470_6163_6332;
    const NAME: &'static str = "accio_endpoint";
    type Opaque = accio_endpoint;
}

pub(crate) struct WindowObj(Window);

impl Object for WindowObj {
    const MAGIC: u64 = 0x7769_6e64_6163_6333;
    const NAME: &'static str = "accio_window";
    type Opaque = accio_window;
}

/// A shareable region: the `Arc` is shared with every window over it, so the memory stays
/// mapped while any window (or the endpoint holding one) still needs it.
pub(crate) struct RegionObj(Arc<Region>);

impl Object for RegionObj {
    const MAGIC: u64 = 0x7267_6e6e_6163_6336;
    const NAME: &'static str = "accio_region";
    type Opaque = accio_region;
}

fn endpoint_handle(ep: Box<dyn Endpoint>) -> *mut accio_endpoint {
    into_handle(EndpointObj {
        ep,
        inbox: Mutex::new(Inbox::default()),
        world_owned: false,
    })
}

/// An endpoint handle owned by a world: freed by [`free_world_endpoint`] only.
pub(crate) fn world_endpoint_handle(ep: Box<dyn Endpoint>) -> *mut accio_endpoint {
    into_handle(EndpointObj {
        ep,
        inbox: Mutex::new(Inbox::default()),
        world_owned: true,
    })
}

/// Frees an endpoint handle made by [`world_endpoint_handle`].
///
/// # Safety
/// `p` came from [`world_endpoint_handle`], was not freed, and no thread uses it any more.
pub(crate) unsafe fn free_world_endpoint(p: *mut accio_endpoint) {
    // SAFETY: forwarded contract: a live endpoint handle nobody else uses.
    drop(unsafe { take::<EndpointObj>("accio_world_destroy", p) });
}

fn rma_flags(op: &str, flags: u32) -> CResult<RmaFlags> {
    if flags & !ACCIO_RMA_SYNC != 0 {
        return Err(Failure::invalid(
            op,
            format!("unknown RMA flag bits {:#x}", flags & !ACCIO_RMA_SYNC),
        ));
    }
    Ok(RmaFlags {
        sync: flags & ACCIO_RMA_SYNC != 0,
        streaming: false,
    })
}

/// The access rights of `ACCIO_ACCESS_*` bits.
fn access_bits(op: &str, access: u32) -> CResult<Access> {
    u8::try_from(access)
        .ok()
        .and_then(Access::from_bits)
        .ok_or_else(|| Failure::invalid(op, format!("unknown access bits {access:#x}")))
}

/// A word offset inside a window: 8-byte aligned (checked here to name the C call).
fn usize_at(op: &str, at: usize) -> CResult<usize> {
    if at.is_multiple_of(8) {
        Ok(at)
    } else {
        Err(Failure::invalid(
            op,
            format!("offset {at} is not 8-byte aligned"),
        ))
    }
}

// ---- listeners -----------------------------------------------------------------------

/// Listens on `addr` (`"shm://NAME"` or `"tcp://HOST:PORT"`; `"tcp://127.0.0.1:0"` picks
/// a free port, see `accio_listener_addr`) and stores the listener in `*out`.
///
/// # Safety
/// `addr` is a NUL-terminated string; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_listener_create(
    addr: *const c_char,
    out: *mut *mut accio_listener,
) -> accio_status {
    const OP: &str = "accio_listener_create";
    guard(OP, || {
        need(OP, "out", out)?;
        // SAFETY: the caller's contract.
        let addr = unsafe { c_str(OP, "addr", addr)? };
        let l = accio::listen(addr)?;
        // SAFETY: out checked non-NULL above; writable by contract.
        unsafe { put(OP, "out", out, into_handle(ListenerObj(l))) }
    })
}

/// Copies the listener's bound address (with the real port) into `buf` (`cap` bytes, NUL
/// included) and its length into `*len` (may be NULL). Fails with
/// `ACCIO_BUFFER_TOO_SMALL` (length stored) when it does not fit.
///
/// # Safety
/// `listener` is a live listener; `buf` is writable for `cap` bytes; `len` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn accio_listener_addr(
    listener: *const accio_listener,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> accio_status {
    const OP: &str = "accio_listener_addr";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let l = unsafe { obj::<ListenerObj>(OP, listener)? };
        let text = l.0.local_addr().to_string();
        // SAFETY: the caller's contract.
        unsafe { put_text(OP, &text, buf, cap, len) }
    })
}

/// Waits at most `timeout_ms` (negative: forever) for the next connection and stores its
/// endpoint in `*out`.
///
/// # Safety
/// `listener` is a live listener; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_listener_accept(
    listener: *const accio_listener,
    timeout_ms: i64,
    out: *mut *mut accio_endpoint,
) -> accio_status {
    const OP: &str = "accio_listener_accept";
    guard(OP, || {
        need(OP, "out", out)?;
        // SAFETY: the caller's contract.
        let l = unsafe { obj::<ListenerObj>(OP, listener)? };
        let ep = l.0.accept(timeout(timeout_ms))?;
        // SAFETY: out checked non-NULL above; writable by contract.
        unsafe { put(OP, "out", out, endpoint_handle(ep)) }
    })
}

/// Stops listening and frees the listener (NULL is ignored). Accepted endpoints live on.
///
/// # Safety
/// `listener` is NULL or a live listener, not used again.
#[no_mangle]
pub unsafe extern "C" fn accio_listener_destroy(listener: *mut accio_listener) -> accio_status {
    // SAFETY: the caller's contract.
    unsafe { destroy::<ListenerObj>("accio_listener_destroy", listener) }
}

// ---- endpoints -----------------------------------------------------------------------

/// Connects to the listener at `addr`, giving up after `timeout_ms` (negative: forever),
/// and stores the endpoint in `*out`. A listener not bound yet is waited for, so the two
/// sides may start in any order; after the timeout with nobody listening: `ACCIO_TIMEOUT`.
///
/// # Safety
/// `addr` is a NUL-terminated string; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_endpoint_connect(
    addr: *const c_char,
    timeout_ms: i64,
    out: *mut *mut accio_endpoint,
) -> accio_status {
    const OP: &str = "accio_endpoint_connect";
    guard(OP, || {
        need(OP, "out", out)?;
        // SAFETY: the caller's contract.
        let addr = unsafe { c_str(OP, "addr", addr)? };
        // A connect without a deadline still needs one for the backend: a year is forever.
        let t = timeout(timeout_ms).unwrap_or(Duration::from_secs(365 * 24 * 3600));
        let ep = accio::connect(addr, t)?;
        // SAFETY: out checked non-NULL above; writable by contract.
        unsafe { put(OP, "out", out, endpoint_handle(ep)) }
    })
}

/// Closes the connection and frees the endpoint (NULL is ignored). The peer's blocked
/// calls fail with `ACCIO_PEER_GONE`. Windows registered on it stay readable through their
/// own handles until `accio_window_destroy`. An endpoint of a world (from
/// `accio_world_endpoint`) is refused with `ACCIO_INVALID_ARGUMENT` and stays usable: its
/// world frees it in `accio_world_destroy`.
///
/// # Safety
/// `endpoint` is NULL or a live endpoint that no other thread uses, not used again.
#[no_mangle]
pub unsafe extern "C" fn accio_endpoint_destroy(endpoint: *mut accio_endpoint) -> accio_status {
    const OP: &str = "accio_endpoint_destroy";
    if endpoint.is_null() {
        return accio_status::ACCIO_OK;
    }
    guard(OP, || {
        // SAFETY: the caller's contract.
        let e = unsafe { obj::<EndpointObj>(OP, endpoint)? };
        if e.world_owned {
            return Err(Failure::invalid(
                OP,
                format!(
                    "the endpoint to {} belongs to its world (from accio_world_endpoint): \
                     accio_world_destroy frees it",
                    e.ep.peer_addr()
                ),
            ));
        }
        // SAFETY: the caller's contract; a checked, caller-owned handle.
        unsafe { take::<EndpointObj>(OP, endpoint) }.map(drop)
    })
}

/// Copies the peer's address into `buf` (`cap` bytes, NUL included) and its length into
/// `*len` (may be NULL); `ACCIO_BUFFER_TOO_SMALL` (length stored) when it does not fit.
///
/// # Safety
/// `endpoint` is a live endpoint; `buf` is writable for `cap` bytes; `len` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn accio_endpoint_peer_addr(
    endpoint: *const accio_endpoint,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> accio_status {
    const OP: &str = "accio_endpoint_peer_addr";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let e = unsafe { obj::<EndpointObj>(OP, endpoint)? };
        let text = e.ep.peer_addr().to_string();
        // SAFETY: the caller's contract.
        unsafe { put_text(OP, &text, buf, cap, len) }
    })
}

/// Sends one message of `len` bytes (0 allowed, `data` may then be NULL), waiting for
/// room as long as needed. A `len` above `PTRDIFF_MAX` (`SIZE_MAX`, say) fails with
/// `ACCIO_INVALID_ARGUMENT`; one above the backend's message limit (tcp: 1 GiB by
/// default) with `ACCIO_MESSAGE_TOO_LARGE`.
///
/// # Safety
/// `endpoint` is a live endpoint; `data` is readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn accio_endpoint_send(
    endpoint: *const accio_endpoint,
    data: *const u8,
    len: usize,
) -> accio_status {
    const OP: &str = "accio_endpoint_send";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let e = unsafe { obj::<EndpointObj>(OP, endpoint)? };
        // SAFETY: the caller's contract.
        let msg = unsafe { bytes(OP, "data", "len", data, len)? };
        Ok(e.ep.send(msg)?)
    })
}

/// Receives the next message into `buf` (`cap` bytes) and stores its length in `*len`,
/// waiting at most `timeout_ms` (negative: forever; `ACCIO_TIMEOUT` consumes nothing).
/// A message longer than `cap` is kept: the call stores its length in `*len` and fails
/// with `ACCIO_BUFFER_TOO_SMALL`, and the next call returns it.
///
/// # Safety
/// `endpoint` is a live endpoint; `buf` is writable for `cap` bytes; `len` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_endpoint_recv(
    endpoint: *const accio_endpoint,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
    timeout_ms: i64,
) -> accio_status {
    const OP: &str = "accio_endpoint_recv";
    guard(OP, || {
        need(OP, "len", len)?;
        // SAFETY: the caller's contract.
        let e = unsafe { obj::<EndpointObj>(OP, endpoint)? };
        // SAFETY: the caller's contract.
        let dst = unsafe { bytes_mut(OP, "buf", "cap", buf, cap)? };
        // The lock serializes receivers (the contract does too) and guards a kept message.
        let mut inbox = e.inbox.lock().unwrap_or_else(PoisonError::into_inner);
        let inbox = &mut *inbox;
        if inbox.pending.is_none() {
            let n = e.ep.recv_timeout(&mut inbox.buf, timeout(timeout_ms))?;
            inbox.pending = Some(n);
        }
        // SAFETY: len checked non-NULL above; writable by contract.
        unsafe { deliver(OP, e, inbox, dst, len) }
    })
}

/// Sends one message if it can be enqueued whole without waiting: `ACCIO_OK` when it was,
/// `ACCIO_WOULD_BLOCK` when it was not (nothing was enqueued; call again later). A
/// would-block is no failure: the last error message is left as it was. A message longer
/// than the backend's limit for this call (shm: 256 KiB, tcp: 256 KiB by default; above it
/// use `accio_endpoint_send`) fails with `ACCIO_MESSAGE_TOO_LARGE` naming both lengths.
///
/// # Safety
/// `endpoint` is a live endpoint; `data` is readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn accio_endpoint_try_send(
    endpoint: *const accio_endpoint,
    data: *const u8,
    len: usize,
) -> accio_status {
    const OP: &str = "accio_endpoint_try_send";
    guard_progress(OP, || {
        // SAFETY: the caller's contract.
        let e = unsafe { obj::<EndpointObj>(OP, endpoint)? };
        // SAFETY: the caller's contract.
        let msg = unsafe { bytes(OP, "data", "len", data, len)? };
        Ok(e.ep.try_send(msg)?)
    })
}

/// Receives the next message into `buf` (`cap` bytes) if one is already there, storing its
/// length in `*len`: `ACCIO_OK`, or `ACCIO_WOULD_BLOCK` when none is (or another thread is
/// receiving on the endpoint right now); nothing was consumed, and the last error message is
/// left as it was. A message longer than `cap` is kept as `accio_endpoint_recv` keeps it:
/// its length is stored, the call fails with `ACCIO_BUFFER_TOO_SMALL`, and the next
/// receive returns it.
///
/// # Safety
/// `endpoint` is a live endpoint; `buf` is writable for `cap` bytes; `len` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_endpoint_try_recv(
    endpoint: *const accio_endpoint,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> accio_status {
    const OP: &str = "accio_endpoint_try_recv";
    guard_progress(OP, || {
        need(OP, "len", len)?;
        // SAFETY: the caller's contract.
        let e = unsafe { obj::<EndpointObj>(OP, endpoint)? };
        // SAFETY: the caller's contract.
        let dst = unsafe { bytes_mut(OP, "buf", "cap", buf, cap)? };
        // A receiver in another thread holds the lock while it waits: that is a would-block
        // for this call, which must not wait for it.
        let mut inbox = match e.inbox.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(Progress::WouldBlock),
        };
        let inbox = &mut *inbox;
        if inbox.pending.is_none() {
            match e.ep.try_recv(&mut inbox.buf)? {
                Progress::Ready(n) => inbox.pending = Some(n),
                Progress::WouldBlock => return Ok(Progress::WouldBlock),
            }
        }
        // SAFETY: len checked non-NULL above; writable by contract.
        unsafe { deliver(OP, e, inbox, dst, len) }.map(Progress::Ready)
    })
}

/// Hands the kept message to the caller: its length into `*len`, its bytes into `dst` when
/// they fit (then it is no longer kept), else `ACCIO_BUFFER_TOO_SMALL`.
///
/// # Safety
/// `len` is non-NULL and writable; `inbox.pending` is set.
unsafe fn deliver(
    op: &str,
    e: &EndpointObj,
    inbox: &mut Inbox,
    dst: &mut [u8],
    len: *mut usize,
) -> CResult {
    let n = inbox.pending.expect("a kept message");
    // SAFETY: the caller's contract.
    unsafe { put(op, "len", len, n)? };
    if n > dst.len() {
        return Err(Failure::new(
            accio_status::ACCIO_BUFFER_TOO_SMALL,
            format!(
                "{op}: the message from {} has {n} bytes, the buffer {}; it is kept for the \
                 next call",
                e.ep.peer_addr(),
                dst.len()
            ),
        ));
    }
    accio::copy_slice(&mut dst[..n], &inbox.buf[..n]);
    inbox.pending = None;
    Ok(())
}

/// Withdraws the window registered at `offset`: later peer RMA to it fails. Its memory
/// stays valid while its `accio_window` handle lives.
///
/// # Safety
/// `endpoint` is a live endpoint.
#[no_mangle]
pub unsafe extern "C" fn accio_endpoint_unregister(
    endpoint: *const accio_endpoint,
    offset: u64,
) -> accio_status {
    const OP: &str = "accio_endpoint_unregister";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let e = unsafe { obj::<EndpointObj>(OP, endpoint)? };
        Ok(e.ep.unregister(offset)?)
    })
}

/// Copies `len` bytes at local registered offset `local_off` to the peer's offset
/// `remote_off` (`flags`: 0 or `ACCIO_RMA_SYNC`).
///
/// # Safety
/// `endpoint` is a live endpoint.
#[no_mangle]
pub unsafe extern "C" fn accio_endpoint_write_to(
    endpoint: *const accio_endpoint,
    local_off: u64,
    len: usize,
    remote_off: u64,
    flags: u32,
) -> accio_status {
    const OP: &str = "accio_endpoint_write_to";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let e = unsafe { obj::<EndpointObj>(OP, endpoint)? };
        Ok(e.ep.write_to(local_off, len, remote_off, rma_flags(OP, flags)?)?)
    })
}

/// Copies `len` bytes at the peer's offset `remote_off` to local registered offset
/// `local_off`; returns when they are in local memory.
///
/// # Safety
/// `endpoint` is a live endpoint.
#[no_mangle]
pub unsafe extern "C" fn accio_endpoint_read_from(
    endpoint: *const accio_endpoint,
    local_off: u64,
    len: usize,
    remote_off: u64,
    flags: u32,
) -> accio_status {
    const OP: &str = "accio_endpoint_read_from";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let e = unsafe { obj::<EndpointObj>(OP, endpoint)? };
        Ok(e.ep.read_from(local_off, len, remote_off, rma_flags(OP, flags)?)?)
    })
}

/// Copies `len` bytes of any local memory at `src` to the peer's offset `remote_off`.
/// `src` may be reused when the call returns.
///
/// # Safety
/// `endpoint` is a live endpoint; `src` is readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn accio_endpoint_vwrite_to(
    endpoint: *const accio_endpoint,
    src: *const u8,
    len: usize,
    remote_off: u64,
    flags: u32,
) -> accio_status {
    const OP: &str = "accio_endpoint_vwrite_to";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let e = unsafe { obj::<EndpointObj>(OP, endpoint)? };
        // SAFETY: the caller's contract.
        let src = unsafe { bytes(OP, "src", "len", src, len)? };
        Ok(e.ep.vwrite_to(src, remote_off, rma_flags(OP, flags)?)?)
    })
}

/// Copies `len` bytes at the peer's offset `remote_off` into any local memory at `dst`.
///
/// # Safety
/// `endpoint` is a live endpoint; `dst` is writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn accio_endpoint_vread_from(
    endpoint: *const accio_endpoint,
    dst: *mut u8,
    len: usize,
    remote_off: u64,
    flags: u32,
) -> accio_status {
    const OP: &str = "accio_endpoint_vread_from";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let e = unsafe { obj::<EndpointObj>(OP, endpoint)? };
        // SAFETY: the caller's contract.
        let dst = unsafe { bytes_mut(OP, "dst", "len", dst, len)? };
        Ok(e.ep.vread_from(dst, remote_off, rma_flags(OP, flags)?)?)
    })
}

/// Copies `len` bytes of CUDA device memory at device address `src` (a `CUdeviceptr`, or a
/// pointer from `cudaMalloc`) to the peer's offset `remote_off`, staged through two
/// pinned 4 MiB chunks: the copy engine fills one while the transport sends the other.
/// The whole remote range is checked first (a refused call moves no byte); the address
/// is checked with the driver: host memory, memory of no allocation, or a range past its
/// allocation fail with `ACCIO_INVALID_ARGUMENT` (naming the cause), a library built
/// without CUDA or a machine without driver or GPU with `ACCIO_UNSUPPORTED`. Work queued
/// on the GPU by the caller must be complete (synchronize its stream first).
///
/// # Safety
/// `endpoint` is a live endpoint. `src` need not be readable by the host: the driver
/// checks it.
#[no_mangle]
pub unsafe extern "C" fn accio_endpoint_vwrite_device(
    endpoint: *const accio_endpoint,
    src: u64,
    len: usize,
    remote_off: u64,
    flags: u32,
) -> accio_status {
    const OP: &str = "accio_endpoint_vwrite_device";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let e = unsafe { obj::<EndpointObj>(OP, endpoint)? };
        let flags = rma_flags(OP, flags)?;
        if len == 0 {
            return Ok(e.ep.vwrite_to(&[], remote_off, flags)?);
        }
        let range = device_range(OP, src, len)?;
        Ok(e.ep.vwrite_device(&range, remote_off, flags)?)
    })
}

/// Copies `len` bytes at the peer's offset `remote_off` into CUDA device memory at device
/// address `dst`, staged as `accio_endpoint_vwrite_device` stages (the transport receives
/// one chunk while the copy engine moves the other); the bytes are in device memory when
/// it returns. Errors as for `accio_endpoint_vwrite_device`.
///
/// # Safety
/// `endpoint` is a live endpoint. `dst` need not be writable by the host: the driver
/// checks it.
#[no_mangle]
pub unsafe extern "C" fn accio_endpoint_vread_device(
    endpoint: *const accio_endpoint,
    dst: u64,
    len: usize,
    remote_off: u64,
    flags: u32,
) -> accio_status {
    const OP: &str = "accio_endpoint_vread_device";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let e = unsafe { obj::<EndpointObj>(OP, endpoint)? };
        let flags = rma_flags(OP, flags)?;
        if len == 0 {
            return Ok(e.ep.vread_from(&mut [], remote_off, flags)?);
        }
        let range = device_range(OP, dst, len)?;
        Ok(e.ep.vread_device(&range, remote_off, flags)?)
    })
}

/// `len` bytes of device memory at `ptr`, as the driver vouches for them; the error names
/// `op`.
fn device_range(op: &str, ptr: u64, len: usize) -> CResult<accio::device::DeviceRange> {
    accio::device::device_range(ptr, len)
        .map_err(|e| Failure::new(crate::device_status(&e), format!("{op}: {e}")))
}

/// Stores in `*mark` a mark naming every RMA whose call returned before this one.
///
/// # Safety
/// `endpoint` is a live endpoint; `mark` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_endpoint_fence_mark(
    endpoint: *const accio_endpoint,
    mark: *mut u64,
) -> accio_status {
    const OP: &str = "accio_endpoint_fence_mark";
    guard(OP, || {
        need(OP, "mark", mark)?;
        // SAFETY: the caller's contract.
        let e = unsafe { obj::<EndpointObj>(OP, endpoint)? };
        let m = e.ep.fence_mark()?;
        // SAFETY: mark checked non-NULL above; writable by contract.
        unsafe { put(OP, "mark", mark, m.0) }
    })
}

/// Waits until every RMA named by `mark` (from `accio_endpoint_fence_mark`) completed.
/// A mark this endpoint never issued (above its latest, e.g. any but 0 before the first
/// RMA) returns `ACCIO_INVALID_ARGUMENT`, naming the mark and the latest one, having waited
/// for nothing.
///
/// # Safety
/// `endpoint` is a live endpoint.
#[no_mangle]
pub unsafe extern "C" fn accio_endpoint_fence_wait(
    endpoint: *const accio_endpoint,
    mark: u64,
) -> accio_status {
    const OP: &str = "accio_endpoint_fence_wait";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let e = unsafe { obj::<EndpointObj>(OP, endpoint)? };
        Ok(e.ep.fence_wait(accio::Mark(mark))?)
    })
}

/// After every earlier RMA completed, stores `local->value` at local offset
/// `local->offset` and `remote->value` at the peer's `remote->offset` (either may be
/// NULL; offsets 8-byte aligned; the remote window needs `ACCIO_ACCESS_WRITE`). A peer
/// that sees the value (`accio_window_wait_u64`) also sees the data.
///
/// # Safety
/// `endpoint` is a live endpoint; `local` and `remote` are NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn accio_endpoint_fence_signal(
    endpoint: *const accio_endpoint,
    local: *const accio_signal,
    remote: *const accio_signal,
) -> accio_status {
    const OP: &str = "accio_endpoint_fence_signal";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let e = unsafe { obj::<EndpointObj>(OP, endpoint)? };
        // SAFETY: NULL or readable by the caller's contract.
        let (l, r) = unsafe { (local.as_ref(), remote.as_ref()) };
        Ok(e.ep.fence_signal(
            l.map(|s| (s.offset, s.value)),
            r.map(|s| (s.offset, s.value)),
        )?)
    })
}

// ---- windows -------------------------------------------------------------------------

/// Registers `len` bytes of fresh, zeroed, page-aligned memory on `endpoint` as a window
/// the peer may access with `access` (`ACCIO_ACCESS_*`) and stores its handle in `*out`.
/// Send its offset (`accio_window_offset`) to the peer in a message.
///
/// # Safety
/// `endpoint` is a live endpoint; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_window_register(
    endpoint: *const accio_endpoint,
    len: usize,
    access: u32,
    out: *mut *mut accio_window,
) -> accio_status {
    const OP: &str = "accio_window_register";
    guard(OP, || {
        need(OP, "out", out)?;
        // SAFETY: the caller's contract.
        let e = unsafe { obj::<EndpointObj>(OP, endpoint)? };
        let w = e.ep.register(len, access_bits(OP, access)?)?;
        // SAFETY: out checked non-NULL above; writable by contract.
        unsafe { put(OP, "out", out, into_handle(WindowObj(w))) }
    })
}

/// Registers `len` bytes of CUDA device memory at device address `data` (a `CUdeviceptr`,
/// or a pointer from `cudaMalloc`, anywhere inside its allocation) on `endpoint` as a
/// window the peer may access with `access` (`ACCIO_ACCESS_*`), and stores the window's
/// offset in `*offset` (send it to the peer; withdraw it with `accio_endpoint_unregister`).
/// Every RMA call reaches it, from the peer and from here, through the driver: over shm
/// the peer process opens it through CUDA IPC, over tcp and mpi it is staged through
/// pinned memory by this process. The address is checked with the driver first: host
/// memory, memory of no allocation, or a range past its allocation fail with
/// `ACCIO_INVALID_ARGUMENT`, a library built without CUDA or a machine without driver or
/// GPU with `ACCIO_UNSUPPORTED`.
///
/// # Safety
/// `endpoint` is a live endpoint; `offset` is writable. The memory stays allocated until
/// the window is withdrawn and the endpoint destroyed (a peer may copy into it until then).
#[no_mangle]
pub unsafe extern "C" fn accio_window_register_device(
    endpoint: *const accio_endpoint,
    data: u64,
    len: usize,
    access: u32,
    offset: *mut u64,
) -> accio_status {
    const OP: &str = "accio_window_register_device";
    guard(OP, || {
        need(OP, "offset", offset)?;
        // SAFETY: the caller's contract.
        let e = unsafe { obj::<EndpointObj>(OP, endpoint)? };
        let access = access_bits(OP, access)?;
        let range = device_range(OP, data, len)?;
        // The caller keeps the memory allocated: nothing to hold here.
        let memory = Arc::new(accio_device::ForeignMemory::new(range, ()));
        let w = e.ep.register_device(memory, access)?;
        // SAFETY: offset checked non-NULL above; writable by contract.
        unsafe { put(OP, "offset", offset, w.offset()) }
    })
}

/// Registers `len` bytes of a region, from byte `start`, on `endpoint` as a window the peer
/// may access with `access` (`ACCIO_ACCESS_*`), and stores its handle in `*out`: the
/// peer's RMA reads and writes the region's memory itself, nothing is copied or zeroed.
/// The same bytes may back windows on several endpoints, at once or in turn (one grid lent
/// to every neighbour, say); who writes when is the caller's business (fences and
/// `accio_window_wait_u64`).
///
/// `start` must be a multiple of `ACCIO_PAGE` and `len` at least 1, with `start + len`
/// inside the region; else `ACCIO_INVALID_ARGUMENT` naming the numbers, having registered
/// nothing. Exposing memory is unsafe by nature: an shm peer is handed the region's memory
/// object, so a peer that broke the protocol could reach the whole region, not only this
/// window. Give memory meant for different peers regions of its own when they must not
/// see each other's bytes.
///
/// # Safety
/// `endpoint` is a live endpoint; `region` is a live region; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_window_register_view(
    endpoint: *const accio_endpoint,
    region: *const accio_region,
    start: usize,
    len: usize,
    access: u32,
    out: *mut *mut accio_window,
) -> accio_status {
    const OP: &str = "accio_window_register_view";
    guard(OP, || {
        need(OP, "out", out)?;
        // SAFETY: the caller's contract.
        let (e, r) = unsafe {
            (
                obj::<EndpointObj>(OP, endpoint)?,
                obj::<RegionObj>(OP, region)?,
            )
        };
        let access = access_bits(OP, access)?;
        if !start.is_multiple_of(ACCIO_PAGE) {
            return Err(Failure::invalid(
                OP,
                format!(
                    "start = {start} ({start:#x}) is not a multiple of the page size \
                     ACCIO_PAGE = {ACCIO_PAGE}: a window starts on a page boundary"
                ),
            ));
        }
        if len == 0 {
            return Err(Failure::invalid(
                OP,
                "len = 0: a window holds at least 1 byte",
            ));
        }
        let view = MemView::sub(Arc::clone(&r.0), start, len).ok_or_else(|| {
            Failure::invalid(
                OP,
                format!(
                    "start = {start} + len = {len} is past the end of the {}-byte region",
                    r.0.len()
                ),
            )
        })?;
        let w = e.ep.register_view(&view, access)?;
        // SAFETY: out checked non-NULL above; writable by contract.
        unsafe { put(OP, "out", out, into_handle(WindowObj(w))) }
    })
}

/// Stores the window's offset in its endpoint's registered address space (what the peer
/// names in RMA) in `*offset`.
///
/// # Safety
/// `window` is a live window; `offset` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_window_offset(
    window: *const accio_window,
    offset: *mut u64,
) -> accio_status {
    const OP: &str = "accio_window_offset";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let w = unsafe { obj::<WindowObj>(OP, window)? };
        // SAFETY: the caller's contract.
        unsafe { put(OP, "offset", offset, w.0.offset()) }
    })
}

/// Stores the start and length of the window's memory in `*ptr` and `*len` (either may
/// be NULL). The memory stays valid until `accio_window_destroy`, even after unregister.
/// The peer may write it at any time: synchronize with fences and `accio_window_wait_u64`.
///
/// # Safety
/// `window` is a live window; `ptr` and `len` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn accio_window_memory(
    window: *const accio_window,
    ptr: *mut *mut u8,
    len: *mut usize,
) -> accio_status {
    const OP: &str = "accio_window_memory";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let w = unsafe { obj::<WindowObj>(OP, window)? };
        if !ptr.is_null() {
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { ptr.write(w.0.as_ptr()) };
        }
        if !len.is_null() {
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { len.write(w.0.len()) };
        }
        Ok(())
    })
}

/// Waits until the 8-byte word at byte `at` of the window (8-byte aligned) equals `value`
/// (e.g. stored by the peer's `accio_endpoint_fence_signal`), at most `timeout_ms`
/// (negative: forever).
///
/// # Safety
/// `window` is a live window.
#[no_mangle]
pub unsafe extern "C" fn accio_window_wait_u64(
    window: *const accio_window,
    at: usize,
    value: u64,
    timeout_ms: i64,
) -> accio_status {
    const OP: &str = "accio_window_wait_u64";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let w = unsafe { obj::<WindowObj>(OP, window)? };
        Ok(w.0.wait_u64(usize_at(OP, at)?, value, timeout(timeout_ms))?)
    })
}

/// Loads the 8-byte word at byte `at` of the window (8-byte aligned, acquire ordering)
/// into `*value`.
///
/// # Safety
/// `window` is a live window; `value` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_window_load_u64(
    window: *const accio_window,
    at: usize,
    value: *mut u64,
) -> accio_status {
    const OP: &str = "accio_window_load_u64";
    guard(OP, || {
        need(OP, "value", value)?;
        // SAFETY: the caller's contract.
        let w = unsafe { obj::<WindowObj>(OP, window)? };
        let v = w.0.load_u64(usize_at(OP, at)?)?;
        // SAFETY: value checked non-NULL above; writable by contract.
        unsafe { put(OP, "value", value, v) }
    })
}

/// Stores `value` into the 8-byte word at byte `at` of the window (8-byte aligned,
/// release ordering).
///
/// # Safety
/// `window` is a live window.
#[no_mangle]
pub unsafe extern "C" fn accio_window_store_u64(
    window: *const accio_window,
    at: usize,
    value: u64,
) -> accio_status {
    const OP: &str = "accio_window_store_u64";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let w = unsafe { obj::<WindowObj>(OP, window)? };
        Ok(w.0.store_u64(usize_at(OP, at)?, value)?)
    })
}

/// Withdraws `window` from `endpoint`, where it was registered: later peer RMA to it
/// fails. The handle and its memory stay valid until `accio_window_destroy`.
///
/// # Safety
/// `endpoint` is a live endpoint; `window` is a live window.
#[no_mangle]
pub unsafe extern "C" fn accio_window_unregister(
    endpoint: *const accio_endpoint,
    window: *const accio_window,
) -> accio_status {
    const OP: &str = "accio_window_unregister";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let (e, w) = unsafe {
            (
                obj::<EndpointObj>(OP, endpoint)?,
                obj::<WindowObj>(OP, window)?,
            )
        };
        Ok(e.ep.unregister(w.0.offset())?)
    })
}

/// Frees the window handle (NULL is ignored). It does not unregister the window (see
/// `accio_window_unregister`); the memory is unmapped once neither the handle nor the
/// endpoint holds it.
///
/// # Safety
/// `window` is NULL or a live window, not used again; no pointer from
/// `accio_window_memory` is used afterwards.
#[no_mangle]
pub unsafe extern "C" fn accio_window_destroy(window: *mut accio_window) -> accio_status {
    // SAFETY: the caller's contract.
    unsafe { destroy::<WindowObj>("accio_window_destroy", window) }
}

// ---- regions -------------------------------------------------------------------------

/// Maps `len` bytes of fresh, zeroed, page-aligned memory that windows on any endpoint
/// (shm, tcp, mpi) may expose (`accio_window_register_view`), pre-faulted, and stores its
/// handle in `*out`; `accio_region_memory` gives the bytes. Use it for data the program
/// computes on and lends to peers in place: a grid whose faces neighbours write, a pool of
/// buffers. `len` 0 is refused with `ACCIO_INVALID_ARGUMENT`; more than the node can hold
/// (above `ACCIO_SHM_REGISTER_LIMIT`, by default half the node's memory) with
/// `ACCIO_OUT_OF_MEMORY`, before any memory is touched.
///
/// # Safety
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_region_create(
    len: usize,
    out: *mut *mut accio_region,
) -> accio_status {
    const OP: &str = "accio_region_create";
    guard(OP, || {
        need(OP, "out", out)?;
        if len == 0 {
            return Err(Failure::invalid(
                OP,
                "len = 0: a region holds at least 1 byte",
            ));
        }
        let limit = accio::ShmOptions::from_env().register_limit;
        if len as u64 > limit {
            return Err(accio::Error::OutOfMemory {
                op: OP,
                resource: "this process".into(),
                len: len as u64,
                limit,
                why: "half the node's memory by default; ACCIO_SHM_REGISTER_LIMIT sets another",
            }
            .into());
        }
        let region = Region::shareable(len, "accio-c-region", true)?;
        // SAFETY: out checked non-NULL above; writable by contract.
        unsafe { put(OP, "out", out, into_handle(RegionObj(Arc::new(region)))) }
    })
}

/// Stores the start and length of the region's memory in `*ptr` and `*len` (either may be
/// NULL). The memory is the caller's to read and write; it stays valid until
/// `accio_region_destroy`. Peers reach the parts registered as windows at any time:
/// synchronize with messages, fences and `accio_window_wait_u64`.
///
/// # Safety
/// `region` is a live region; `ptr` and `len` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn accio_region_memory(
    region: *const accio_region,
    ptr: *mut *mut u8,
    len: *mut usize,
) -> accio_status {
    const OP: &str = "accio_region_memory";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let r = unsafe { obj::<RegionObj>(OP, region)? };
        if !ptr.is_null() {
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { ptr.write(r.0.as_ptr()) };
        }
        if !len.is_null() {
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { len.write(r.0.len()) };
        }
        Ok(())
    })
}

/// Frees the region handle (NULL is ignored). Windows over it keep its memory mapped for
/// their peers until they are unregistered and destroyed (and their endpoints let go), but
/// the caller must not touch it through the pointer of `accio_region_memory` any more.
///
/// # Safety
/// `region` is NULL or a live region, not used again; no pointer from
/// `accio_region_memory` is used afterwards.
#[no_mangle]
pub unsafe extern "C" fn accio_region_destroy(region: *mut accio_region) -> accio_status {
    // SAFETY: the caller's contract.
    unsafe { destroy::<RegionObj>("accio_region_destroy", region) }
}
