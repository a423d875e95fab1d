//! # accio-capi: the C API of accio
//!
//! `libaccio.so` / `libaccio.a` and the header `include/accio.h` (generated from this crate
//! by cbindgen; a test fails when the checked-in copy is stale). C and C++ programs get
//! the rank world (`accio_world_join` in a program started by `accio run -n N` or, built
//! with the `mpi` feature, by mpirun: rank, size, node, an endpoint to any rank over the
//! backend chosen for the pair, a barrier), SCIF-style endpoints (listen/accept/connect,
//! messages, registered windows, one-sided RMA, fences, `fence_signal`) and the merging
//! file service (a merger writing one container file, producers writing blocks into it).
//!
//! ## Conventions
//!
//! - Names are `accio_<object>_<verb>`; objects are opaque handles made by a `create`-like
//!   call (`accio_listener_create`, `accio_endpoint_connect`, `accio_window_register`,
//!   `accio_merger_create`, `accio_producer_connect`) and freed by the matching
//!   `accio_<object>_destroy` (or by a call that consumes them: `accio_merger_close`,
//!   `accio_producer_finish`).
//! - Every call that can fail returns an [`accio_status`]; `ACCIO_OK` is 0. After a failure,
//!   [`accio_last_error_message`] gives this thread's message naming the resource and the
//!   cause.
//! - A NULL handle or pointer argument is refused with `ACCIO_NULL_POINTER`; a handle of the
//!   wrong type (or, on a best-effort basis, one already destroyed) with
//!   `ACCIO_INVALID_HANDLE`. No Rust panic crosses the boundary: it becomes `ACCIO_PANIC`.
//! - A pointer and a length name one buffer: a length above `isize::MAX`, or one that makes
//!   the buffer end past the end of the address space (`SIZE_MAX`, a negative value cast to
//!   `size_t`), is refused with `ACCIO_INVALID_ARGUMENT` before any byte is touched; the
//!   message names the argument and the limit.
//! - Timeouts are milliseconds; a negative value ([`ACCIO_FOREVER`]) waits forever.
//! - Non-blocking calls (`accio_endpoint_try_send`, `accio_endpoint_try_recv`) return
//!   `ACCIO_WOULD_BLOCK` when they could not proceed without waiting: a status, not a
//!   failure, so it leaves the last error message alone (and costs no allocation).

#![allow(non_camel_case_types)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

mod endpoint;
mod merge;
mod world;

pub use endpoint::*;
pub use merge::*;
pub use world::*;

/// Wait forever: pass as a `timeout_ms` argument.
pub const ACCIO_FOREVER: i64 = -1;

