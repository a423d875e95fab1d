//! DLPack export: `numpy.from_dlpack(window)` (and PyTorch's, CuPy's, JAX's) views an
//! accio window's memory without a copy. The producer side of the protocol, versions 0.x
//! (capsule `dltensor`) and 1.x (`dltensor_versioned`, asked for with `max_version`): the
//! capsule holds a `DLManagedTensor` whose context keeps the exporting Python object (and
//! so the memory) alive until the consumer calls its deleter, or until the capsule is
//! dropped unconsumed.
//!
//! The memory is host memory today (`kDLCPU`); a device window exports the same way with
//! its device.
//!
//! And the consumer side, for host memory: an object with no buffer protocol but
//! `__dlpack__` (a PyTorch CPU tensor, a JAX array) is taken as one contiguous byte range,
//! [`Imported`], and handed back to its producer (the deleter) when the call is done.

use std::ffi::{c_void, CStr};

use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::prelude::*;
use pyo3::{ffi, IntoPyObjectExt};

/// `kDLCPU`.
pub(crate) const DEVICE_CPU: i32 = 1;

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

/// `DLPACK_FLAG_BITMASK_READ_ONLY`.
const FLAG_READ_ONLY: u64 = 1;
/// `kDLUInt`.
const UINT: u8 = 1;

const LEGACY: &CStr = c"dltensor";
const VERSIONED: &CStr = c"dltensor_versioned";

/// What a managed tensor owns: the shape its `DLTensor` points to, and the object whose
/// memory it describes.
struct Context {
    shape: [i64; 1],
    /// Held, never read: dropping it lets the memory go.
    _owner: Py<PyAny>,
}

/// The arguments a `__dlpack__` call was given.
pub(crate) struct Asked<'a, 'py> {
    pub stream: Option<&'a Bound<'py, PyAny>>,
    pub max_version: Option<(u32, u32)>,
    pub dl_device: Option<(i32, i32)>,
    pub copy: Option<bool>,
}

/// Memory an object exports: `len` bytes at `ptr` on `device` (`(type, id)`).
pub(crate) struct Exported {
    pub ptr: *mut c_void,
    pub len: usize,
    pub device: (i32, i32),
    pub read_only: bool,
}

/// `__dlpack__` of the object `owner`, called `what` in errors, whose memory is `mem`:
/// the arguments checked ([`Request::check`]), then the capsule ([`capsule`]).
///
/// # Safety
/// As for [`capsule`]: `mem` stays valid (and writable unless read-only) while `owner`
/// lives.
pub(crate) unsafe fn export(
    owner: &Bound<'_, PyAny>,
    what: &str,
    mem: Exported,
    asked: Asked<'_, '_>,
) -> PyResult<Py<PyAny>> {
    let req = Request::check(what, mem.device, mem.read_only, asked)?;
    // SAFETY: the caller's promise.
    unsafe {
        capsule(
            owner.py(),
            req,
            owner.clone().unbind(),
            mem.ptr,
            mem.len,
            mem.device,
        )
    }
}

/// A `__dlpack__` request, checked: which capsule to make.
struct Request {
    versioned: bool,
    read_only: bool,
}

impl Request {
    /// Checks the arguments of `__dlpack__` for memory on `device` (`(type, id)`), read-only
    /// or not: a stream only for device memory, `dl_device` this device, no copy asked (the
    /// object exports its own memory); `max_version` of 1 or more gets a versioned capsule,
    /// which read-only memory needs (a legacy one cannot say so).
    fn check(
        what: &str,
        device: (i32, i32),
        read_only: bool,
        asked: Asked<'_, '_>,
    ) -> PyResult<Request> {
        let Asked {
            stream,
            max_version,
            dl_device,
            copy,
        } = asked;
        if device.0 == DEVICE_CPU && stream.is_some_and(|s| !s.is_none()) {
            return Err(PyBufferError::new_err(format!(
                "{what}.__dlpack__: stream must be None for host memory"
            )));
        }
        if let Some(d) = dl_device {
            if d != device {
                return Err(PyBufferError::new_err(format!(
                    "{what}.__dlpack__: dl_device={d:?}, but the memory is on {device:?} \
                     and is never copied"
                )));
            }
        }
        if copy == Some(true) {
            return Err(PyBufferError::new_err(format!(
                "{what}.__dlpack__: copy=True: it exports its own memory, never a copy"
            )));
        }
        let versioned = max_version.is_some_and(|(major, _)| major >= 1);
        if read_only && !versioned {
            return Err(PyBufferError::new_err(format!(
                "{what}.__dlpack__: its memory is read-only, which only a DLPack 1.0 \
                 consumer (max_version) is told"
            )));
        }
        Ok(Request {
            versioned,
            read_only,
        })
    }
}

