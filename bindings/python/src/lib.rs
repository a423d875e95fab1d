//! `accio._accio`: the native half of the `accio` Python package.
//!
//! The Python package (`python/accio/__init__.py`) re-exports these names and adds what is
//! easier in Python (`accio.open`, `accio.results`). Rules every function here follows:
//!
//! - the GIL is released (`Python::detach`) around every call that can block, copy or
//!   write a file;
//! - a call that may wait forever waits in [`SLICE`]-long slices and checks for signals in
//!   between, so Ctrl-C raises `KeyboardInterrupt` within about [`SLICE`];
//! - every Rust error becomes an exception of the `accio.Error` hierarchy carrying the
//!   Rust message, and a panic becomes `accio.Error` too (see [`guarded`]);
//! - an argument that is out of range (a negative size, offset or timeout) raises
//!   `accio.InvalidArgument`, also a `ValueError`, naming the call and the argument (see
//!   [`Int`] and [`secs`]);
//! - every offset is one in an endpoint's registered address space (what `Window.offset`
//!   returns and the peer names in RMA), the `Window` methods' included (see
//!   [`Window::word`]).

use std::ffi::{c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use accio::device::DeviceRma;
use accio::{Access, ErrorKind, RmaFlags};
use accio_merge::container::{ContainerOptions, ContainerReader};
use accio_merge::{ArrowIpcSink, ContainerSink, MergeError, ParquetOptions, ParquetSink, Sink};
use arrow_array::ffi::{from_ffi, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::{Array, RecordBatch, StructArray};
use arrow_schema::Schema;
use pyo3::exceptions::{PyException, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyCapsule, PyDict, PyTuple, PyType};
use pyo3::{create_exception, ffi};

mod cuda;
mod dlpack;
mod grid;
mod world;

/// How long a blocking call waits before it checks for Ctrl-C (and other signals).
const SLICE: Duration = Duration::from_millis(20);

create_exception!(
    accio,
    Error,
    PyException,
    "Base class of every error accio raises."
);
create_exception!(
    accio,
    PeerGone,
    Error,
    "The peer closed the connection or died."
);
create_exception!(
    accio,
    Timeout,
    Error,
    "A deadline passed before the call completed."
);
create_exception!(
    accio,
    BadAddress,
    Error,
    "An address that cannot be parsed or reached."
);
create_exception!(
    accio,
    AddrInUse,
    Error,
    "Another listener holds the address."
);
create_exception!(
    accio,
    Unsupported,
    Error,
    "The backend does not offer the operation."
);
create_exception!(
    accio,
    OutOfWindow,
    Error,
    "An RMA range is not inside one registered window."
);
create_exception!(
    accio,
    AccessDenied,
    Error,
    "The window lacks the access right the call needs."
);
create_exception!(
    accio,
    MessageTooLarge,
    Error,
    "A message exceeds the operation's limit."
);
create_exception!(
    accio,
    ProtocolError,
    Error,
    "The peer broke the wire protocol."
);
/// `accio.InvalidArgument`: an `accio.Error` and a `ValueError` both, so that `except
/// ValueError` catches a negative size as it would from any Python library, and `except
/// accio.Error` still catches everything accio raises. `create_exception!` takes one base
/// only, so the class is made by calling `type` once.
fn invalid_argument_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    static TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    TYPE.get_or_try_init(py, || {
        let bases = PyTuple::new(py, [py.get_type::<Error>(), py.get_type::<PyValueError>()])?;
        let ns = PyDict::new(py);
        ns.set_item("__module__", "accio")?;
        ns.set_item(
            "__doc__",
            "An argument is invalid: out of range (negative, too large), misaligned, or an \
             option none of the listed ones. Also a ValueError.",
        )?;
        py.get_type::<PyType>()
            .call1(("InvalidArgument", bases, ns))?
            .cast_into::<PyType>()
            .map(Bound::unbind)
            .map_err(PyErr::from)
    })
    .map(|t| t.bind(py))
}

/// An `accio.InvalidArgument` carrying `msg`.
fn invalid_arg(msg: impl Into<String>) -> PyErr {
    let msg = msg.into();
    Python::attach(|py| match invalid_argument_type(py) {
        Ok(t) => PyErr::from_type(t.clone(), msg),
        Err(e) => e,
    })
}
create_exception!(accio, IoError, Error, "An operating-system call failed.");
create_exception!(
    accio,
    Untrusted,
    Error,
    "The peer is not who may connect: another user (shm), or no proof of the shared secret (tcp)."
);
create_exception!(
    accio,
    OutOfMemory,
    Error,
    "A request for more memory than the limit allows, refused before any was touched."
);
create_exception!(
    accio,
    MergeFailed,
    Error,
    "The merging file service failed (file, format, merger, sink)."
);

/// The exception for one transport error, carrying its message.
fn transport_err(e: &accio::Error) -> PyErr {
    let msg = e.to_string();
    match e.kind() {
        ErrorKind::PeerGone => PeerGone::new_err(msg),
        ErrorKind::Timeout => Timeout::new_err(msg),
        ErrorKind::BadAddress => BadAddress::new_err(msg),
        ErrorKind::AddrInUse => AddrInUse::new_err(msg),
        ErrorKind::Unsupported => Unsupported::new_err(msg),
        ErrorKind::OutOfWindow => OutOfWindow::new_err(msg),
        ErrorKind::AccessDenied => AccessDenied::new_err(msg),
        ErrorKind::MessageTooLarge => MessageTooLarge::new_err(msg),
        ErrorKind::Protocol => ProtocolError::new_err(msg),
        ErrorKind::InvalidArgument => invalid_arg(msg),
        ErrorKind::Io => IoError::new_err(msg),
        ErrorKind::Untrusted => Untrusted::new_err(msg),
        ErrorKind::OutOfMemory => OutOfMemory::new_err(msg),
        _ => Error::new_err(msg),
    }
}

/// The exception for one merge error: transport errors keep their own class.
fn merge_err(e: &MergeError) -> PyErr {
    match e {
        MergeError::Transport(t) => transport_err(t),
        MergeError::Timeout { .. } => Timeout::new_err(e.to_string()),
        MergeError::TooLarge { .. } => MessageTooLarge::new_err(e.to_string()),
        MergeError::Config(_) => invalid_arg(e.to_string()),
        MergeError::Device(d) => device_err(d),
        _ => MergeFailed::new_err(e.to_string()),
    }
}

/// The CUDA array `obj` holds (`None` for host memory), for `what` to read from or, when
/// `write`, to write into: other device memory is refused, and so is a read-only array
/// given to write into.
fn cuda_block(
    obj: &Bound<'_, PyAny>,
    what: &str,
    write: bool,
) -> PyResult<Option<cuda::DeviceBlock>> {
    let Some(device) = dlpack::device_memory(obj) else {
        return Ok(None);
    };
    if !device.starts_with("CUDA") {
        return Err(PyTypeError::new_err(format!(
            "{what}: {device}: accio reads host memory and CUDA devices"
        )));
    }
    let block = cuda::device_block(obj, what)?;
    if write && block.read_only {
        return Err(PyTypeError::new_err(format!(
            "{what}: the CUDA array is read-only (__cuda_array_interface__)"
        )));
    }
    Ok(Some(block))
}

/// The exception of a GPU failure: no GPU to use is `Unsupported`, memory that is not
/// what it was given as is `InvalidArgument`, a driver call that failed is `accio.Error`.
fn device_err(e: &accio_device::Error) -> PyErr {
    match e {
        e if e.is_unavailable() => Unsupported::new_err(e.to_string()),
        accio_device::Error::NotDeviceMemory { .. } | accio_device::Error::Argument(_) => {
            invalid_arg(e.to_string())
        }
        e => Error::new_err(e.to_string()),
    }
}

/// What a released-GIL body can fail with; turned into an exception once the GIL is back.
enum Failure {
    Device(accio_device::Error),
    Transport(accio::Error),
    Merge(MergeError),
    World(accio_world::WorldError),
    Panic(String),
    Other(PyErr),
}

impl From<accio::Error> for Failure {
    fn from(e: accio::Error) -> Self {
        Failure::Transport(e)
    }
}

impl From<accio_device::Error> for Failure {
    fn from(e: accio_device::Error) -> Self {
        Failure::Device(e)
    }
}

impl From<accio::device::DeviceRmaError> for Failure {
    fn from(e: accio::device::DeviceRmaError) -> Self {
        match e {
            accio::device::DeviceRmaError::Transport(t) => Failure::Transport(t),
            accio::device::DeviceRmaError::Device(d) => Failure::Device(d),
        }
    }
}

impl From<MergeError> for Failure {
    fn from(e: MergeError) -> Self {
        Failure::Merge(e)
    }
}

impl From<Failure> for PyErr {
    fn from(f: Failure) -> PyErr {
        match f {
            Failure::Device(e) => device_err(&e),
            Failure::Transport(e) => transport_err(&e),
            Failure::Merge(e) => merge_err(&e),
            Failure::World(e) => world::world_err(&e),
            Failure::Panic(m) => Error::new_err(format!("internal error (a bug in accio): {m}")),
            Failure::Other(e) => e,
        }
    }
}

/// Runs `f` without the GIL and with panics caught: a panic in Rust code surfaces as
/// `accio.Error`, never as pyo3's `PanicException` (a `BaseException` that `except
/// Exception` would miss).
fn guarded<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T, Failure> + Send) -> PyResult<T> {
    py.detach(|| match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(Failure::Panic(panic_text(&p))),
    })
    .map_err(PyErr::from)
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