/// The outcome of a call. `ACCIO_OK` (0) is success; every other value names what went
/// wrong, and [`accio_last_error_message`] says it in words.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum accio_status {
    /// Success.
    ACCIO_OK = 0,
    /// The peer closed the connection or its process died.
    ACCIO_PEER_GONE = 1,
    /// A deadline passed before the operation could complete.
    ACCIO_TIMEOUT = 2,
    /// The address cannot be parsed or does not name a reachable endpoint.
    ACCIO_BAD_ADDRESS = 3,
    /// Another listener holds the address.
    ACCIO_ADDR_IN_USE = 4,
    /// The backend does not offer this operation.
    ACCIO_UNSUPPORTED = 5,
    /// An RMA range is not inside one registered window.
    ACCIO_OUT_OF_WINDOW = 6,
    /// The window exists but lacks the access right the operation needs.
    ACCIO_ACCESS_DENIED = 7,
    /// A message is larger than the operation allows.
    ACCIO_MESSAGE_TOO_LARGE = 8,
    /// The peer broke the wire or merge protocol.
    ACCIO_PROTOCOL = 9,
    /// An argument is invalid (zero length, misaligned offset, unknown flag, bad UTF-8...).
    ACCIO_INVALID_ARGUMENT = 10,
    /// An operating-system call or a file operation failed.
    ACCIO_IO = 11,
    /// A required pointer argument is NULL.
    ACCIO_NULL_POINTER = 12,
    /// The handle is not a live object of the expected type.
    ACCIO_INVALID_HANDLE = 13,
    /// The caller's buffer is too small; the needed size was stored (nothing was consumed).
    ACCIO_BUFFER_TOO_SMALL = 14,
    /// A block, record or commit does not fit the merger's buffer size.
    ACCIO_TOO_LARGE = 15,
    /// The merger failed (e.g. its file system is full) or refused this producer's block.
    ACCIO_MERGER_FAILED = 16,
    /// A container file is not (or no longer) in the accio container format.
    ACCIO_FORMAT = 17,
    /// An internal error (a Rust panic) was caught at the boundary.
    ACCIO_PANIC = 18,
    /// The peer is not who may connect: a process of another user (shm), or one that did
    /// not prove it holds the shared secret (tcp). Nothing was sent to it.
    ACCIO_UNTRUSTED = 19,
    /// A request for more memory than the limit allows (e.g. a window beyond half the
    /// node's memory), refused before any was touched.
    ACCIO_OUT_OF_MEMORY = 20,
    /// A non-blocking call could not proceed without waiting; nothing happened. Not a
    /// failure: the last error message is left as it was. Call again later.
    ACCIO_WOULD_BLOCK = 21,
    /// Joining the world failed: the program was not started by `accio run -n N` (or by
    /// mpirun, with a libaccio built with MPI), the launcher's rendezvous is gone, or the
    /// ranks disagree about the world. The message names the variable or rank and why.
    ACCIO_BOOTSTRAP = 22,
}

/// A failed call: the status and the message `accio_last_error_message` will return.
#[derive(Debug)]
pub(crate) struct Failure {
    status: accio_status,
    message: String,
}