/// A DLPack capsule describing `len` bytes at `ptr` on `device` as a 1-D array of
/// unsigned bytes, which keeps `owner` alive until the consumer is done with it.
///
/// # Safety
/// The `len` bytes at `ptr` must stay valid (and writable unless the request said
/// read-only) for as long as `owner` lives.
unsafe fn capsule(
    py: Python<'_>,
    req: Request,
    owner: Py<PyAny>,
    ptr: *mut c_void,
    len: usize,
    device: (i32, i32),
) -> PyResult<Py<PyAny>> {
    let ctx = Box::into_raw(Box::new(Context {
        shape: [len as i64],
        _owner: owner,
    }));
    let tensor = DLTensor {
        data: ptr,
        device: DLDevice {
            device_type: device.0,
            device_id: device.1,
        },
        ndim: 1,
        dtype: DLDataType {
            code: UINT,
            bits: 8,
            lanes: 1,
        },
        // SAFETY: `ctx` is a live allocation until the deleter frees it.
        shape: unsafe { (*ctx).shape.as_mut_ptr() },
        // Null strides: compact, row-major.
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    };
    let (raw, name, destructor): (*mut c_void, &CStr, Option<ffi::PyCapsule_Destructor>) =
        if req.versioned {
            let m = Box::into_raw(Box::new(DLManagedTensorVersioned {
                version: DLPackVersion { major: 1, minor: 0 },
                manager_ctx: ctx.cast(),
                deleter: Some(delete::<DLManagedTensorVersioned>),
                flags: if req.read_only { FLAG_READ_ONLY } else { 0 },
                dl_tensor: tensor,
            }));
            (
                m.cast(),
                VERSIONED,
                Some(drop_capsule::<DLManagedTensorVersioned>),
            )
        } else {
            let m = Box::into_raw(Box::new(DLManagedTensor {
                dl_tensor: tensor,
                manager_ctx: ctx.cast(),
                deleter: Some(delete::<DLManagedTensor>),
            }));
            (m.cast(), LEGACY, Some(drop_capsule::<DLManagedTensor>))
        };
    // SAFETY: `raw` is a non-null pointer the capsule owns from now on; the name is static.
    let cap = unsafe { ffi::PyCapsule_New(raw, name.as_ptr(), destructor) };
    if cap.is_null() {
        // SAFETY: the capsule was not made: the tensor is still ours to free.
        unsafe {
            if req.versioned {
                delete::<DLManagedTensorVersioned>(raw.cast());
            } else {
                delete::<DLManagedTensor>(raw.cast());
            }
        }
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `cap` is a new, owned reference.
    Ok(unsafe { Bound::from_owned_ptr(py, cap) }.unbind())
}

/// The `__dlpack_device__` answer for `device`.
pub(crate) fn device_tuple(py: Python<'_>, device: (i32, i32)) -> PyResult<Py<PyAny>> {
    device.into_py_any(py)
}

/// What device memory `obj` says it is (`__cuda_array_interface__`, or a DLPack device
/// other than the host's: `kDLCPU`, `kDLCUDAHost`, `kDLROCMHost`, `kDLCUDAManaged`), in
/// words; `None` for host memory or an object that says nothing.
pub(crate) fn device_memory(obj: &Bound<'_, PyAny>) -> Option<String> {
    if obj.hasattr("__cuda_array_interface__").unwrap_or(false) {
        return Some("CUDA device memory (__cuda_array_interface__)".into());
    }
    let dev: (i32, i32) = obj.call_method0("__dlpack_device__").ok()?.extract().ok()?;
    let kind = match dev.0 {
        DEVICE_CPU | 3 | 11 | 13 => return None,
        DEVICE_CUDA => "CUDA",
        4 => "OpenCL",
        7 => "Vulkan",
        8 => "Metal",
        9 => "VPI",
        10 => "ROCm",
        14 => "oneAPI",
        15 => "WebGPU",
        16 => "Hexagon",
        _ => "non-host",
    };
    Some(format!("{kind} device memory (DLPack device {dev:?})"))
}

/// Host memory taken from a DLPack producer: one contiguous byte range, held until drop,
/// which calls the producer's deleter.
pub(crate) struct Imported {
    managed: *mut DLManagedTensor,
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
}

// SAFETY: the producer keeps the memory valid until its deleter runs (the protocol's
// promise); the deleter is called once, in `Drop`, with the GIL held.
unsafe impl Send for Imported {}

/// Most axes a tensor taken in may have (DLPack sets no limit; NumPy's is 64).
const MAX_NDIM: i32 = 64;

/// Takes `obj`'s memory through DLPack if it offers it on the host (`kDLCPU`,
/// `kDLCUDAHost`): `None` if it has no `__dlpack__`. Refuses, naming `what` and the cause,
/// a tensor that is not C-contiguous or whose element size is not whole bytes.
pub(crate) fn import(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Option<Imported>> {
    import_from(obj, what, false)
}

/// [`import`] for memory on a CUDA device (`kDLCUDA`): the tensor's device address and
/// length, to be checked with the driver before use (see `crate::cuda`).
pub(crate) fn import_cuda(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Option<Imported>> {
    import_from(obj, what, true)
}

/// `kDLCUDA`.
pub(crate) const DEVICE_CUDA: i32 = 2;

fn import_from(obj: &Bound<'_, PyAny>, what: &str, cuda: bool) -> PyResult<Option<Imported>> {
    if !obj.hasattr("__dlpack__")? {
        return Ok(None);
    }
    let py = obj.py();
    let cap = obj.call_method0("__dlpack__")?;
    // SAFETY: `cap` is a live object; a capsule of another name is refused here.
    let managed = unsafe {
        if ffi::PyCapsule_IsValid(cap.as_ptr(), LEGACY.as_ptr()) != 1 {
            return Err(PyTypeError::new_err(format!(
                "{what}: __dlpack__() gave no \"dltensor\" capsule"
            )));
        }
        let m = ffi::PyCapsule_GetPointer(cap.as_ptr(), LEGACY.as_ptr()).cast::<DLManagedTensor>();
        // From here the tensor is ours: renamed, the capsule no longer frees it.
        if m.is_null() || ffi::PyCapsule_SetName(cap.as_ptr(), c"used_dltensor".as_ptr()) != 0 {
            return Err(PyErr::take(py).unwrap_or_else(|| {
                PyTypeError::new_err(format!("{what}: the DLPack capsule could not be taken"))
            }));
        }
        m
    };
    // Held from here: an early return hands the tensor back to its producer.
    let mut held = Imported {
        managed,
        ptr: std::ptr::null_mut(),
        len: 0,
    };
    // SAFETY: the producer filled the tensor; it stays valid until its deleter runs.
    let t = unsafe { &(*managed).dl_tensor };
    let refuse = |cause: String| Err(PyTypeError::new_err(format!("{what}: {cause}")));
    let on_host = matches!(t.device.device_type, DEVICE_CPU | 3);
    if cuda && t.device.device_type != DEVICE_CUDA {
        return refuse(format!(
            "DLPack device {:?} is not CUDA device memory",
            (t.device.device_type, t.device.device_id)
        ));
    }
    if !cuda && !on_host {
        return refuse(format!(
            "DLPack device {:?} is not host memory",
            (t.device.device_type, t.device.device_id)
        ));
    }
    if !(0..=MAX_NDIM).contains(&t.ndim) || (t.ndim > 0 && t.shape.is_null()) {
        return refuse(format!("a DLPack tensor of {} axes", t.ndim));
    }
    let bits = u64::from(t.dtype.bits) * u64::from(t.dtype.lanes);
    if bits % 8 != 0 {
        return refuse(format!("elements of {bits} bits are not whole bytes"));
    }
    let ndim = t.ndim as usize;
    // SAFETY: the producer gives `ndim` extents (and strides, unless null).
    let shape = unsafe { std::slice::from_raw_parts(t.shape, ndim) };
    let strides = (!t.strides.is_null()).then(|| {
        // SAFETY: non-null strides are `ndim` of them, as the producer gave.
        unsafe { std::slice::from_raw_parts(t.strides, ndim) }
    });
    let mut elems: u64 = 1;
    for &n in shape {
        let Ok(n) = u64::try_from(n) else {
            return refuse(format!(
                "a DLPack tensor of shape {shape:?}: a negative extent"
            ));
        };
        elems = match elems.checked_mul(n) {
            Some(e) => e,
            None => return refuse(format!("a DLPack tensor of shape {shape:?} is too large")),
        };
    }
    if let Some(strides) = strides.filter(|_| elems > 0) {
        // C order: each axis steps over all later ones (axes of one element step anyhow,
        // and a tensor of no elements has nothing to step over).
        let mut want: i64 = 1;
        for k in (0..ndim).rev() {
            if shape[k] != 1 && strides[k] != want {
                return refuse(format!(
                    "a DLPack tensor of shape {shape:?} and strides {strides:?} (elements) is \
                     not C-contiguous; pass a contiguous copy"
                ));
            }
            want = want.saturating_mul(shape[k]);
        }
    }
    let Some(len) = elems
        .checked_mul(bits / 8)
        .and_then(|b| usize::try_from(b).ok())
        .filter(|&b| b <= isize::MAX as usize)
    else {
        return refuse(format!("a DLPack tensor of shape {shape:?} is too large"));
    };
    if len > 0 {
        if t.data.is_null() {
            return refuse(format!("a DLPack tensor of {len} bytes at address 0"));
        }
        held.ptr = t.data.cast::<u8>().wrapping_add(t.byte_offset as usize);
        held.len = len;
    }
    Ok(Some(held))
}

impl Drop for Imported {
    fn drop(&mut self) {
        let m = std::mem::replace(&mut self.managed, std::ptr::null_mut());
        // SAFETY: taken from the capsule in `import`, handed back once; a producer's
        // deleter may touch Python objects, so the GIL is held.
        Python::attach(|_| unsafe {
            if let Some(d) = (*m).deleter {
                d(m);
            }
        });
    }
}

/// The two kinds of managed tensor a capsule carries: each knows its context and the
/// capsule name it travels under.
trait Managed {
    const NAME: &'static CStr;
    fn context(&self) -> *mut c_void;
}

impl Managed for DLManagedTensor {
    const NAME: &'static CStr = LEGACY;
    fn context(&self) -> *mut c_void {
        self.manager_ctx
    }
}

impl Managed for DLManagedTensorVersioned {
    const NAME: &'static CStr = VERSIONED;
    fn context(&self) -> *mut c_void {
        self.manager_ctx
    }
}

/// The deleter a consumer calls when done (frees the tensor and lets the owner go). It
/// may run without the GIL: the owner's reference is then released when the GIL is next
/// held (PyO3's deferred decrement).
unsafe extern "C" fn delete<M: Managed>(m: *mut M) {
    if m.is_null() {
        return;
    }
    // SAFETY: `m` came from Box::into_raw in `capsule`, and the consumer calls the deleter
    // once; its context likewise.
    unsafe {
        let m = Box::from_raw(m);
        drop(Box::from_raw(m.context().cast::<Context>()));
    }
}

/// The capsule's destructor: a capsule no consumer took (its name unchanged; a consumer
/// renames it `used_dltensor` or `used_dltensor_versioned`) still owns its tensor.
unsafe extern "C" fn drop_capsule<M: Managed>(cap: *mut ffi::PyObject) {
    // SAFETY: called by Python with the capsule; the name is compared, not kept.
    unsafe {
        if ffi::PyCapsule_IsValid(cap, M::NAME.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(cap, M::NAME.as_ptr());
            delete::<M>(m.cast());
        }
    }
}
