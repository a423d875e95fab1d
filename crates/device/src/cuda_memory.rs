//! Device memory through the driver API (the `cuda` feature): allocations, checked device
//! ranges, CUDA IPC across processes, and the pinned staging pipeline that moves bytes
//! between device memory and any host memory.
//!
//! Everything runs in the GPU's primary context, the one the CUDA runtime (and so PyTorch
//! and CuPy) uses, so that device pointers from those libraries are valid here. Every
//! public entry runs under [`crate::no_panic`].

use std::ffi::c_void;

use cudarc::driver::sys::{self, CUresult};

use crate::driver::{check, device, init};
use crate::{no_panic, DeviceRange, Error, Result, Staged};

/// The primary context of GPU `ordinal`, retained (released on drop) and made current.
struct Context {
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
}

impl Context {
    fn retain(ordinal: u32) -> Result<Context> {
        init()?;
        let dev = device(ordinal)?;
        let mut ctx = std::ptr::null_mut();
        // SAFETY: `dev` is a valid device; `ctx` a valid out-pointer.
        check("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev)
        })?;
        let c = Context { dev, ctx };
        c.make_current()?;
        Ok(c)
    }

    fn make_current(&self) -> Result<()> {
        // SAFETY: `self.ctx` is retained for `self`'s life.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(self.ctx) })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: retained in `retain`; released once.
        let _ = no_panic(|| Ok(unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.dev) }));
    }
}

/// Waits for all work queued on GPU `ordinal`'s primary context (`cuCtxSynchronize`): what
/// another library (CuPy, PyTorch) queued there on any stream; see [`crate::synchronize`].
pub(crate) fn synchronize(ordinal: u32) -> Result<()> {
    no_panic(|| {
        let _ctx = Context::retain(ordinal)?;
        // SAFETY: the context is current (retained above).
        check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
    })
}

/// One pointer attribute (an integer-sized one) of `ptr`.
fn attribute<T: Default>(
    ptr: u64,
    a: sys::CUpointer_attribute,
) -> std::result::Result<T, CUresult> {
    let mut v = T::default();
    // SAFETY: each attribute asked for here is written as a value of `T`'s size (the
    // callers pair them: memory type u32, ordinal i32, start address u64, size usize).
    let r = unsafe { sys::cuPointerGetAttribute(&mut v as *mut T as *mut c_void, a, ptr) };
    if r == CUresult::CUDA_SUCCESS {
        Ok(v)
    } else {
        Err(r)
    }
}

/// [`attribute`], a failure as the driver error it is (for pointers the driver gave us).
fn checked_attribute<T: Default>(ptr: u64, a: sys::CUpointer_attribute) -> Result<T> {
    attribute(ptr, a).map_err(|r| {
        check("cuPointerGetAttribute", r).expect_err("attribute failed with this result")
    })
}