impl Failure {
    pub(crate) fn new(status: accio_status, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(op: &str, reason: impl std::fmt::Display) -> Failure {
        Failure::new(
            accio_status::ACCIO_INVALID_ARGUMENT,
            format!("{op}: {reason}"),
        )
    }
}

impl From<accio::Error> for Failure {
    fn from(e: accio::Error) -> Failure {
        Failure::new(transport_status(&e), e.to_string())
    }
}

impl From<accio_merge::MergeError> for Failure {
    fn from(e: accio_merge::MergeError) -> Failure {
        use accio_merge::MergeError as M;
        use accio_status as S;
        let status = match &e {
            M::Transport(t) => transport_status(t),
            M::File { .. } => S::ACCIO_IO,
            M::Format { .. } => S::ACCIO_FORMAT,
            M::Protocol { .. } => S::ACCIO_PROTOCOL,
            M::Merger { .. } | M::Sink { .. } | M::Rejected { .. } => S::ACCIO_MERGER_FAILED,
            M::TooLarge { .. } => S::ACCIO_TOO_LARGE,
            M::Config(_) => S::ACCIO_INVALID_ARGUMENT,
            M::Timeout { .. } => S::ACCIO_TIMEOUT,
            M::Device(d) => device_status(d),
            _ => S::ACCIO_IO,
        };
        Failure::new(status, e.to_string())
    }
}

impl From<accio_device::Error> for Failure {
    fn from(e: accio_device::Error) -> Failure {
        Failure::new(device_status(&e), e.to_string())
    }
}

impl From<accio::device::DeviceRmaError> for Failure {
    fn from(e: accio::device::DeviceRmaError) -> Failure {
        match e {
            accio::device::DeviceRmaError::Transport(t) => t.into(),
            accio::device::DeviceRmaError::Device(d) => d.into(),
        }
    }
}

/// The status of a GPU failure: no GPU to use is `ACCIO_UNSUPPORTED`, memory that is not
/// what it was given as `ACCIO_INVALID_ARGUMENT`, a driver call that failed `ACCIO_IO`.
pub(crate) fn device_status(e: &accio_device::Error) -> accio_status {
    use accio_device::Error as D;
    match e {
        e if e.is_unavailable() => accio_status::ACCIO_UNSUPPORTED,
        D::NotDeviceMemory { .. } | D::Argument(_) => accio_status::ACCIO_INVALID_ARGUMENT,
        _ => accio_status::ACCIO_IO,
    }
}

/// The status of a transport error kind.
pub(crate) fn transport_status(e: &accio::Error) -> accio_status {
    use accio::ErrorKind as K;
    use accio_status as S;
    match e.kind() {
        K::PeerGone => S::ACCIO_PEER_GONE,
        K::Timeout => S::ACCIO_TIMEOUT,
        K::BadAddress => S::ACCIO_BAD_ADDRESS,
        K::AddrInUse => S::ACCIO_ADDR_IN_USE,
        K::Unsupported => S::ACCIO_UNSUPPORTED,
        K::OutOfWindow => S::ACCIO_OUT_OF_WINDOW,
        K::AccessDenied => S::ACCIO_ACCESS_DENIED,
        K::MessageTooLarge => S::ACCIO_MESSAGE_TOO_LARGE,
        K::Protocol => S::ACCIO_PROTOCOL,
        K::InvalidArgument => S::ACCIO_INVALID_ARGUMENT,
        K::Io => S::ACCIO_IO,
        K::Untrusted => S::ACCIO_UNTRUSTED,
        K::OutOfMemory => S::ACCIO_OUT_OF_MEMORY,
        // ErrorKind is non-exhaustive: a kind added later is at least an error.
        _ => S::ACCIO_IO,
    }
}

pub(crate) type CResult<T = ()> = Result<T, Failure>;

thread_local! {
    /// The message of this thread's last failed call (NUL-terminated for C).
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

pub(crate) fn set_last_error(message: &str) {
    // Interior NULs cannot be in a C string: show them instead of cutting the text short.
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// Runs the body of an entry point: its error becomes a status (and this thread's last
/// error message), and a panic is caught before it can unwind into C.
pub(crate) fn guard(op: &'static str, body: impl FnOnce() -> CResult) -> accio_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => accio_status::ACCIO_OK,
        Ok(Err(f)) => {
            set_last_error(&f.message);
            f.status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(&format!("{op}: internal error (a bug in accio): {what}"));
            accio_status::ACCIO_PANIC
        }
    }
}

/// Runs the body of a non-blocking entry point as [`guard`] does; a
/// [`accio::Progress::WouldBlock`] becomes `ACCIO_WOULD_BLOCK` without touching the last
/// error message (no allocation on a poll that found nothing).
pub(crate) fn guard_progress(
    op: &'static str,
    body: impl FnOnce() -> CResult<accio::Progress<()>>,
) -> accio_status {
    let mut would_block = false;
    let status = guard(op, || {
        would_block = matches!(body()?, accio::Progress::WouldBlock);
        Ok(())
    });
    if would_block {
        accio_status::ACCIO_WOULD_BLOCK
    } else {
        status
    }
}

/// Converts a `timeout_ms` argument: negative waits forever.
pub(crate) fn timeout(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// Reads a C string argument.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for the call.
pub(crate) unsafe fn c_str<'a>(op: &str, what: &str, p: *const c_char) -> CResult<&'a str> {
    if p.is_null() {
        return Err(null(op, what));
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map_err(|e| Failure::invalid(op, format!("{what} is not valid UTF-8 ({e})")))
}

/// The failure of a NULL argument.
pub(crate) fn null(op: &str, what: &str) -> Failure {
    Failure::new(
        accio_status::ACCIO_NULL_POINTER,
        format!("{op}: {what} is NULL"),
    )
}

/// Stores `value` through an out-pointer.
///
/// # Safety
/// `p` is NULL or valid for a write of `T`.
pub(crate) unsafe fn put<T>(op: &str, what: &str, p: *mut T, value: T) -> CResult {
    if p.is_null() {
        return Err(null(op, what));
    }
    // SAFETY: non-NULL and writable by the caller's contract.
    unsafe { p.write(value) };
    Ok(())
}

/// Checks an optional out-pointer is not NULL before work is done (so a call with a NULL
/// out-pointer changes nothing).
pub(crate) fn need<T>(op: &str, what: &str, p: *mut T) -> CResult {
    if p.is_null() {
        Err(null(op, what))
    } else {
        Ok(())
    }
}

/// The end of the user address space on every 64-bit Linux target (x86-64 with 5-level
/// paging: 2^56; arm64 and powerpc64 with 52-bit addresses: 2^52; riscv64 Sv57: 2^56): no
/// buffer of a C caller ends past it, so a range that does is a wrong length, refused
/// before a slice is built. On 32-bit targets `isize::MAX` is the bound.
#[cfg(target_pointer_width = "64")]
const USER_SPACE_END: usize = 1 << 57;
#[cfg(not(target_pointer_width = "64"))]
const USER_SPACE_END: usize = usize::MAX;

/// Checks that `len` bytes at `p` can be one Rust slice, as `slice::from_raw_parts`
/// requires: at most `isize::MAX` bytes, not wrapping around the address space, and (on
/// 64-bit targets) not ending past [`USER_SPACE_END`]. `what` names the pointer argument,
/// `len_what` the length argument. A C caller's `SIZE_MAX` or `(size_t)-1` is refused here
/// with `ACCIO_INVALID_ARGUMENT` instead of reaching a backend as a slice (which read past
/// the buffer and crashed).
pub(crate) fn check_len(op: &str, what: &str, len_what: &str, p: usize, len: usize) -> CResult {
    if len > isize::MAX as usize {
        return Err(Failure::invalid(
            op,
            format!(
                "{len_what} = {len} bytes of {what} exceeds the largest buffer length, \
                 isize::MAX = {}",
                isize::MAX
            ),
        ));
    }
    match p.checked_add(len) {
        Some(end) if end <= USER_SPACE_END => Ok(()),
        _ => Err(Failure::invalid(
            op,
            format!(
                "{what} at {p:#x} with {len_what} = {len} bytes ends past the end of user \
                 address space ({USER_SPACE_END:#x}): the length is wrong"
            ),
        )),
    }
}

/// A byte slice argument (`len` 0 allows a NULL pointer); `len` is checked first
/// ([`check_len`]).
///
/// # Safety
/// `p` is NULL or valid for reads of `len` bytes for `'a`.
pub(crate) unsafe fn bytes<'a>(
    op: &str,
    what: &str,
    len_what: &str,
    p: *const u8,
    len: usize,
) -> CResult<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(null(op, what));
    }
    check_len(op, what, len_what, p as usize, len)?;
    // SAFETY: non-NULL and readable for len bytes by the caller's contract; len is at most
    // isize::MAX and the range does not wrap (checked just above).
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// A mutable byte slice argument (`len` 0 allows a NULL pointer); `len` is checked first
/// ([`check_len`]).
///
/// # Safety
/// `p` is NULL or valid for reads and writes of `len` bytes for `'a`, and nothing else
/// accesses them meanwhile.
pub(crate) unsafe fn bytes_mut<'a>(
    op: &str,
    what: &str,
    len_what: &str,
    p: *mut u8,
    len: usize,
) -> CResult<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(null(op, what));
    }
    check_len(op, what, len_what, p as usize, len)?;
    // SAFETY: non-NULL, writable for len bytes and unaliased by the caller's contract;
    // len is at most isize::MAX and the range does not wrap (checked just above).
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// Copies `text` into a caller's buffer of `cap` bytes with a NUL, storing its length
/// (without the NUL) in `*len` when `len` is not NULL. Too small a buffer stores the
/// length and fails with `ACCIO_BUFFER_TOO_SMALL`.
///
/// # Safety
/// `buf` is NULL or writable for `cap` bytes; `len` is NULL or writable.
pub(crate) unsafe fn put_text(
    op: &str,
    text: &str,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> CResult {
    if !len.is_null() {
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe { len.write(text.len()) };
    }
    if cap < text.len() + 1 {
        return Err(Failure::new(
            accio_status::ACCIO_BUFFER_TOO_SMALL,
            format!(
                "{op}: {:?} needs {} bytes with its NUL, the buffer has {cap}",
                text,
                text.len() + 1
            ),
        ));
    }
    if buf.is_null() {
        return Err(null(op, "buf"));
    }
    // SAFETY: buf is writable for cap >= text.len() + 1 bytes, and text is a separate
    // Rust string.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
        buf.add(text.len()).write(0);
    }
    Ok(())
}

