//! `accio.grid.HaloExchange`: the grid communicator of the Rust crate `accio-grid` over
//! NumPy. The rank's subgrid (owned cells and ghost layers) lives in memory the exchange
//! owns and registers with its neighbours; Python sees it as one writable NumPy array
//! (`accio.grid` wraps the buffer this class exports), computes on it in place, and calls
//! `exchange()` to fill the ghosts from the neighbours' faces.

use std::ffi::c_void;
use std::sync::Mutex;
use std::time::Duration;

use accio_grid::{ArrayMemory, Decomposition, ExchangeOptions, GridError, Layout, Path};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PySlice, PyTuple};

use super::world::World;
use super::{export_bytes, guarded, invalid_arg, Error, Failure};

impl From<GridError> for Failure {
    fn from(e: GridError) -> Self {
        Failure::Other(Error::new_err(e.to_string()))
    }
}

/// The subgrid of one element type.
enum Field {
    F64(accio_grid::HaloExchange<f64>),
    F32(accio_grid::HaloExchange<f32>),
}

macro_rules! each {
    ($f:expr, $ex:ident => $body:expr) => {
        match $f {
            Field::F64($ex) => $body,
            Field::F32($ex) => $body,
        }
    };
}

/// One rank's part of a grid decomposed over a world, and the exchange of its halos.
#[pyclass(module = "accio.grid", frozen)]
pub(crate) struct HaloExchange {
    field: Mutex<Field>,
    /// Where the array lives and how long it is, in bytes (fixed for the object's life).
    ptr: usize,
    bytes: usize,
    dtype: &'static str,
    ndim: usize,
    /// Where this rank's cells sit in the array (the exchange's own layout).
    layout: Layout,
    shape: [usize; 3],
    dims: [usize; 3],
    coords: [usize; 3],
    rank: usize,
    /// Where the array lives: "shared" or "private".
    memory: &'static str,
}

/// The last `ndim` axes of a 3-axis value, as a tuple.
fn axes<'py>(py: Python<'py>, v: &[usize; 3], ndim: usize) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, &v[3 - ndim..])
}