/// Checks with the driver that `[ptr, ptr + len)` is device memory inside one allocation;
/// see [`crate::device_range`].
pub(crate) fn device_range(ptr: u64, len: usize) -> Result<DeviceRange> {
    init()?;
    no_panic(|| {
        use sys::CUpointer_attribute as A;
        let not_device = |cause: String| Error::NotDeviceMemory { ptr, len, cause };
        let kind: u32 = attribute(ptr, A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE).map_err(|r| {
            not_device(format!(
                "the driver does not know the address ({r:?}): plain host memory, or memory \
                 of another process"
            ))
        })?;
        if kind != sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 {
            return Err(not_device(
                if kind == sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32 {
                    "it is pinned host memory: give it as host memory".into()
                } else {
                    format!("its memory type is {kind}")
                },
            ));
        }
        let ordinal: i32 = attribute(ptr, A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
            .map_err(|r| not_device(format!("its GPU is unknown ({r:?})")))?;
        let start: u64 = attribute(ptr, A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
            .map_err(|r| not_device(format!("its allocation is unknown ({r:?})")))?;
        let size: usize = attribute(ptr, A::CU_POINTER_ATTRIBUTE_RANGE_SIZE)
            .map_err(|r| not_device(format!("its allocation is unknown ({r:?})")))?;
        let end = ptr.checked_add(len as u64);
        let alloc_end = start.saturating_add(size as u64);
        if ptr < start || end.is_none_or(|e| e > alloc_end) {
            return Err(not_device(format!(
                "it runs past its allocation ({size} bytes at {start:#x})"
            )));
        }
        Ok(DeviceRange {
            ordinal: ordinal.max(0) as u32,
            ptr,
            len,
        })
    })
}

/// Device memory of one GPU, allocated here and freed on drop (see the crate docs).
pub struct DeviceBuffer {
    ctx: Context,
    ordinal: u32,
    ptr: sys::CUdeviceptr,
    len: usize,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("gpu", &self.ordinal)
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .finish()
    }
}

// SAFETY: a device address and a retained context are plain handles, usable from any
// thread (each call makes the context current on its thread).
unsafe impl Send for DeviceBuffer {}
// SAFETY: as above; the copies through `&self` are synchronous driver calls.
unsafe impl Sync for DeviceBuffer {}

impl DeviceBuffer {
    /// Allocates `len` bytes (at least 1) on GPU `ordinal` (`cuMemAlloc`).
    pub fn alloc(ordinal: u32, len: usize) -> Result<DeviceBuffer> {
        no_panic(|| {
            let ctx = Context::retain(ordinal)?;
            let mut ptr = 0;
            // SAFETY: the context is current; `ptr` a valid out-pointer.
            check("cuMemAlloc", unsafe {
                sys::cuMemAlloc_v2(&mut ptr, len.max(1))
            })?;
            Ok(DeviceBuffer {
                ctx,
                ordinal,
                ptr,
                len,
            })
        })
    }

    /// Allocates `len` bytes (at least 1) on GPU `ordinal`, set to zero (`cuMemsetD8`):
    /// fresh memory for a window, which shows nothing of earlier allocations.
    pub fn zeroed(ordinal: u32, len: usize) -> Result<DeviceBuffer> {
        let b = DeviceBuffer::alloc(ordinal, len)?;
        no_panic(|| {
            b.ctx.make_current()?;
            // SAFETY: `b.ptr` holds `len` bytes of this process's device memory. A memset
            // of device memory may return before it ran (on the legacy stream, which the
            // stagers' non-blocking streams do not wait for): it is waited for here.
            unsafe {
                check("cuMemsetD8", sys::cuMemsetD8_v2(b.ptr, 0, len))?;
                check("cuCtxSynchronize", sys::cuCtxSynchronize())
            }
        })?;
        Ok(b)
    }

    /// The whole buffer as a range.
    pub fn range(&self) -> DeviceRange {
        DeviceRange {
            ordinal: self.ordinal,
            ptr: self.ptr,
            len: self.len,
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, at: usize, len: usize, what: &str) -> Result<()> {
        if at.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(Error::Argument(format!(
                "{what} of {len} bytes at {at} runs past the {}-byte device buffer",
                self.len
            )));
        }
        Ok(())
    }

    /// Copies `src` to byte `at` of the buffer (`cuMemcpyHtoD`, then the legacy stream
    /// waited for: the bytes are on the device when it returns).
    pub fn write(&self, at: usize, src: &[u8]) -> Result<()> {
        self.check(at, src.len(), "a write")?;
        no_panic(|| {
            self.ctx.make_current()?;
            // SAFETY: bounds checked above; `src` is readable host memory for the call. A
            // copy from pageable memory may return once its bytes are staged, before they
            // reach the device (on the legacy stream, which the stagers' non-blocking
            // streams do not wait for): the stream is waited for, so the bytes are there
            // for any later copy.
            unsafe {
                check(
                    "cuMemcpyHtoD",
                    sys::cuMemcpyHtoD_v2(
                        self.ptr + at as u64,
                        src.as_ptr() as *const c_void,
                        src.len(),
                    ),
                )?;
                check(
                    "cuStreamSynchronize",
                    sys::cuStreamSynchronize(std::ptr::null_mut()),
                )
            }
        })
    }

    /// Copies bytes from `at` of the buffer into `dst` (synchronous `cuMemcpyDtoH`).
    pub fn read(&self, at: usize, dst: &mut [u8]) -> Result<()> {
        self.check(at, dst.len(), "a read")?;
        no_panic(|| {
            self.ctx.make_current()?;
            // SAFETY: bounds checked above; `dst` is writable host memory for the call.
            check("cuMemcpyDtoH", unsafe {
                sys::cuMemcpyDtoH_v2(
                    dst.as_mut_ptr() as *mut c_void,
                    self.ptr + at as u64,
                    dst.len(),
                )
            })
        })
    }

    /// A handle another process on this node opens with [`PeerMemory::open`]
    /// (`cuIpcGetMemHandle`): 64 opaque bytes.
    pub fn ipc_handle(&self) -> Result<[u8; 64]> {
        no_panic(|| {
            self.ctx.make_current()?;
            let mut h = sys::CUipcMemHandle_st { reserved: [0; 64] };
            // SAFETY: `self.ptr` is an allocation of this process; `h` a valid out-pointer.
            check("cuIpcGetMemHandle", unsafe {
                sys::cuIpcGetMemHandle(&mut h, self.ptr)
            })?;
            Ok(h.reserved.map(|c| c as u8))
        })
    }
}

/// What another process opens `range` by: the CUDA IPC handle of the allocation it lies
/// in (`cuIpcGetMemHandle` takes an allocation's start) and where in it the range starts.
pub(crate) fn ipc_share(range: &DeviceRange) -> Result<([u8; 64], u64)> {
    no_panic(|| {
        let ctx = Context::retain(range.ordinal)?;
        let start: u64 = checked_attribute(
            range.ptr,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        )?;
        let mut h = sys::CUipcMemHandle_st { reserved: [0; 64] };
        // SAFETY: `start` is the start of the allocation the driver says `range` lies in;
        // `h` a valid out-pointer.
        check("cuIpcGetMemHandle", unsafe {
            sys::cuIpcGetMemHandle(&mut h, start)
        })?;
        drop(ctx);
        Ok((h.reserved.map(|c| c as u8), range.ptr - start))
    })
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let _ = no_panic(|| {
            self.ctx.make_current()?;
            // SAFETY: allocated in `alloc`, freed once; no copy of ours still uses it (every
            // copy through `self` is synchronous, and a `Stager` waits for its copies).
            check("cuMemFree", unsafe { sys::cuMemFree_v2(self.ptr) })
        });
    }
}