/// Exports `len` writable bytes at `ptr` through `obj`'s buffer protocol (a Window, a
/// ProducerBuffer, a grid's array): `PyBuffer_FillInfo` stores a new reference to `obj` in
/// `view.obj`, so every view keeps the object, and with it the memory, alive.
///
/// # Safety
/// `view` is the caller's Py_buffer; the `len` bytes at `ptr` stay valid and writable for
/// as long as `obj` lives.
unsafe fn export_bytes(
    obj: &Bound<'_, PyAny>,
    view: *mut ffi::Py_buffer,
    ptr: *mut c_void,
    len: usize,
    flags: c_int,
    what: &str,
) -> PyResult<()> {
    // SAFETY: the caller's contract.
    let rc = unsafe {
        ffi::PyBuffer_FillInfo(view, obj.as_ptr(), ptr, len as ffi::Py_ssize_t, 0, flags)
    };
    if rc != 0 {
        return Err(PyErr::take(obj.py())
            .unwrap_or_else(|| Error::new_err(format!("{what}: buffer export failed"))));
    }
    Ok(())
}

/// Calls `step(slice)` without the GIL until it returns something other than a timeout,
/// checking for signals between slices; fails with `Timeout` once `total` has passed
/// (`None`: never).
fn sliced<T: Send>(
    py: Python<'_>,
    what: impl FnOnce() -> String,
    total: Option<Duration>,
    mut step: impl FnMut(Duration) -> Result<T, Failure> + Send,
) -> PyResult<T> {
    let start = Instant::now();
    loop {
        let slice = match total {
            // A zero timeout still makes one attempt (a poll).
            Some(t) => t.saturating_sub(start.elapsed()).min(SLICE),
            None => SLICE,
        };
        match guarded(py, || match step(slice) {
            Err(Failure::Transport(e)) if e.kind() == ErrorKind::Timeout => Ok(None),
            Err(Failure::Merge(MergeError::Transport(e))) if e.kind() == ErrorKind::Timeout => {
                Ok(None)
            }
            Err(Failure::World(accio_world::WorldError::Timeout { .. })) => Ok(None),
            other => other.map(Some),
        })? {
            Some(v) => return Ok(v),
            None => {
                py.check_signals()?;
                if let Some(t) = total {
                    if start.elapsed() >= t {
                        break;
                    }
                }
            }
        }
    }
    Err(Timeout::new_err(format!(
        "{} timed out after {:?}",
        what(),
        total.unwrap_or_default()
    )))
}

/// Argument `name` of `op`, seconds (a Python float), as a duration: a negative, NaN or
/// infinite value raises `InvalidArgument` naming both (`None` is how a caller says
/// "forever").
fn secs(op: &str, name: &str, s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s).map_err(|_| {
        invalid_arg(format!(
            "{op}: {name}={s} is not a number of seconds >= 0 (None waits forever)"
        ))
    })
}

/// [`secs`] of an optional timeout.
fn opt_secs(op: &str, name: &str, s: Option<f64>) -> PyResult<Option<Duration>> {
    s.map(|s| secs(op, name, s)).transpose()
}

/// A non-negative integer argument: a size, an offset, a count, a mark. PyO3's own
/// conversion to `u64`/`usize` raises a bare `OverflowError` ("can't convert negative int
/// to unsigned") that names neither the call nor the argument; this one keeps an
/// out-of-range value, and [`Int::u64`] and friends raise `InvalidArgument` naming both. A
/// value that is no integer at all still raises PyO3's `TypeError`, which names the
/// argument ("argument 'length': 'float' object cannot be interpreted as an integer").
struct Int(Result<u64, String>);

impl<'a, 'py> FromPyObject<'a, 'py> for Int {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Int> {
        match obj.extract::<u64>() {
            Ok(v) => Ok(Int(Ok(v))),
            Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => {
                Ok(Int(Err(obj.str()?.to_string())))
            }
            Err(e) => Err(e),
        }
    }
}

impl Int {
    /// The value, at most `max` (`limit` says what bounds it), or `InvalidArgument`
    /// naming `op`, `name` and the value.
    fn at_most(self, op: &str, name: &str, max: u64, limit: &str) -> PyResult<u64> {
        let bad = |v: &str, why: String| invalid_arg(format!("{op}: {name}={v} {why}"));
        match self.0 {
            Ok(v) if v <= max => Ok(v),
            Ok(v) => Err(bad(
                &v.to_string(),
                format!("is larger than {max} ({limit})"),
            )),
            Err(v) if v.starts_with('-') => {
                Err(bad(&v, "is negative; it must be 0 or more".into()))
            }
            Err(v) => Err(bad(&v, format!("is larger than {max} ({limit})"))),
        }
    }

    fn u64(self, op: &str, name: &str) -> PyResult<u64> {
        self.at_most(op, name, u64::MAX, "2**64 - 1")
    }

    fn usize(self, op: &str, name: &str) -> PyResult<usize> {
        // usize is u64 on every target accio builds for; the bound keeps it honest elsewhere.
        let max = u64::try_from(usize::MAX).unwrap_or(u64::MAX);
        Ok(self.at_most(op, name, max, "the address space")? as usize)
    }

    fn u32(self, op: &str, name: &str) -> PyResult<u32> {
        Ok(self.at_most(op, name, u64::from(u32::MAX), "2**32 - 1")? as u32)
    }
}

/// An optional `(offset, value)` word of `fence_signal` on `side` ("local", "remote").
fn signal_arg(side: &str, w: Option<(Int, Int)>) -> PyResult<Option<(u64, u64)>> {
    w.map(|(off, value)| {
        Ok((
            off.u64("fence_signal", &format!("{side} offset"))?,
            value.u64("fence_signal", &format!("{side} value"))?,
        ))
    })
    .transpose()
}

/// A contiguous buffer of a Python object, held until dropped: exported through the
/// buffer protocol, or taken through DLPack from an object that offers only that (a
/// PyTorch CPU tensor).
struct Buf {
    ptr: *mut u8,
    len: usize,
    _hold: Hold,
}

/// What keeps a [`Buf`]'s memory: released (the view) or handed back (the tensor) on drop.
enum Hold {
    View(Box<ffi::Py_buffer>),
    DLPack { _tensor: dlpack::Imported },
}

// SAFETY: the exporter keeps the memory valid and in place until the view is released or
// the tensor handed back (the buffer protocol's and DLPack's promise); the pointer may be
// used from any thread, and the release in `Drop` happens with the GIL held.
unsafe impl Send for Buf {}

