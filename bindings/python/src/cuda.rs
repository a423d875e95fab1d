//! Blocks in CUDA device memory from Python (CuPy and PyTorch CUDA arrays, anything with
//! `__cuda_array_interface__` or a `kDLCUDA` DLPack tensor): the device address and length
//! the object gives, checked by the driver (`accio_device::device_range`) before any copy,
//! so that an object that lies about its memory gets an error, never a wild copy.
//!
//! Work already queued on the array's GPU is waited for first (the whole primary context,
//! `cuCtxSynchronize`): the producer of the array may have written it on any stream, and
//! the staging copies run on a stream of their own.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::dlpack::{self, Imported};

/// C-contiguous device bytes of a Python object, held for the call.
pub(crate) struct DeviceBlock {
    /// Checked by the driver; `None` for an empty array (no bytes to check or copy).
    pub(crate) range: Option<accio_device::DeviceRange>,
    /// `__cuda_array_interface__` says the memory is read-only (a DLPack tensor, imported
    /// through the legacy capsule, cannot say it).
    pub(crate) read_only: bool,
    /// The DLPack tensor the range lies in, handed back to its producer on drop.
    _tensor: Option<Imported>,
}

fn refuse<T>(what: &str, cause: impl std::fmt::Display) -> PyResult<T> {
    Err(PyTypeError::new_err(format!("{what}: {cause}")))
}

/// Bytes of `n` elements of `itemsize` in shape `shape`, or why not: extents negative or
/// too many, strides (in bytes) not C-contiguous.
fn contiguous_len(shape: &[i64], strides: Option<&[i64]>, itemsize: u64) -> Result<usize, String> {
    let mut elems: u64 = 1;
    for &n in shape {
        let n = u64::try_from(n).map_err(|_| format!("shape {shape:?}: a negative extent"))?;
        elems = elems
            .checked_mul(n)
            .ok_or_else(|| format!("shape {shape:?} is too large"))?;
    }
    if let Some(strides) = strides.filter(|_| elems > 0) {
        if strides.len() != shape.len() {
            return Err(format!(
                "{} strides for {} axes",
                strides.len(),
                shape.len()
            ));
        }
        let mut want = itemsize as i64;
        for k in (0..shape.len()).rev() {
            if shape[k] != 1 && strides[k] != want {
                return Err(format!(
                    "shape {shape:?} with strides {strides:?} (bytes) is not C-contiguous; \
                     pass a contiguous copy"
                ));
            }
            want = want.saturating_mul(shape[k]);
        }
    }
    elems
        .checked_mul(itemsize)
        .and_then(|b| usize::try_from(b).ok())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| format!("shape {shape:?} is too large"))
}

/// The device block `obj` holds, named `what` in errors.
pub(crate) fn device_block(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<DeviceBlock> {
    let (ptr, len, read_only, tensor) = if obj.hasattr("__cuda_array_interface__")? {
        let cai = obj.getattr("__cuda_array_interface__")?;
        let Ok(d) = cai.cast::<PyDict>() else {
            return refuse(what, "__cuda_array_interface__ is not a dict");
        };
        let get = |k: &str| d.get_item(k).ok().flatten();
        let Some((ptr, read_only)) = get("data").and_then(|v| v.extract::<(u64, bool)>().ok())
        else {
            return refuse(
                what,
                "__cuda_array_interface__ has no (pointer, read-only) data",
            );
        };
        let Some(shape) = get("shape").and_then(|v| v.extract::<Vec<i64>>().ok()) else {
            return refuse(what, "__cuda_array_interface__ has no shape");
        };
        let typestr: String = get("typestr")
            .and_then(|v| v.extract().ok())
            .unwrap_or_default();
        let Some(itemsize) = typestr.get(2..).and_then(|n| n.parse::<u64>().ok()) else {
            return refuse(
                what,
                format!("__cuda_array_interface__ typestr {typestr:?}"),
            );
        };
        let strides: Option<Vec<i64>> = match get("strides") {
            Some(v) if !v.is_none() => match v.extract() {
                Ok(s) => Some(s),
                Err(_) => return refuse(what, "__cuda_array_interface__ strides"),
            },
            _ => None,
        };
        let len = match contiguous_len(&shape, strides.as_deref(), itemsize) {
            Ok(n) => n,
            Err(why) => return refuse(what, why),
        };
        (ptr, len, read_only, None)
    } else {
        match dlpack::import_cuda(obj, what)? {
            Some(t) => (t.ptr as u64, t.len, false, Some(t)),
            None => {
                return refuse(
                    what,
                    "gives neither __cuda_array_interface__ nor __dlpack__",
                )
            }
        }
    };
    if len == 0 {
        return Ok(DeviceBlock {
            range: None,
            read_only,
            _tensor: tensor,
        });
    }
    let range = match accio_device::device_range(ptr, len) {
        Ok(r) => r,
        Err(e) if e.is_unavailable() => return refuse(what, format!("CUDA memory, and {e}")),
        Err(e) => return refuse(what, e),
    };
    Ok(DeviceBlock {
        range: Some(range),
        read_only,
        _tensor: tensor,
    })
}

#[cfg(test)]
mod tests {
    use super::contiguous_len;

    #[test]
    fn device_arrays_are_measured_and_checked_like_host_ones() {
        assert_eq!(contiguous_len(&[2, 3], None, 4), Ok(24));
        assert_eq!(contiguous_len(&[2, 3], Some(&[12, 4]), 4), Ok(24));
        assert_eq!(contiguous_len(&[], None, 8), Ok(8));
        assert_eq!(contiguous_len(&[0, 5], Some(&[1, 1]), 4), Ok(0));
        assert!(contiguous_len(&[2, 3], Some(&[4, 8]), 4)
            .unwrap_err()
            .contains("C-contiguous"));
        assert!(contiguous_len(&[-1], None, 1)
            .unwrap_err()
            .contains("negative"));
        assert!(contiguous_len(&[1 << 40, 1 << 40], None, 1)
            .unwrap_err()
            .contains("too large"));
        assert!(contiguous_len(&[1 << 62], None, 8)
            .unwrap_err()
            .contains("too large"));
        assert!(contiguous_len(&[2, 2], Some(&[8]), 4)
            .unwrap_err()
            .contains("strides"));
    }
}