/// Another process's device allocation, opened through CUDA IPC (`cuIpcOpenMemHandle`),
/// closed on drop.
pub struct PeerMemory {
    ctx: Context,
    /// Where the driver mapped the allocation (what closing it takes).
    base: sys::CUdeviceptr,
    range: DeviceRange,
}

// SAFETY: as for `DeviceBuffer`: a device address and a retained context, plain handles
// usable from any thread; all access is through synchronous driver calls.
unsafe impl Send for PeerMemory {}
// SAFETY: as above.
unsafe impl Sync for PeerMemory {}

impl std::fmt::Debug for PeerMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerMemory")
            .field("range", &self.range)
            .finish()
    }
}

impl PeerMemory {
    /// Opens the allocation behind `handle` (from [`DeviceBuffer::ipc_handle`] or an
    /// `accio_core::DeviceShare` in another process) on GPU `ordinal`, as the `len` bytes
    /// from byte `offset` of it: an allocation smaller than `offset + len` is refused, so
    /// that no copy through it runs past what the peer allocated.
    pub fn open(ordinal: u32, handle: &[u8; 64], offset: u64, len: usize) -> Result<PeerMemory> {
        no_panic(|| {
            let ctx = Context::retain(ordinal)?;
            let h = sys::CUipcMemHandle_st {
                reserved: handle.map(|b| b as std::ffi::c_char),
            };
            let mut ptr = 0;
            let lazy = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
            // SAFETY: `ptr` a valid out-pointer; the handle is opaque bytes the driver
            // checks.
            check("cuIpcOpenMemHandle", unsafe {
                sys::cuIpcOpenMemHandle_v2(&mut ptr, h, lazy)
            })?;
            let peer = PeerMemory {
                ctx,
                base: ptr,
                range: DeviceRange {
                    ordinal,
                    ptr: ptr.wrapping_add(offset),
                    len,
                },
            };
            let size: usize = checked_attribute(
                ptr,
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
            )?;
            if (size as u64) < offset.saturating_add(len as u64) {
                return Err(Error::Argument(format!(
                    "the peer's device allocation holds {size} bytes, fewer than the {len} \
                     expected at byte {offset}"
                )));
            }
            Ok(peer)
        })
    }

    /// The opened memory, as a range of this process.
    pub fn range(&self) -> DeviceRange {
        self.range
    }
}