impl Buf {
    /// Exports `obj`'s memory as one contiguous byte range (`writable`: for writing into).
    fn get(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Buf> {
        let mut view: Box<ffi::Py_buffer> = Box::new(
            // SAFETY: Py_buffer is a plain C struct; all-zero is its "empty" state, and
            // PyObject_GetBuffer fills it.
            unsafe { std::mem::zeroed() },
        );
        let flags = if writable {
            ffi::PyBUF_SIMPLE | ffi::PyBUF_WRITABLE
        } else {
            ffi::PyBUF_SIMPLE
        };
        // SAFETY: `obj` is a live object (the GIL is held through `Bound`), `view` is a
        // valid Py_buffer to fill. PyBUF_SIMPLE asks for one C-contiguous byte range; an
        // exporter that cannot give one fails with BufferError.
        let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags) };
        if rc == 0 {
            return Ok(Buf {
                ptr: view.buf.cast(),
                len: view.len as usize,
                _hold: Hold::View(view),
            });
        }
        let py = obj.py();
        let cause = PyErr::take(py)
            .map(|e| e.to_string())
            .unwrap_or_else(|| "no buffer".into());
        let name = obj
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        if let Some(device) = dlpack::device_memory(obj) {
            return Err(PyTypeError::new_err(format!(
                "{name} is {device}: accio moves host memory here, and windows in GPU memory \
                 are not built yet; copy it to the host first (cupy.asnumpy(x), x.cpu())"
            )));
        }
        if let Some(t) = dlpack::import(obj, &name)? {
            return Ok(Buf {
                ptr: t.ptr,
                len: t.len,
                _hold: Hold::DLPack { _tensor: t },
            });
        }
        Err(PyTypeError::new_err(format!(
            "expected a contiguous{} buffer (bytes, bytearray, memoryview, NumPy array, a \
             DLPack tensor, accio.Window), got {name}: {cause}",
            if writable { " writable" } else { "" },
        )))
    }

    fn len(&self) -> usize {
        self.len
    }

    fn as_slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: ptr/len describe the held contiguous range, valid until release.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The range, mutable. Only for buffers taken with `writable` (or through DLPack,
    /// whose legacy capsules say nothing of rights).
    #[allow(clippy::mut_from_ref)]
    fn as_mut_slice(&self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: exported writable; Python code racing with the call on the same memory
        // is the caller's business, as with any buffer-protocol consumer.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Hold::View(view) = self {
            Python::attach(|_| {
                // SAFETY: the view was filled by a successful PyObject_GetBuffer and is
                // released once, with the GIL held.
                unsafe { ffi::PyBuffer_Release(&mut **view) };
            });
        }
    }
}

fn flags(sync: bool) -> RmaFlags {
    if sync {
        RmaFlags::SYNC
    } else {
        RmaFlags::ASYNC
    }
}

fn parse_access(s: &str) -> PyResult<Access> {
    match s {
        "r" => Ok(Access::READ),
        "w" => Ok(Access::WRITE),
        "rw" | "wr" => Ok(Access::READ_WRITE),
        "" | "none" => Ok(Access::NONE),
        _ => Err(invalid_arg(format!(
            "access {s:?} is none of \"r\", \"w\", \"rw\", \"none\""
        ))),
    }
}

fn access_text(a: Access) -> &'static str {
    match (a.contains(Access::READ), a.contains(Access::WRITE)) {
        (true, true) => "rw",
        (true, false) => "r",
        (false, true) => "w",
        (false, false) => "none",
    }
}

/// A bound address accepting connections (`accio.listen`).
#[pyclass(module = "accio", frozen)]
struct Listener {
    inner: Box<dyn accio::Listener>,
}

#[pymethods]
impl Listener {
    /// The bound address (with the real port when port 0 was asked for).
    #[getter]
    fn addr(&self) -> String {
        self.inner.local_addr().to_string()
    }

    /// Waits for the next connection, at most `timeout` seconds (None: forever).
    #[pyo3(signature = (timeout=None))]
    fn accept(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Endpoint> {
        let timeout = opt_secs("accept", "timeout", timeout)?;
        let ep = sliced(
            py,
            || format!("accept on {}", self.inner.local_addr()),
            timeout,
            |slice| Ok(self.inner.accept(Some(slice))?),
        )?;
        Ok(Endpoint::new(ep))
    }

    fn __repr__(&self) -> String {
        format!("<accio.Listener {}>", self.inner.local_addr())
    }
}

/// Binds `addr` (`shm://NAME` or `tcp://HOST:PORT`) and returns a Listener.
#[pyfunction]
fn listen(py: Python<'_>, addr: &str) -> PyResult<Listener> {
    let inner = guarded(py, || Ok(accio::listen(addr)?))?;
    Ok(Listener { inner })
}

/// Connects to the listener at `addr`, giving up after `timeout` seconds.
#[pyfunction]
#[pyo3(signature = (addr, timeout=10.0))]
fn connect(py: Python<'_>, addr: &str, timeout: f64) -> PyResult<Endpoint> {
    let t = secs("connect", "timeout", timeout)?;
    // connect has no wait of its own that a slice could bound, so the deadline is handed to
    // the backend whole; Ctrl-C takes effect when it returns.
    let ep = guarded(py, || Ok(accio::connect(addr, t)?))?;
    Ok(Endpoint::new(ep))
}

/// One end of a connection: messages, registered windows, RMA, fences.
#[pyclass(module = "accio")]
struct Endpoint {
    ep: Option<Box<dyn accio::Endpoint>>,
    rx: Mutex<Vec<u8>>,
}

impl Endpoint {
    fn new(ep: Box<dyn accio::Endpoint>) -> Endpoint {
        Endpoint {
            ep: Some(ep),
            rx: Mutex::new(Vec::new()),
        }
    }

    fn ep(&self) -> PyResult<&dyn accio::Endpoint> {
        self.ep
            .as_deref()
            .ok_or_else(|| PeerGone::new_err("endpoint is closed (close() was called on it)"))
    }
}

#[pymethods]
impl Endpoint {
    /// The backend's name ("shm", "tcp").
    #[getter]
    fn backend(&self) -> PyResult<&'static str> {
        Ok(self.ep()?.backend())
    }

    /// This endpoint's own address.
    #[getter]
    fn local_addr(&self) -> PyResult<String> {
        Ok(self.ep()?.local_addr().to_string())
    }

    /// The peer's address.
    #[getter]
    fn peer_addr(&self) -> PyResult<String> {
        Ok(self.ep()?.peer_addr().to_string())
    }

    /// Sends one message: any contiguous buffer (bytes, bytearray, NumPy array, ...).
    fn send(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let ep = self.ep()?;
        if let Ok(b) = data.cast::<PyBytes>() {
            let s = b.as_bytes();
            return guarded(py, || Ok(ep.send(s)?));
        }
        let buf = Buf::get(data, false)?;
        let s = buf.as_slice();
        guarded(py, || Ok(ep.send(s)?))
    }

    /// Receives the next message as bytes, waiting at most `timeout` seconds (None: forever).
    #[pyo3(signature = (timeout=None))]
    fn recv<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyBytes>> {
        let timeout = opt_secs("recv", "timeout", timeout)?;
        let ep = self.ep()?;
        // Never wait for this lock while holding the GIL: its holder needs the GIL back
        // between slices. A second concurrent receiver uses a buffer of its own.
        let (mut guard, mut own) = (self.rx.try_lock().ok(), Vec::new());
        let rx = guard.as_deref_mut().unwrap_or(&mut own);
        let n = sliced(
            py,
            || format!("recv on {}", ep.local_addr()),
            timeout,
            |slice| Ok(ep.recv_timeout(rx, Some(slice))?),
        )?;
        Ok(PyBytes::new(py, &rx[..n]))
    }

    /// Receives the next message into `buffer` (writable, contiguous) and returns its length:
    /// over shm copied once, from the ring straight into `buffer`. A message longer than the
    /// buffer raises MessageTooLarge and is lost.
    #[pyo3(signature = (buffer, timeout=None))]
    fn recv_into(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        timeout: Option<f64>,
    ) -> PyResult<usize> {
        let timeout = opt_secs("recv_into", "timeout", timeout)?;
        let ep = self.ep()?;
        let dst = Buf::get(buffer, true)?;
        let (len, d) = (dst.len(), dst.as_mut_slice());
        // Straight into the caller's buffer (over shm one copy, from the ring).
        match sliced(
            py,
            || format!("recv on {}", ep.local_addr()),
            timeout,
            |slice| Ok(ep.recv_into(d, Some(slice))?),
        ) {
            Err(e) if e.is_instance_of::<MessageTooLarge>(py) => {
                Err(MessageTooLarge::new_err(format!(
                    "{}: it does not fit the {len}-byte buffer of recv_into (the message is \
                     consumed)",
                    e.value(py)
                )))
            }
            r => r,
        }
    }