/// An object behind an opaque C handle: its type tag and C name.
pub(crate) trait Object: Sized {
    /// Stored first in the handle; checked on every use.
    const MAGIC: u64;
    /// The C type, for messages.
    const NAME: &'static str;
    /// The opaque C type handed out.
    type Opaque;
}

/// What an opaque handle points to: the tag, then the object. `repr(C)` keeps the tag
/// first, so a handle of any accio type can be checked by reading one `u64`.
#[repr(C)]
pub(crate) struct Handle<T> {
    magic: u64,
    value: T,
}

/// A fresh handle owning `value`.
pub(crate) fn into_handle<T: Object>(value: T) -> *mut T::Opaque {
    Box::into_raw(Box::new(Handle {
        magic: T::MAGIC,
        value,
    }))
    .cast()
}

/// Checks a handle and returns its tagged box pointer.
///
/// # Safety
/// `p` is NULL or a handle made by this library (of any type) that was not destroyed.
unsafe fn checked<T: Object>(op: &str, p: *const T::Opaque) -> CResult<*mut Handle<T>> {
    if p.is_null() {
        return Err(null(op, T::NAME));
    }
    let h = p as *mut Handle<T>;
    // SAFETY: every accio handle starts with its u64 tag (repr(C) Handle), so the first
    // eight bytes are readable whatever type the caller passed.
    let magic = unsafe { p.cast::<u64>().read() };
    if magic != T::MAGIC {
        return Err(Failure::new(
            accio_status::ACCIO_INVALID_HANDLE,
            format!(
                "{op}: the {} argument is not a live {} (another object, or destroyed)",
                T::NAME,
                T::NAME
            ),
        ));
    }
    Ok(h)
}