impl Drop for PeerMemory {
    fn drop(&mut self) {
        let _ = no_panic(|| {
            self.ctx.make_current()?;
            // SAFETY: opened in `open`, closed once.
            check("cuIpcCloseMemHandle", unsafe {
                sys::cuIpcCloseMemHandle(self.base)
            })
        });
    }
}

/// Bytes per staging chunk: large enough for the link's full rate (55 GB/s from 4 MiB on
/// an H200's Gen5 x16), small enough to start the host's copy early.
pub const CHUNK: usize = 4 << 20;

/// The pinned staging pipeline between device memory and any host memory (see the crate
/// docs): one stream, two pinned chunks, two events. While the copy engine fills (or
/// drains) one chunk, the CPU copies the other from (or to) the host memory.
pub struct Stager {
    ctx: Context,
    ordinal: u32,
    stream: sys::CUstream,
    chunks: [*mut c_void; 2],
    events: [sys::CUevent; 2],
}

// SAFETY: the handles are usable from any thread; `&mut self` serializes their use.
unsafe impl Send for Stager {}

impl std::fmt::Debug for Stager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stager")
            .field("gpu", &self.ordinal)
            .finish_non_exhaustive()
    }
}

impl Stager {
    /// A pipeline for GPU `ordinal`: a stream and 2 × [`CHUNK`] bytes of pinned memory.
    pub fn new(ordinal: u32) -> Result<Stager> {
        no_panic(|| {
            let mut s = Stager {
                ctx: Context::retain(ordinal)?,
                ordinal,
                stream: std::ptr::null_mut(),
                chunks: [std::ptr::null_mut(); 2],
                events: [std::ptr::null_mut(); 2],
            };
            // SAFETY: the context is current; each out-pointer is valid, and `s`'s Drop
            // frees what was made if a later call fails.
            unsafe {
                check("cuStreamCreate", sys::cuStreamCreate(&mut s.stream, 1))?;
                for e in &mut s.events {
                    let no_timing = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
                    check("cuEventCreate", sys::cuEventCreate(e, no_timing))?;
                }
                for c in &mut s.chunks {
                    check("cuMemHostAlloc", sys::cuMemHostAlloc(c, CHUNK, 0))?;
                }
            }
            Ok(s)
        })
    }