    /// Registers `length` bytes of fresh zeroed memory as a window the peer may access
    /// with `access` ("r", "w", "rw", "none").
    #[pyo3(signature = (length, access="rw"))]
    fn register(&self, py: Python<'_>, length: Int, access: &str) -> PyResult<Window> {
        let length = length.usize("register", "length")?;
        let ep = self.ep()?;
        let a = parse_access(access)?;
        let w = guarded(py, || Ok(ep.register(length, a)?))?;
        Ok(Window { inner: w })
    }

    /// Registers GPU memory as a window the peer may access with `access`: a C-contiguous
    /// CUDA array (CuPy, PyTorch: `__cuda_array_interface__` or DLPack), whose memory the
    /// window uses in place and keeps alive, or an int, a length of fresh zeroed device
    /// memory on GPU `gpu`. Every RMA call reaches it, from the peer and from here, through
    /// the driver (the `cuda` build). Returns a DeviceWindow, whose `__dlpack__` lets
    /// `torch.from_dlpack(w)` or `cupy.from_dlpack(w)` view the memory without a copy.
    #[pyo3(signature = (memory, access="rw", gpu=0))]
    fn register_device(
        &self,
        py: Python<'_>,
        memory: &Bound<'_, PyAny>,
        access: &str,
        gpu: u32,
    ) -> PyResult<DeviceWindow> {
        let a = parse_access(access)?;
        let ep = self.ep()?;
        let mem: Arc<dyn accio::DeviceMemory> = if let Ok(len) = memory.extract::<Int>() {
            let len = len.usize("register_device", "memory")?;
            Arc::new(guarded(py, || {
                Ok(accio::device::DeviceBuffer::zeroed(gpu, len)?)
            })?)
        } else {
            let Some(block) = cuda_block(
                memory,
                "Endpoint.register_device",
                a.contains(Access::WRITE),
            )?
            else {
                return Err(PyTypeError::new_err(
                    "Endpoint.register_device: memory must be a CUDA array or a length (an int); \
                     host memory is registered with register_view or register",
                ));
            };
            let Some(range) = block.range else {
                return Err(invalid_arg("Endpoint.register_device: the array is empty"));
            };
            // The peer may reach it as soon as it learns the offset: what was queued on
            // the array's GPU is done first.
            guarded(py, || Ok(accio::device::synchronize(range.ordinal())?))?;
            Arc::new(accio_device::ForeignMemory::new(
                range,
                Keep {
                    _block: block,
                    _array: memory.clone().unbind(),
                },
            ))
        };
        let w = guarded(py, || Ok(ep.register_device(mem, a)?))?;
        Ok(DeviceWindow { inner: w })
    }

    /// Withdraws a window: a Window, or its offset (`Window.offset`).
    fn unregister(&self, py: Python<'_>, window: &Bound<'_, PyAny>) -> PyResult<()> {
        let off = window_offset(window)?;
        let ep = self.ep()?;
        guarded(py, || Ok(ep.unregister(off)?))
    }

    /// Copies `length` bytes at `local_offset` (in this endpoint's registered address space:
    /// a local `Window.offset` plus a byte position in it) to the peer's `remote_offset` (a
    /// peer window's offset plus a byte position in it).
    #[pyo3(signature = (local_offset, length, remote_offset, sync=false))]
    fn write_to(
        &self,
        py: Python<'_>,
        local_offset: Int,
        length: Int,
        remote_offset: Int,
        sync: bool,
    ) -> PyResult<()> {
        let local_offset = local_offset.u64("write_to", "local_offset")?;
        let length = length.usize("write_to", "length")?;
        let remote_offset = remote_offset.u64("write_to", "remote_offset")?;
        let ep = self.ep()?;
        guarded(py, || {
            Ok(ep.write_to(local_offset, length, remote_offset, flags(sync))?)
        })
    }

    /// Copies `length` bytes at the peer's `remote_offset` to `local_offset` (both offsets
    /// in registered address spaces, as in `write_to`).
    #[pyo3(signature = (local_offset, length, remote_offset, sync=false))]
    fn read_from(
        &self,
        py: Python<'_>,
        local_offset: Int,
        length: Int,
        remote_offset: Int,
        sync: bool,
    ) -> PyResult<()> {
        let local_offset = local_offset.u64("read_from", "local_offset")?;
        let length = length.usize("read_from", "length")?;
        let remote_offset = remote_offset.u64("read_from", "remote_offset")?;
        let ep = self.ep()?;
        guarded(py, || {
            Ok(ep.read_from(local_offset, length, remote_offset, flags(sync))?)
        })
    }

    /// Copies any contiguous buffer (a NumPy array, bytes, ...) to the peer's
    /// `remote_offset` (in its registered address space), straight from its memory. A
    /// C-contiguous CUDA array (CuPy, PyTorch: `__cuda_array_interface__` or DLPack) is
    /// copied from GPU memory through pinned staging, the copy engine filling one chunk
    /// while the transport sends the other (work queued on its GPU is waited for first).
    #[pyo3(signature = (buffer, remote_offset, sync=false))]
    fn vwrite_to(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        remote_offset: Int,
        sync: bool,
    ) -> PyResult<()> {
        let remote_offset = remote_offset.u64("vwrite_to", "remote_offset")?;
        let ep = self.ep()?;
        if let Some(block) = cuda_block(buffer, "Endpoint.vwrite_to", false)? {
            return guarded(py, || match block.range {
                Some(r) => {
                    accio::device::synchronize(r.ordinal())?;
                    Ok(ep.vwrite_device(&r, remote_offset, flags(sync))?)
                }
                None => Ok(ep.vwrite_to(&[], remote_offset, flags(sync))?),
            });
        }
        let src = Buf::get(buffer, false)?;
        let s = src.as_slice();
        guarded(py, || Ok(ep.vwrite_to(s, remote_offset, flags(sync))?))
    }

    /// Fills a writable contiguous buffer from the peer's `remote_offset` (in its registered
    /// address space), straight into its memory. A C-contiguous CUDA array is filled
    /// through pinned staging, the transport receiving one chunk while the copy engine
    /// moves the other to the GPU; the bytes are in device memory when the call returns.
    #[pyo3(signature = (buffer, remote_offset, sync=false))]
    fn vread_from(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        remote_offset: Int,
        sync: bool,
    ) -> PyResult<()> {
        let remote_offset = remote_offset.u64("vread_from", "remote_offset")?;
        let ep = self.ep()?;
        if let Some(block) = cuda_block(buffer, "Endpoint.vread_from", true)? {
            return guarded(py, || match block.range {
                Some(r) => {
                    // The array's producer may still use its memory on a stream of its own.
                    accio::device::synchronize(r.ordinal())?;
                    Ok(ep.vread_device(&r, remote_offset, flags(sync))?)
                }
                None => Ok(ep.vread_from(&mut [], remote_offset, flags(sync))?),
            });
        }
        let dst = Buf::get(buffer, true)?;
        let d = dst.as_mut_slice();
        guarded(py, || Ok(ep.vread_from(d, remote_offset, flags(sync))?))
    }

    /// Marks every RMA issued so far; returns the mark for fence_wait.
    fn fence_mark(&self, py: Python<'_>) -> PyResult<u64> {
        let ep = self.ep()?;
        Ok(guarded(py, || Ok(ep.fence_mark()?))?.0)
    }

    /// Waits until every RMA named by `mark` (from this endpoint's fence_mark) has
    /// completed at the peer. A mark never issued raises InvalidArgument naming the latest.
    fn fence_wait(&self, py: Python<'_>, mark: Int) -> PyResult<()> {
        let mark = mark.u64("fence_wait", "mark")?;
        let ep = self.ep()?;
        guarded(py, || Ok(ep.fence_wait(accio::Mark(mark))?))
    }

    /// After every earlier RMA completed, stores `local=(offset, value)` into a local
    /// window word and `remote=(offset, value)` into a peer window word (each optional).
    /// Offsets are in the registered address spaces (8-byte aligned): the waiting side
    /// calls `Window.wait_u64` with the same offset.
    #[pyo3(signature = (local=None, remote=None))]
    fn fence_signal(
        &self,
        py: Python<'_>,
        local: Option<(Int, Int)>,
        remote: Option<(Int, Int)>,
    ) -> PyResult<()> {
        let local = signal_arg("local", local)?;
        let remote = signal_arg("remote", remote)?;
        let ep = self.ep()?;
        guarded(py, || Ok(ep.fence_signal(local, remote)?))
    }