/// Borrows the object behind a handle.
///
/// # Safety
/// As [`checked`]; the object is not destroyed while the borrow lives.
pub(crate) unsafe fn obj<'a, T: Object>(op: &str, p: *const T::Opaque) -> CResult<&'a T> {
    // SAFETY: forwarded contract; a checked handle points to a live Handle<T>.
    unsafe { checked::<T>(op, p).map(|h| &(*h).value) }
}

/// Borrows the object behind a handle mutably.
///
/// # Safety
/// As [`obj`], and no other thread uses the object meanwhile.
pub(crate) unsafe fn obj_mut<'a, T: Object>(op: &str, p: *mut T::Opaque) -> CResult<&'a mut T> {
    // SAFETY: forwarded contract; a checked handle points to a live Handle<T>, used by
    // this thread only.
    unsafe { checked::<T>(op, p).map(|h| &mut (*h).value) }
}

/// Takes the object back from a handle, which is dead afterwards.
///
/// # Safety
/// As [`obj_mut`]; the caller never uses the handle again.
pub(crate) unsafe fn take<T: Object>(op: &str, p: *mut T::Opaque) -> CResult<T> {
    // SAFETY: forwarded contract.
    let h = unsafe { checked::<T>(op, p)? };
    // SAFETY: the handle came from Box::into_raw in into_handle. The tag is cleared first
    // so a second destroy of the same pointer is caught while the allocator has not
    // reused the memory (best effort: a reused block can hold anything).
    let b = unsafe {
        (*h).magic = 0;
        Box::from_raw(h)
    };
    Ok(b.value)
}