    /// The GPU it copies for.
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }

    fn same_gpu(&self, r: &DeviceRange) -> Result<()> {
        if r.ordinal != self.ordinal {
            return Err(Error::Argument(format!(
                "the device memory is on GPU {}, this stager copies for GPU {}",
                r.ordinal, self.ordinal
            )));
        }
        Ok(())
    }

    /// Copies the device range `src` into `dst` (of the same length) through the pinned
    /// chunks, the next chunk's device→host copy running while the CPU copies this one.
    pub fn to_host(&mut self, src: &DeviceRange, dst: &mut [u8]) -> Result<()> {
        if dst.len() != src.len {
            return Err(Error::Argument(format!(
                "device→host: {} device bytes into {} host bytes",
                src.len,
                dst.len()
            )));
        }
        self.drain(src, |at, chunk| {
            dst[at..at + chunk.len()].copy_from_slice(chunk);
            Ok::<(), std::convert::Infallible>(())
        })
        .map_err(Staged::into_device)
    }

    /// Hands the device range `src` to `sink` chunk by chunk (`sink(at, bytes)`: the bytes
    /// at byte `at` of the range, in pinned memory, at most [`CHUNK`] of them), the next
    /// chunk's device→host copy running while `sink` consumes this one: what a transport
    /// sends straight from (see the crate docs). Stops at the first error of `sink`.
    pub fn drain<E>(
        &mut self,
        src: &DeviceRange,
        mut sink: impl FnMut(usize, &[u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), Staged<E>> {
        self.same_gpu(src).map_err(Staged::Device)?;
        let r = no_panic(|| {
            self.ctx.make_current()?;
            let total = src.len;
            let n = total.div_ceil(CHUNK);
            let piece = |i: usize| (i * CHUNK, CHUNK.min(total - i * CHUNK));
            let enqueue = |s: &Self, i: usize| -> Result<()> {
                let (at, len) = piece(i);
                // SAFETY: each chunk is CHUNK pinned bytes owned by `self`; `src` was
                // checked by `device_range` (or is a buffer's own range); a chunk is
                // refilled only after `sink` returned from it (the loop below hands chunk
                // i over before it enqueues chunk i + 2).
                unsafe {
                    check(
                        "cuMemcpyDtoHAsync",
                        sys::cuMemcpyDtoHAsync_v2(
                            s.chunks[i % 2],
                            src.ptr + at as u64,
                            len,
                            s.stream,
                        ),
                    )?;
                    check(
                        "cuEventRecord",
                        sys::cuEventRecord(s.events[i % 2], s.stream),
                    )
                }
            };
            if n > 0 {
                enqueue(self, 0)?;
            }
            for i in 0..n {
                if i + 1 < n {
                    enqueue(self, i + 1)?;
                }
                let (at, len) = piece(i);
                // SAFETY: chunk i's copy is complete once its event is; its first `len`
                // bytes are then the device's, and nothing writes them until chunk i + 2
                // is enqueued, after `sink` returned.
                let chunk = unsafe {
                    check(
                        "cuEventSynchronize",
                        sys::cuEventSynchronize(self.events[i % 2]),
                    )?;
                    std::slice::from_raw_parts(self.chunks[i % 2] as *const u8, len)
                };
                if let Err(e) = sink(at, chunk) {
                    return Ok(Err(e));
                }
            }
            Ok(Ok(()))
        });
        let drained = self.quiesce();
        match r {
            Err(e) => Err(Staged::Device(e)),
            Ok(Err(e)) => Err(Staged::Host(e)),
            Ok(Ok(())) => drained.map_err(Staged::Device),
        }
    }

    /// Copies `src` into the device range `dst` (of the same length) through the pinned
    /// chunks, the CPU filling the next chunk while the copy engine moves this one.
    pub fn to_device(&mut self, src: &[u8], dst: &DeviceRange) -> Result<()> {
        if src.len() != dst.len {
            return Err(Error::Argument(format!(
                "host→device: {} host bytes into {} device bytes",
                src.len(),
                dst.len
            )));
        }
        self.fill(dst, |at, chunk| {
            chunk.copy_from_slice(&src[at..at + chunk.len()]);
            Ok::<(), std::convert::Infallible>(())
        })
        .map_err(Staged::into_device)
    }

    /// Fills the device range `dst` from `source` chunk by chunk (`source(at, chunk)` fills
    /// the pinned `chunk` with the bytes for byte `at` of the range, at most [`CHUNK`] of
    /// them), the copy engine moving each chunk to the device while `source` fills the
    /// next: what a transport receives straight into. Returns once every byte is in device
    /// memory; stops at the first error of `source` (the bytes before it are copied).
    pub fn fill<E>(
        &mut self,
        dst: &DeviceRange,
        mut source: impl FnMut(usize, &mut [u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), Staged<E>> {
        self.same_gpu(dst).map_err(Staged::Device)?;
        let r = no_panic(|| {
            self.ctx.make_current()?;
            let total = dst.len;
            let n = total.div_ceil(CHUNK);
            for i in 0..n {
                let (at, len) = (i * CHUNK, CHUNK.min(total - i * CHUNK));
                // SAFETY: chunk i % 2 was last used by copy i - 2, whose event is waited
                // for before `source` writes the chunk again (copies of an earlier call
                // were drained by its `quiesce`).
                let chunk = unsafe {
                    if i >= 2 {
                        check(
                            "cuEventSynchronize",
                            sys::cuEventSynchronize(self.events[i % 2]),
                        )?;
                    }
                    std::slice::from_raw_parts_mut(self.chunks[i % 2] as *mut u8, len)
                };
                if let Err(e) = source(at, chunk) {
                    return Ok(Err(e));
                }
                // SAFETY: as in `drain`; the chunk holds `len` bytes for `dst + at`.
                unsafe {
                    check(
                        "cuMemcpyHtoDAsync",
                        sys::cuMemcpyHtoDAsync_v2(
                            dst.ptr + at as u64,
                            self.chunks[i % 2],
                            len,
                            self.stream,
                        ),
                    )?;
                    check(
                        "cuEventRecord",
                        sys::cuEventRecord(self.events[i % 2], self.stream),
                    )?;
                }
            }
            Ok(Ok(()))
        });
        let drained = self.quiesce();
        match r {
            Err(e) => Err(Staged::Device(e)),
            Ok(Err(e)) => Err(Staged::Host(e)),
            Ok(Ok(())) => drained.map_err(Staged::Device),
        }
    }

    /// Waits for every copy queued on the stager's stream, on every way out of a
    /// pipeline: no copy of one call may touch a chunk the next call fills or reads.
    fn quiesce(&self) -> Result<()> {
        no_panic(|| {
            self.ctx.make_current()?;
            // SAFETY: the stream is `self`'s.
            check("cuStreamSynchronize", unsafe {
                sys::cuStreamSynchronize(self.stream)
            })
        })
    }

    /// Copies device range `src` into device range `dst` (same GPU and length) on the copy
    /// engine, and waits for it.
    pub fn device_to_device(&mut self, src: &DeviceRange, dst: &DeviceRange) -> Result<()> {
        self.same_gpu(src)?;
        self.same_gpu(dst)?;
        if src.len != dst.len {
            return Err(Error::Argument(format!(
                "device→device: {} bytes into {}",
                src.len, dst.len
            )));
        }
        no_panic(|| {
            self.ctx.make_current()?;
            // SAFETY: both ranges checked or owned; the stream is `self`'s and is
            // synchronized before returning.
            unsafe {
                check(
                    "cuMemcpyDtoDAsync",
                    sys::cuMemcpyDtoDAsync_v2(dst.ptr, src.ptr, src.len, self.stream),
                )?;
                check("cuStreamSynchronize", sys::cuStreamSynchronize(self.stream))
            }
        })
    }
}

/// Times `passes` passes of `copies` device→device copies `src` → `dst` (same length, on
/// the GPU of `dst`, which must be current) on a stream of their own between two events,
/// after a warm-up pass; returns each pass's seconds (nvbandwidth's method, as
/// `Gpu::pass`).
pub(crate) fn timed_copies(
    dst: &DeviceRange,
    src: &DeviceRange,
    copies: u64,
    passes: usize,
) -> Result<Vec<f64>> {
    if src.len != dst.len {
        return Err(Error::Argument(format!(
            "timed copies: {} bytes into {}",
            src.len, dst.len
        )));
    }
    let ctx = Context::retain(dst.ordinal)?;
    no_panic(|| {
        let mut stream = std::ptr::null_mut();
        let mut ev = [std::ptr::null_mut(); 2];
        // SAFETY: out-pointers valid; the stream and events are destroyed below, after
        // the stream is synchronized; the ranges are checked or owned by the caller for
        // the call.
        unsafe {
            check("cuStreamCreate", sys::cuStreamCreate(&mut stream, 1))?;
            let r = (|| {
                for e in &mut ev {
                    check("cuEventCreate", sys::cuEventCreate(e, 0))?;
                }
                let mut secs = Vec::with_capacity(passes);
                for pass in 0..=passes {
                    check("cuEventRecord", sys::cuEventRecord(ev[0], stream))?;
                    for _ in 0..copies {
                        check(
                            "cuMemcpyDtoDAsync",
                            sys::cuMemcpyDtoDAsync_v2(dst.ptr, src.ptr, src.len, stream),
                        )?;
                    }
                    check("cuEventRecord", sys::cuEventRecord(ev[1], stream))?;
                    check("cuEventSynchronize", sys::cuEventSynchronize(ev[1]))?;
                    let mut ms = 0f32;
                    check(
                        "cuEventElapsedTime",
                        sys::cuEventElapsedTime(&mut ms, ev[0], ev[1]),
                    )?;
                    if pass > 0 {
                        secs.push(f64::from(ms) / 1e3);
                    }
                }
                Ok(secs)
            })();
            sys::cuStreamSynchronize(stream);
            for e in ev {
                if !e.is_null() {
                    sys::cuEventDestroy_v2(e);
                }
            }
            sys::cuStreamDestroy_v2(stream);
            drop(ctx);
            r
        }
    })
}

impl Drop for Stager {
    fn drop(&mut self) {
        let _ = no_panic(|| {
            self.ctx.make_current()?;
            // SAFETY: everything freed was made in `new` (null where it was not, and
            // skipped); the stream is drained first so that no copy uses a chunk.
            unsafe {
                if !self.stream.is_null() {
                    sys::cuStreamSynchronize(self.stream);
                    sys::cuStreamDestroy_v2(self.stream);
                }
                for &e in &self.events {
                    if !e.is_null() {
                        sys::cuEventDestroy_v2(e);
                    }
                }
                for &c in &self.chunks {
                    if !c.is_null() {
                        sys::cuMemFreeHost(c);
                    }
                }
            }
            Ok(())
        });
    }
}