    /// Closes the connection; the peer's blocked and later calls raise PeerGone.
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        if let Some(ep) = self.ep.take() {
            guarded(py, move || {
                drop(ep);
                Ok(())
            })?;
        }
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        match &self.ep {
            Some(ep) => format!("<accio.Endpoint {} -> {}>", ep.local_addr(), ep.peer_addr()),
            None => "<accio.Endpoint closed>".into(),
        }
    }
}

fn window_offset(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    if let Ok(w) = obj.cast::<Window>() {
        return Ok(w.get().inner.offset());
    }
    if let Ok(w) = obj.cast::<DeviceWindow>() {
        return Ok(w.get().inner.offset());
    }
    match obj.extract::<Int>() {
        Ok(i) => i.u64("unregister", "window"),
        Err(_) => Err(PyTypeError::new_err(format!(
            "unregister: window must be an accio.Window or its offset (an int), not {}",
            obj.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))),
    }
}

/// What keeps a CUDA array registered as a window alive: the array object (and the DLPack
/// tensor taken from it, handed back when this drops).
struct Keep {
    _block: cuda::DeviceBlock,
    _array: Py<PyAny>,
}

// SAFETY: the Python object is only dropped (pyo3 defers that to a thread holding the
// GIL), and the DLPack tensor is handed back under the GIL (`Imported`'s drop).
unsafe impl Send for Keep {}
// SAFETY: nothing is reached through a shared reference.
unsafe impl Sync for Keep {}

/// A registered window of GPU memory (`Endpoint.register_device`): the peer reaches it by
/// RMA at `offset` as any window; this process views it with `torch.from_dlpack(w)` or
/// `cupy.from_dlpack(w)` (no copy), or copies in and out with RMA. The memory lives as long
/// as the DeviceWindow, its endpoint's registration, or any view of it.
#[pyclass(module = "accio", frozen)]
struct DeviceWindow {
    inner: accio::DeviceWindow,
}

#[pymethods]
impl DeviceWindow {
    /// Offset of the window in its endpoint's registered address space.
    #[getter]
    fn offset(&self) -> u64 {
        self.inner.offset()
    }

    /// Rights the peer has on the window ("r", "w", "rw", "none").
    #[getter]
    fn access(&self) -> &'static str {
        access_text(self.inner.access())
    }

    /// The GPU the memory is on.
    #[getter]
    fn gpu(&self) -> u32 {
        self.inner.memory().device()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Exports the memory as a DLPack capsule of unsigned bytes on its GPU (`kDLCUDA`):
    /// a view, no copy. RMA calls into it are complete when they return, so any `stream`
    /// may read it at once.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        slf: &Bound<'_, Self>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let w = &slf.get().inner;
        let mem = dlpack::Exported {
            ptr: w.memory().address() as *mut c_void,
            len: w.len(),
            device: (dlpack::DEVICE_CUDA, w.memory().device() as i32),
            read_only: false,
        };
        let asked = dlpack::Asked {
            stream,
            max_version,
            dl_device,
            copy,
        };
        // SAFETY: the memory stays allocated as long as the DeviceWindow lives, which the
        // capsule keeps alive.
        unsafe { dlpack::export(slf.as_any(), "DeviceWindow", mem, asked) }
    }

    /// Where the memory is, for DLPack: `(2, gpu)`, CUDA device memory (`kDLCUDA`).
    fn __dlpack_device__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        dlpack::device_tuple(
            py,
            (dlpack::DEVICE_CUDA, self.inner.memory().device() as i32),
        )
    }

    fn __repr__(&self) -> String {
        format!(
            "<accio.DeviceWindow offset={:#x} len={} access={} gpu={}>",
            self.inner.offset(),
            self.inner.len(),
            access_text(self.inner.access()),
            self.inner.memory().device()
        )
    }
}

/// Registered memory: the peer reaches it by RMA at `offset`; this process reads and writes
/// it through the buffer protocol (`numpy.frombuffer(window, dtype)` is a zero-copy view,
/// `memoryview(window)` too). The memory lives as long as the Window or any view of it.
///
/// Its word methods (`load_u64`, `store_u64`, `wait_u64`) take offsets in the registered
/// address space, `window.offset + i` for byte `i`, as every Endpoint call does: the offset
/// a peer's `fence_signal` stores at is the offset this side waits at. A byte position
/// passed by mistake is below `window.offset` (at least 1 MiB), so it fails with
/// `OutOfWindow` saying how to write it instead of reaching another word.
#[pyclass(module = "accio", frozen)]
struct Window {
    inner: accio::Window,
}

impl Window {
    /// The byte position in this window of the 8-byte word at registered `offset`, or
    /// `OutOfWindow`/`InvalidArgument` naming `op`, the offset and the window.
    fn word(&self, op: &str, offset: u64) -> PyResult<usize> {
        let (base, len) = (self.inner.offset(), self.inner.len() as u64);
        let end = base + len;
        let rel = offset.wrapping_sub(base);
        if offset < base || rel > len.saturating_sub(8) || len < 8 {
            let hint = if offset < base && offset < len {
                format!(
                    "; Window methods take offsets in the registered address space, as \
                     fence_signal does: byte {offset:#x} of this window is at offset {:#x} \
                     (window.offset + {offset:#x})",
                    base + offset
                )
            } else {
                String::new()
            };
            return Err(OutOfWindow::new_err(format!(
                "{op}: offset {offset:#x} + 8 is not inside window {base:#x}..{end:#x}{hint}"
            )));
        }
        if !offset.is_multiple_of(8) {
            return Err(invalid_arg(format!(
                "{op}: offset {offset:#x} is not 8-byte aligned"
            )));
        }
        Ok(rel as usize)
    }
}

#[pymethods]
impl Window {
    /// Offset of the window in its endpoint's registered address space (send it to the
    /// peer: its RMA calls address the window by it).
    #[getter]
    fn offset(&self) -> u64 {
        self.inner.offset()
    }

    /// Rights the peer has on the window ("r", "w", "rw", "none").
    #[getter]
    fn access(&self) -> &'static str {
        access_text(self.inner.access())
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Loads the 8-byte word at `offset` (registered address space: `window.offset + i`;
    /// 8-byte aligned) with acquire ordering.
    fn load_u64(&self, offset: Int) -> PyResult<u64> {
        let at = self.word("load_u64", offset.u64("load_u64", "offset")?)?;
        self.inner.load_u64(at).map_err(|e| transport_err(&e))
    }

    /// Stores `value` into the 8-byte word at `offset` (registered address space:
    /// `window.offset + i`; 8-byte aligned) with release ordering.
    fn store_u64(&self, offset: Int, value: Int) -> PyResult<()> {
        let at = self.word("store_u64", offset.u64("store_u64", "offset")?)?;
        let value = value.u64("store_u64", "value")?;
        self.inner
            .store_u64(at, value)
            .map_err(|e| transport_err(&e))
    }

    /// Waits until the 8-byte word at `offset` (registered address space: the offset a
    /// peer's fence_signal names, `window.offset + i`) equals `value`, at most `timeout`
    /// seconds (None: forever).
    #[pyo3(signature = (offset, value, timeout=None))]
    fn wait_u64(
        &self,
        py: Python<'_>,
        offset: Int,
        value: Int,
        timeout: Option<f64>,
    ) -> PyResult<()> {
        let offset = offset.u64("wait_u64", "offset")?;
        let at = self.word("wait_u64", offset)?;
        let value = value.u64("wait_u64", "value")?;
        let timeout = opt_secs("wait_u64", "timeout", timeout)?;
        let w = &self.inner;
        sliced(
            py,
            || {
                format!(
                    "wait_u64 for {value} at offset {offset:#x} of window {:#x}..{:#x}",
                    w.offset(),
                    w.offset() + w.len() as u64
                )
            },
            timeout,
            |slice| Ok(w.wait_u64(at, value, Some(slice))?),
        )
    }

    /// Exports the window's memory, writable, as unsigned bytes.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let w = &slf.get().inner;
        // SAFETY: the memory stays mapped as long as the Window lives; `view` is the
        // caller's.
        unsafe {
            export_bytes(
                slf.as_any(),
                view,
                w.as_ptr() as *mut c_void,
                w.len(),
                flags,
                "window",
            )
        }
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}