#[pymethods]
impl HaloExchange {
    /// Decomposes a grid of `shape` (2 or 3 extents, the last contiguous) over the ranks
    /// of `world` (`None`: this process alone) and sets up this rank's part with ghost
    /// layers `halo` thick: collective, every rank of the world calls it with the same
    /// arguments. `dims`: ranks per axis (None: chosen to keep faces small); `periodic`:
    /// which axes wrap (None: none); `path`: "rma" (faces written straight into the
    /// neighbours' ghosts) or "messages"; `dtype`: "float64" or "float32"; `array`: where
    /// the array lives, "shared" (memory the neighbours write into), "private" (on huge
    /// pages, faces copied in from a staging area) or "auto" (private for arrays of 8 MiB
    /// and more where the host gives huge pages to private memory only); `spin`: seconds a
    /// wait for a neighbour polls before it hands its core over at every look (None: none
    /// where the node runs more ranks than their CPUs, as MPI libraries do, else 100 us).
    #[new]
    #[pyo3(signature = (world, shape, *, dims=None, periodic=None, halo=1, path="rma", dtype="float64", array="auto", spin=None, timeout=60.0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        world: Option<&World>,
        shape: Vec<usize>,
        dims: Option<Vec<usize>>,
        periodic: Option<Vec<bool>>,
        halo: usize,
        path: &str,
        dtype: &str,
        array: &str,
        spin: Option<f64>,
        timeout: f64,
    ) -> PyResult<HaloExchange> {
        const OP: &str = "HaloExchange";
        let path = match path {
            "rma" => Path::Rma,
            "messages" => Path::Messages,
            p => {
                return Err(invalid_arg(format!(
                    "{OP}: path={p:?} is neither \"rma\" nor \"messages\""
                )))
            }
        };
        let array: ArrayMemory = array
            .parse()
            .map_err(|e| invalid_arg(format!("{OP}: array={e}")))?;
        let timeout = super::secs(OP, "timeout", timeout)?;
        let (world, rank, size) = match world {
            Some(w) => (Some(w.world()?), w.rank, w.size),
            None => (None, 0, 1),
        };
        let spin = match spin {
            Some(s) => Duration::try_from_secs_f64(s).map_err(|_| {
                invalid_arg(format!(
                    "{OP}: spin={s} is not a number of seconds >= 0 (None: chosen)"
                ))
            })?,
            None if world.as_ref().is_some_and(|w| w.oversubscribed()) => Duration::ZERO,
            None => ExchangeOptions::default().spin,
        };
        let decomp = Decomposition::new(
            &shape,
            size,
            dims.as_deref(),
            periodic.as_deref().unwrap_or(&[]),
            halo,
        )
        .map_err(|e| invalid_arg(format!("{OP}: {e}")))?;
        let opts = ExchangeOptions {
            path,
            timeout,
            array,
            spin,
            ..Default::default()
        };
        let mut connect = |peer: usize| -> Result<Box<dyn accio::Endpoint>, accio_grid::BoxError> {
            match &world {
                Some(w) => Ok(w.endpoint(peer)?),
                None => Err("a grid of one rank has no neighbours to connect to".into()),
            }
        };
        let field = match dtype {
            "float64" | "f8" | "d" => guarded(py, || {
                Ok(Field::F64(accio_grid::HaloExchange::new(
                    &decomp,
                    rank,
                    opts,
                    &mut connect,
                )?))
            })?,
            "float32" | "f4" | "f" => guarded(py, || {
                Ok(Field::F32(accio_grid::HaloExchange::new(
                    &decomp,
                    rank,
                    opts,
                    &mut connect,
                )?))
            })?,
            d => {
                return Err(invalid_arg(format!(
                    "{OP}: dtype={d:?} is neither \"float64\" nor \"float32\""
                )))
            }
        };
        let (ptr, bytes, layout, memory) = each!(&field, ex => (
            ex.field().as_ptr() as usize,
            std::mem::size_of_val(ex.field()),
            ex.layout().clone(),
            ex.array_memory(),
        ));
        let dtype = match field {
            Field::F64(_) => "float64",
            Field::F32(_) => "float32",
        };
        Ok(HaloExchange {
            ptr,
            bytes,
            dtype,
            ndim: decomp.ndim(),
            layout,
            shape: decomp.shape(),
            dims: decomp.dims(),
            coords: decomp.coords(rank),
            rank,
            memory: memory.name(),
            field: Mutex::new(field),
        })
    }

    /// Fills every ghost layer from the neighbours' faces (collective with the
    /// neighbours). Returns `(sync, communicate)` in seconds: waiting for the neighbours to
    /// be done with their ghosts, then moving the faces.
    fn exchange(&self, py: Python<'_>) -> PyResult<(f64, f64)> {
        let t = guarded(py, || {
            let mut f = self.field.lock().unwrap_or_else(|p| p.into_inner());
            Ok(each!(&mut *f, ex => ex.exchange()?))
        })?;
        Ok((t.sync.as_secs_f64(), t.communicate.as_secs_f64()))
    }

    /// This rank's subgrid as a writable NumPy array of `local_shape` (owned cells and
    /// ghosts), a view of the memory the exchange moves: compute on it in place.
    #[getter]
    fn array<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let me = slf.get();
        let flat = py
            .import("numpy")?
            .call_method1("frombuffer", (slf, me.dtype))?;
        flat.call_method1("reshape", (axes(py, &me.layout.alloc, me.ndim)?,))
    }

    /// The owned cells of `array` (ghosts left out), a view.
    #[getter]
    fn interior<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let me = slf.get();
        let cut = (3 - me.ndim..3)
            .map(|a| {
                PySlice::new(
                    py,
                    me.layout.halo[a] as isize,
                    (me.layout.halo[a] + me.layout.block.len[a]) as isize,
                    1,
                )
            })
            .collect::<Vec<_>>();
        Self::array(slf)?.get_item(PyTuple::new(py, cut)?)
    }

    /// Where the array lives: "shared" (the neighbours write faces straight into its
    /// ghosts) or "private" (what `array="auto"` chose, or was asked).
    #[getter]
    fn array_memory(&self) -> &'static str {
        self.memory
    }

    /// The NumPy dtype name of the array: "float64" or "float32".
    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype
    }

    /// The local array's shape, ghosts included (per axis: owned cells + 2 × halo, the
    /// halo being 0 along an axis no neighbour shares).
    #[getter]
    fn local_shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        axes(py, &self.layout.alloc, self.ndim)
    }

    /// Ghost layers per axis (0 along an axis not split and not periodic).
    #[getter]
    fn halo<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        axes(py, &self.layout.halo, self.ndim)
    }

    /// Global index of this rank's first owned cell, per axis.
    #[getter]
    fn start<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        axes(py, &self.layout.block.start, self.ndim)
    }

    /// Owned cells per axis.
    #[getter]
    fn owned<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        axes(py, &self.layout.block.len, self.ndim)
    }

    /// The whole grid's shape.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        axes(py, &self.shape, self.ndim)
    }

    /// Ranks per axis.
    #[getter]
    fn dims<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        axes(py, &self.dims, self.ndim)
    }

    /// This rank's position in the rank grid.
    #[getter]
    fn coords<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        axes(py, &self.coords, self.ndim)
    }

    /// This rank.
    #[getter]
    fn rank(&self) -> usize {
        self.rank
    }

    /// Exports the local array (ghosts included), writable, as bytes; `accio.grid` views
    /// it with its dtype and shape.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: std::ffi::c_int,
    ) -> PyResult<()> {
        let me = slf.get();
        // SAFETY: the array stays mapped as long as the exchange lives (it is never
        // reallocated); `view` is the caller's.
        unsafe {
            export_bytes(
                slf.as_any(),
                view,
                me.ptr as *mut c_void,
                me.bytes,
                flags,
                "grid",
            )
        }
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}

    fn __repr__(&self) -> String {
        let s = |v: &[usize; 3]| {
            v[3 - self.ndim..]
                .iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join("x")
        };
        format!(
            "<accio.grid.HaloExchange rank {} of grid {} over ranks {}, owns {} at {:?}>",
            self.rank,
            s(&self.shape),
            s(&self.dims),
            s(&self.layout.block.len),
            &self.layout.block.start[3 - self.ndim..]
        )
    }
}