/// Frees a handle, ignoring NULL: the body of every `accio_<object>_destroy`.
///
/// # Safety
/// As [`take`].
pub(crate) unsafe fn destroy<T: Object>(op: &'static str, p: *mut T::Opaque) -> accio_status {
    if p.is_null() {
        return accio_status::ACCIO_OK;
    }
    // SAFETY: forwarded contract.
    guard(op, || unsafe { take::<T>(op, p) }.map(drop))
}

/// The message of this thread's last failed accio call ("" if none failed yet). The text
/// stays valid until the next failing call on this thread; copy it to keep it.
#[no_mangle]
pub extern "C" fn accio_last_error_message() -> *const c_char {
    catch_unwind(|| LAST_ERROR.with(|e| e.borrow().as_ptr())).unwrap_or(c"".as_ptr())
}

/// The name of a status (`"ACCIO_TIMEOUT"`), a static string; `"ACCIO_UNKNOWN_STATUS"`
/// for a value that is none. Takes an `int` so that any value C passes is valid.
#[no_mangle]
pub extern "C" fn accio_status_name(status: c_int) -> *const c_char {
    use accio_status as S;
    const ALL: [(accio_status, &CStr); 23] = [
        (S::ACCIO_OK, c"ACCIO_OK"),
        (S::ACCIO_PEER_GONE, c"ACCIO_PEER_GONE"),
        (S::ACCIO_TIMEOUT, c"ACCIO_TIMEOUT"),
        (S::ACCIO_BAD_ADDRESS, c"ACCIO_BAD_ADDRESS"),
        (S::ACCIO_ADDR_IN_USE, c"ACCIO_ADDR_IN_USE"),
        (S::ACCIO_UNSUPPORTED, c"ACCIO_UNSUPPORTED"),
        (S::ACCIO_OUT_OF_WINDOW, c"ACCIO_OUT_OF_WINDOW"),
        (S::ACCIO_ACCESS_DENIED, c"ACCIO_ACCESS_DENIED"),
        (S::ACCIO_MESSAGE_TOO_LARGE, c"ACCIO_MESSAGE_TOO_LARGE"),
        (S::ACCIO_PROTOCOL, c"ACCIO_PROTOCOL"),
        (S::ACCIO_INVALID_ARGUMENT, c"ACCIO_INVALID_ARGUMENT"),
        (S::ACCIO_IO, c"ACCIO_IO"),
        (S::ACCIO_NULL_POINTER, c"ACCIO_NULL_POINTER"),
        (S::ACCIO_INVALID_HANDLE, c"ACCIO_INVALID_HANDLE"),
        (S::ACCIO_BUFFER_TOO_SMALL, c"ACCIO_BUFFER_TOO_SMALL"),
        (S::ACCIO_TOO_LARGE, c"ACCIO_TOO_LARGE"),
        (S::ACCIO_MERGER_FAILED, c"ACCIO_MERGER_FAILED"),
        (S::ACCIO_FORMAT, c"ACCIO_FORMAT"),
        (S::ACCIO_PANIC, c"ACCIO_PANIC"),
        (S::ACCIO_UNTRUSTED, c"ACCIO_UNTRUSTED"),
        (S::ACCIO_OUT_OF_MEMORY, c"ACCIO_OUT_OF_MEMORY"),
        (S::ACCIO_WOULD_BLOCK, c"ACCIO_WOULD_BLOCK"),
        (S::ACCIO_BOOTSTRAP, c"ACCIO_BOOTSTRAP"),
    ];
    ALL.iter()
        .find(|(s, _)| *s as c_int == status)
        .map_or(c"ACCIO_UNKNOWN_STATUS", |(_, name)| name)
        .as_ptr()
}

/// The library's version (`"0.1.0"`), a static string.
#[no_mangle]
pub extern "C" fn accio_version() -> *const c_char {
    const V: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    V.as_ptr().cast()
}

#[cfg(test)]
mod tests;