    /// Exports the window's memory as a DLPack capsule, a 1-D array of unsigned bytes
    /// (`numpy.from_dlpack(window)`, `torch.from_dlpack(window)`: a view, no copy). The
    /// memory lives as long as any array made from it.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        slf: &Bound<'_, Self>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let w = &slf.get().inner;
        let mem = dlpack::Exported {
            ptr: w.as_ptr().cast(),
            len: w.len(),
            device: (dlpack::DEVICE_CPU, 0),
            read_only: !w.view().region().is_writable(),
        };
        let asked = dlpack::Asked {
            stream,
            max_version,
            dl_device,
            copy,
        };
        // SAFETY: the memory stays mapped as long as the Window lives, which the capsule
        // keeps alive; it is writable unless its region says otherwise.
        unsafe { dlpack::export(slf.as_any(), "Window", mem, asked) }
    }

    /// Where the memory is, for DLPack: `(1, 0)`, host memory (`kDLCPU`).
    fn __dlpack_device__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        dlpack::device_tuple(py, (dlpack::DEVICE_CPU, 0))
    }

    fn __repr__(&self) -> String {
        format!(
            "<accio.Window offset={:#x} len={} access={}>",
            self.inner.offset(),
            self.inner.len(),
            access_text(self.inner.access())
        )
    }
}

// ---- Arrow C data interface ---------------------------------------------------------------

/// The capsule pointer named `name` of a PyCapsule.
fn capsule_ptr(cap: &Bound<'_, PyAny>, name: &CStr) -> PyResult<*mut c_void> {
    let cap = cap
        .cast::<PyCapsule>()
        .map_err(|_| PyTypeError::new_err("the Arrow C data interface gave no PyCapsule"))?;
    let p = cap.pointer_checked(Some(name))?;
    Ok(p.as_ptr())
}

/// Imports a pyarrow RecordBatch (or anything with `__arrow_c_array__` giving a struct
/// array) through the Arrow PyCapsule interface: no copy, the Rust arrays borrow pyarrow's
/// buffers until dropped.
fn import_batch(obj: &Bound<'_, PyAny>) -> PyResult<RecordBatch> {
    let caps = obj.call_method0("__arrow_c_array__")?;
    let (schema_cap, array_cap): (Bound<'_, PyAny>, Bound<'_, PyAny>) = caps.extract()?;
    let schema_ptr = capsule_ptr(&schema_cap, c"arrow_schema")? as *const FFI_ArrowSchema;
    let array_ptr = capsule_ptr(&array_cap, c"arrow_array")? as *mut FFI_ArrowArray;
    // SAFETY: the capsules hold a valid ArrowArray / ArrowSchema (the PyCapsule interface's
    // contract). `from_raw` moves the array out and leaves a released one behind, so the
    // capsule's destructor does not free what we now own; the schema is only borrowed
    // while the capsule is alive (it is, through `schema_cap`).
    let data = unsafe {
        let array = FFI_ArrowArray::from_raw(array_ptr);
        from_ffi(array, &*schema_ptr)
    }
    .map_err(|e| PyValueError::new_err(format!("cannot import the arrow batch: {e}")))?;
    if !matches!(data.data_type(), arrow_schema::DataType::Struct(_)) {
        return Err(PyTypeError::new_err(format!(
            "write takes a RecordBatch (a struct array), not an arrow array of {}",
            data.data_type()
        )));
    }
    let st = catch_unwind(AssertUnwindSafe(|| StructArray::from(data))).map_err(|p| {
        Error::new_err(format!(
            "internal error (a bug in accio): {}",
            panic_text(&p)
        ))
    })?;
    if st.null_count() > 0 {
        return Err(PyValueError::new_err(
            "an arrow batch with null top-level rows cannot be written",
        ));
    }
    Ok(RecordBatch::from(st))
}

/// Imports a pyarrow Schema through `__arrow_c_schema__`.
fn import_schema(obj: &Bound<'_, PyAny>) -> PyResult<Schema> {
    let cap = obj.call_method0("__arrow_c_schema__")?;
    let p = capsule_ptr(&cap, c"arrow_schema")? as *const FFI_ArrowSchema;
    // SAFETY: a valid ArrowSchema owned by the capsule, alive while `cap` is.
    let ffi_schema = unsafe { &*p };
    Schema::try_from(ffi_schema)
        .map_err(|e| PyValueError::new_err(format!("cannot import the arrow schema: {e}")))
}

// ---- merging ----------------------------------------------------------------------------------

/// A merging file service: listens on `addr`, receives blocks from any number of
/// Producers (threads or processes) and writes them into one file.
#[pyclass(module = "accio", frozen)]
struct Merger {
    inner: Mutex<Option<accio_merge::Merger>>,
    addr: String,
    path: String,
}

#[pymethods]
impl Merger {
    /// Starts a merger on `addr` writing `path`.
    ///
    /// `format`: "container" (accio's crash-safe container, any bytes), "arrow" (an Arrow
    /// IPC file) or "parquet"; the tabular formats need `schema` (a pyarrow Schema) and
    /// take RecordBatches of it. `budget`: bytes of slot memory; `slot_bytes`: the largest
    /// block; `credit`: slots one producer may hold; `sync`: "close", "never", "commit".
    #[new]
    #[pyo3(signature = (addr, path, *, format="container", schema=None, budget=None, slot_bytes=None, credit=None, sync="close"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        addr: &str,
        path: std::path::PathBuf,
        format: &str,
        schema: Option<&Bound<'_, PyAny>>,
        budget: Option<Int>,
        slot_bytes: Option<Int>,
        credit: Option<Int>,
        sync: &str,
    ) -> PyResult<Merger> {
        let budget = budget.map(|b| b.usize("Merger", "budget")).transpose()?;
        let slot_bytes = slot_bytes
            .map(|b| b.usize("Merger", "slot_bytes"))
            .transpose()?;
        let credit = credit.map(|c| c.u32("Merger", "credit")).transpose()?;
        let schema = match (format, schema) {
            ("container", None) => None,
            ("container", Some(_)) => {
                return Err(invalid_arg(
                    "a schema is only for format=\"arrow\" or \"parquet\"",
                ))
            }
            ("arrow" | "parquet", Some(s)) => Some(Arc::new(import_schema(s)?)),
            ("arrow" | "parquet", None) => {
                return Err(invalid_arg(format!(
                    "format={format:?} needs schema= (a pyarrow Schema)"
                )))
            }
            _ => {
                return Err(invalid_arg(format!(
                    "format {format:?} is none of \"container\", \"arrow\", \"parquet\""
                )))
            }
        };
        let policy = match sync {
            "close" => accio_merge::SyncPolicy::OnClose,
            "never" => accio_merge::SyncPolicy::Never,
            "commit" => accio_merge::SyncPolicy::EveryCommit,
            _ => {
                return Err(invalid_arg(format!(
                    "sync {sync:?} is none of \"close\", \"never\", \"commit\""
                )))
            }
        };
        let fmt = format.to_string();
        let p = path.clone();
        let addr_s = addr.to_string();
        let m = guarded(py, move || {
            let sink: Box<dyn Sink> = match (fmt.as_str(), schema) {
                ("arrow", Some(s)) => Box::new(ArrowIpcSink::create(&p, s)?),
                ("parquet", Some(s)) => {
                    Box::new(ParquetSink::create(&p, s, ParquetOptions::default())?)
                }
                _ => Box::new(ContainerSink::create(&p, ContainerOptions::default())?),
            };
            let mut b = accio_merge::Merger::builder().sync(policy);
            if let Some(x) = budget {
                b = b.budget(x);
            }
            if let Some(x) = slot_bytes {
                b = b.slot_bytes(x);
            }
            if let Some(x) = credit {
                b = b.credit(x);
            }
            Ok(b.listen(&addr_s, sink)?)
        })?;
        Ok(Merger {
            addr: m.addr().to_string(),
            inner: Mutex::new(Some(m)),
            path: path.display().to_string(),
        })
    }

    /// The address producers connect to (with the real port for tcp://...:0).
    #[getter]
    fn addr(&self) -> String {
        self.addr.clone()
    }

    /// The output file.
    #[getter]
    fn path(&self) -> String {
        self.path.clone()
    }

    /// Counters: active, finished, lost producers, blocks and bytes written, ...
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let m = g
            .as_ref()
            .ok_or_else(|| Error::new_err("merger is closed"))?;
        stats_dict(py, &m.stats())
    }

    /// Waits until `producers` producers have finished (or been lost), at most `timeout`
    /// seconds; returns the stats.
    #[pyo3(signature = (producers, timeout=None))]
    fn wait_done<'py>(
        &self,
        py: Python<'py>,
        producers: Int,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let producers = producers.usize("wait_done", "producers")?;
        let timeout = opt_secs("wait_done", "timeout", timeout)?;
        let st = sliced(
            py,
            || format!("waiting for {producers} producers of merger {}", self.addr),
            timeout,
            |slice| {
                let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
                let m = g
                    .as_ref()
                    .ok_or_else(|| Failure::Other(Error::new_err("merger is closed")))?;
                Ok(m.wait_done(producers, slice)?)
            },
        )?;
        stats_dict(py, &st)
    }

    /// Waits for every connected producer to finish, writes the index (or footer) and
    /// closes the file. Returns a summary dict (blocks, payload_bytes, file_bytes, rows,
    /// stats). `patience` (seconds) bounds the wait for producers that never finish.
    #[pyo3(signature = (patience=None))]
    fn close<'py>(&self, py: Python<'py>, patience: Option<f64>) -> PyResult<Bound<'py, PyDict>> {
        // Checked before the merger is taken: a bad argument leaves it open.
        let patience = opt_secs("close", "patience", patience)?;
        let m = self
            .inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| Error::new_err(format!("merger {} is already closed", self.addr)))?;
        let s = guarded(py, move || {
            Ok(match patience {
                Some(p) => m.close_within(p)?,
                None => m.close()?,
            })
        })?;
        let d = PyDict::new(py);
        d.set_item("blocks", s.sink.blocks)?;
        d.set_item("payload_bytes", s.sink.payload_bytes)?;
        d.set_item("file_bytes", s.sink.file_bytes)?;
        d.set_item("rows", s.sink.rows)?;
        d.set_item("stats", stats_dict(py, &s.stats)?)?;
        Ok(d)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        let open = self
            .inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some();
        if open {
            self.close(py, None)?;
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("<accio.Merger {} -> {}>", self.addr, self.path)
    }
}

fn stats_dict<'py>(py: Python<'py>, s: &accio_merge::MergerStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("active", s.active)?;
    d.set_item("finished", s.finished)?;
    d.set_item("lost", s.lost)?;
    d.set_item("dropped", s.dropped)?;
    d.set_item("blocks", s.blocks)?;
    d.set_item("bytes", s.bytes)?;
    d.set_item("slots", s.slots)?;
    d.set_item("peak_slots", s.peak_slots)?;
    Ok(d)
}

/// One producer's connection to a Merger. Open one per thread or process (they are
/// cheap); calls on one Producer from several threads take turns.
#[pyclass(module = "accio", frozen)]
struct Producer {
    inner: Mutex<Option<accio_merge::Producer>>,
    id: u32,
    slot_bytes: usize,
    /// A `ProducerBuffer` is out: it borrows the producer in `inner`, which nothing else
    /// may touch (or move) until the buffer is committed or given back.
    lent: AtomicBool,
}

impl Producer {
    /// Refused while a buffer is out, naming the producer.
    fn not_lent(&self) -> Result<(), Failure> {
        if self.lent.load(Ordering::Acquire) {
            return Err(Failure::Other(Error::new_err(format!(
                "producer {}: a buffer is out (Producer.buffer()); commit or release it first",
                self.id
            ))));
        }
        Ok(())
    }

    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut accio_merge::Producer) -> Result<T, Failure> + Send,
    ) -> PyResult<T> {
        guarded(py, || {
            let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            self.not_lent()?;
            match g.as_mut() {
                Some(p) => f(p),
                None => Err(Failure::Other(Error::new_err("producer is finished"))),
            }
        })
    }

    /// The producer, taken out to finish or drop it; refused while a buffer is out.
    fn take(&self) -> Result<Option<accio_merge::Producer>, Failure> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        self.not_lent()?;
        Ok(g.take())
    }
}

#[pymethods]
impl Producer {
    /// Connects to the merger at `addr`, waiting at most `timeout` seconds.
    #[new]
    #[pyo3(signature = (addr, timeout=10.0))]
    fn new(py: Python<'_>, addr: &str, timeout: f64) -> PyResult<Producer> {
        let opts = accio_merge::ProducerOptions {
            timeout: secs("Producer", "timeout", timeout)?,
            ..Default::default()
        };
        let p = guarded(py, || Ok(accio_merge::Producer::connect_with(addr, opts)?))?;
        Ok(Producer {
            id: p.id(),
            slot_bytes: p.buffer_bytes(),
            inner: Mutex::new(Some(p)),
            lent: Default::default(),
        })
    }

    /// This producer's id in the output file.
    #[getter]
    fn id(&self) -> u32 {
        self.id
    }

    /// The largest block `write` takes (the merger's slot size).
    #[getter]
    fn max_block(&self) -> usize {
        self.slot_bytes
    }

    /// Writes one block and returns its sequence number: a pyarrow RecordBatch (Arrow
    /// mergers), any contiguous buffer (bytes, bytearray, NumPy array, memoryview), or a
    /// C-contiguous CUDA array (CuPy, PyTorch: `__cuda_array_interface__` or DLPack),
    /// copied from GPU memory through pinned staging (no host copy in Python; work queued
    /// on its GPU is waited for first).
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<u64> {
        if data.hasattr("__arrow_c_array__")? {
            let batch = import_batch(data)?;
            return self.with(py, move |p| Ok(p.write_batch(&batch)?));
        }
        if let Some(block) = cuda_block(data, "Producer.write", false)? {
            let range = block.range;
            return self.with(py, move |p| match range {
                Some(r) => {
                    accio_device::synchronize(r.ordinal()).map_err(MergeError::from)?;
                    Ok(p.write_device(&r)?)
                }
                None => Ok(p.write_block(&[])?),
            });
        }
        let buf = Buf::get(data, false)?;
        let s = buf.as_slice();
        self.with(py, move |p| Ok(p.write_block(s)?))
    }

    /// Lends this producer a buffer of `max_block` bytes to fill in place (on shm through
    /// the merger's slots, the merger's own memory: the block is never copied by the
    /// producer). View it with NumPy (`numpy.frombuffer(buf, dtype)`), fill it, let the
    /// views go, then `buf.commit(length)`. Other calls on the producer are refused until
    /// then. See `ProducerBuffer`.
    fn buffer(slf: &Bound<'_, Self>) -> PyResult<ProducerBuffer> {
        let py = slf.py();
        let me = slf.get();
        let mut g = me.inner.lock().unwrap_or_else(|p| p.into_inner());
        me.not_lent()?;
        let p = g
            .as_mut()
            .ok_or_else(|| Error::new_err(format!("producer {} is finished", me.id)))?;
        let p: *mut accio_merge::Producer = p;
        drop(g);
        me.lent.store(true, Ordering::Release);
        // SAFETY: the producer lives in this Producer's `inner` (inside the Python object,
        // which never moves), kept alive by the buffer's reference to the object. While
        // `lent` is set, every other access locks `inner` and is refused before it touches
        // the producer, and nothing takes it out (`take`), so the buffer's borrow is the
        // only one until the buffer commits or drops, which clears `lent`.
        let prod: &'static mut accio_merge::Producer = unsafe { &mut *p };
        let lent = guarded(py, move || Ok(prod.buffer()?));
        let mut buf = match lent {
            Ok(b) => b,
            Err(e) => {
                me.lent.store(false, Ordering::Release);
                return Err(e);
            }
        };
        let slice = buf.as_mut_slice();
        let (ptr, cap) = (slice.as_mut_ptr() as usize, slice.len());
        Ok(ProducerBuffer {
            producer: slf.clone().unbind(),
            buf: Mutex::new(Some(buf)),
            ptr,
            cap,
            exports: Default::default(),
        })
    }

    /// Appends one record (bytes-like); records are packed into blocks for you.
    fn write_record(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let buf = Buf::get(data, false)?;
        let s = buf.as_slice();
        self.with(py, move |p| Ok(p.write_record(s)?))
    }

    /// Commits the block of packed records now.
    fn flush_records(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |p| Ok(p.flush_records()?))
    }

    /// Waits until the merger has the producer's every block in the file; returns how many.
    fn wait_acked(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |p| Ok(p.wait_acked()?))
    }

    /// Flushes records, waits until every block is in the file and says goodbye. Returns
    /// {"id", "blocks", "bytes"}.
    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let p = self
            .take()?
            .ok_or_else(|| Error::new_err(format!("producer {} is already finished", self.id)))?;
        let s = guarded(py, move || Ok(p.finish()?))?;
        let d = PyDict::new(py);
        d.set_item("id", s.id)?;
        d.set_item("blocks", s.blocks)?;
        d.set_item("bytes", s.bytes)?;
        Ok(d)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Finishes on a normal exit; on an exception the connection is dropped (the merger
    /// keeps what was committed).
    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let open = self
            .inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some();
        if open {
            if exc_type.is_none_or(|t| t.is_none()) {
                self.finish(py)?;
            } else if let Ok(p) = self.take() {
                // (With a buffer still out, the connection closes when both are gone.)
                guarded(py, move || {
                    drop(p);
                    Ok(())
                })?;
            }
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("<accio.Producer id={}>", self.id)
    }
}

/// A buffer a Producer lends (`Producer.buffer()`): writable memory of `capacity` bytes
/// with the buffer protocol. `commit(length)` writes its first `length` bytes as one block;
/// `release()` gives it back unused (so does leaving a `with` block without a commit).
/// Views of it (NumPy arrays, memoryviews) must be gone before either: a view kept after
/// would write into memory that is then another block's, so both raise `BufferError`
/// while one is alive.
#[pyclass(module = "accio", frozen)]
struct ProducerBuffer {
    producer: Py<Producer>,
    buf: Mutex<Option<accio_merge::Buffer<'static>>>,
    ptr: usize,
    cap: usize,
    exports: AtomicUsize,
}

impl ProducerBuffer {
    /// The lent buffer, taken out to commit or release it: refused while views are alive.
    fn take(&self, op: &str) -> PyResult<accio_merge::Buffer<'static>> {
        let n = self.exports.load(Ordering::Acquire);
        if n > 0 {
            return Err(pyo3::exceptions::PyBufferError::new_err(format!(
                "ProducerBuffer.{op}: {n} view(s) of the buffer are alive (a NumPy array, a \
                 memoryview); delete them first, or they would write into another block"
            )));
        }
        let b = self.buf.lock().unwrap_or_else(|p| p.into_inner()).take();
        b.ok_or_else(|| {
            Error::new_err(format!(
                "ProducerBuffer.{op}: producer {}'s buffer was already committed or released",
                self.producer.get().id
            ))
        })
    }

    fn give_back(&self) {
        self.producer.get().lent.store(false, Ordering::Release);
    }
}

#[pymethods]
impl ProducerBuffer {
    /// Bytes the buffer holds (the producer's `max_block`).
    #[getter]
    fn capacity(&self) -> usize {
        self.cap
    }

    /// Writes the first `length` bytes as one block; returns its sequence number.
    fn commit(&self, py: Python<'_>, length: Int) -> PyResult<u64> {
        let len = length.at_most("commit", "length", self.cap as u64, "the buffer's capacity")?;
        let b = self.take("commit")?;
        let r = guarded(py, move || Ok(b.commit(len as usize)?));
        self.give_back();
        r
    }

    /// Gives the buffer back unused (no-op once committed or released).
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        if self.buf.lock().unwrap_or_else(|p| p.into_inner()).is_none() {
            return Ok(());
        }
        let b = self.take("release")?;
        guarded(py, move || {
            drop(b);
            Ok(())
        })?;
        self.give_back();
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Gives the buffer back if it was not committed. With views still alive it stays
    /// lent until they are gone (then it goes back when this object does).
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        if self.exports.load(Ordering::Acquire) == 0 {
            self.release(py)?;
        }
        Ok(false)
    }

    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let me = slf.get();
        if me.buf.lock().unwrap_or_else(|p| p.into_inner()).is_none() {
            return Err(pyo3::exceptions::PyBufferError::new_err(
                "the buffer was already committed or released",
            ));
        }
        // SAFETY: the memory stays valid while the buffer is lent, and commit and release
        // refuse while a view is exported; `view` is the caller's.
        unsafe {
            export_bytes(
                slf.as_any(),
                view,
                me.ptr as *mut c_void,
                me.cap,
                flags,
                "producer buffer",
            )?
        };
        me.exports.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.exports.fetch_sub(1, Ordering::AcqRel);
    }

    fn __repr__(&self) -> String {
        let state = if self.buf.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
            "lent"
        } else {
            "done"
        };
        format!(
            "<accio.ProducerBuffer of producer {} capacity={} {state}>",
            self.producer.get().id,
            self.cap
        )
    }
}

impl Drop for ProducerBuffer {
    fn drop(&mut self) {
        // Dropped lent (never committed or released): the slot goes back to the merger.
        if self
            .buf
            .get_mut()
            .map(|b| b.take().is_some())
            .unwrap_or(false)
        {
            self.give_back();
        }
    }
}

// ---- containers ----------------------------------------------------------------------------

/// `(producer, seq, kind, payload_offset, length, crc)` of one block.
type IndexRow = (u32, u64, String, u64, u64, u32);

/// The index of an accio container file: one tuple per block,
/// `(producer, seq, kind, payload_offset, length, crc)`, in file order. The Python side
/// maps the file and slices payloads out of it without copying.
#[pyfunction]
fn container_index(py: Python<'_>, path: std::path::PathBuf) -> PyResult<Vec<IndexRow>> {
    guarded(py, move || {
        let r = ContainerReader::open(&path)?;
        let align = r.header().align;
        Ok(r.blocks()
            .iter()
            .map(|b| {
                (
                    b.header.producer,
                    b.header.seq,
                    b.header.kind.name(),
                    b.payload_offset(align),
                    b.header.len,
                    b.header.payload_crc,
                )
            })
            .collect())
    })
}

/// Checks every block's CRC and the index of a container file; returns (whole, text).
#[pyfunction]
fn container_verify(py: Python<'_>, path: std::path::PathBuf) -> PyResult<(bool, String)> {
    guarded(py, move || {
        let r = ContainerReader::open(&path)?;
        let v = r.verify()?;
        Ok((v.is_whole(), format!("{v:?}")))
    })
}

/// The native module.
#[pymodule]
fn _accio(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Listener>()?;
    m.add_class::<Endpoint>()?;
    m.add_class::<Window>()?;
    m.add_class::<DeviceWindow>()?;
    m.add_class::<Merger>()?;
    m.add_class::<Producer>()?;
    m.add_class::<ProducerBuffer>()?;
    m.add_class::<world::World>()?;
    m.add_class::<grid::HaloExchange>()?;
    m.add_function(wrap_pyfunction!(listen, m)?)?;
    m.add_function(wrap_pyfunction!(connect, m)?)?;
    m.add_function(wrap_pyfunction!(container_index, m)?)?;
    m.add_function(wrap_pyfunction!(container_verify, m)?)?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("PeerGone", py.get_type::<PeerGone>())?;
    m.add("Timeout", py.get_type::<Timeout>())?;
    m.add("BadAddress", py.get_type::<BadAddress>())?;
    m.add("AddrInUse", py.get_type::<AddrInUse>())?;
    m.add("Unsupported", py.get_type::<Unsupported>())?;
    m.add("OutOfWindow", py.get_type::<OutOfWindow>())?;
    m.add("AccessDenied", py.get_type::<AccessDenied>())?;
    m.add("MessageTooLarge", py.get_type::<MessageTooLarge>())?;
    m.add("ProtocolError", py.get_type::<ProtocolError>())?;
    m.add("InvalidArgument", invalid_argument_type(py)?)?;
    m.add("IoError", py.get_type::<IoError>())?;
    m.add("Untrusted", py.get_type::<Untrusted>())?;
    m.add("OutOfMemory", py.get_type::<OutOfMemory>())?;
    m.add("MergeFailed", py.get_type::<MergeFailed>())?;
    Ok(())
}
