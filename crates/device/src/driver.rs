//! The NVIDIA driver API calls (the `cuda` feature): the only module with raw driver calls.
//!
//! Through cudarc's `driver::sys` bindings, loaded from `libcuda.so.1` at the first call.
//! [`init`] asks `is_culib_present` before anything else: every other binding panics when
//! the library is missing. Every public entry runs under [`crate::no_panic`].
//!
//! A [`Gpu`] holds what one GPU's measurements need, allocated once at the largest size: the
//! device's primary context, two non-blocking streams, three events, two device buffers,
//! two pinned host buffers and one pageable one. A pass enqueues its copies between two
//! events and times them on the GPU (nvbandwidth's method); its `Drop` frees everything,
//! also after a failed allocation half-way through [`Gpu::open`].

use std::ffi::{c_char, c_int, c_void};
use std::time::Instant;

use cudarc::driver::sys::{self, CUresult};

use crate::copy::{normalize_bus_id, Copy, HostMemory, Test, Way, LATENCY_BYTES};
use crate::{no_panic, DeviceInfo, Error, Result};

/// `r` as a `Result`, naming the driver call that returned it.
pub(crate) fn check(call: &'static str, r: CUresult) -> Result<()> {
    if r == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Driver {
            call,
            name: format!("{r:?}"),
            code: r as u32,
        })
    }
}

/// The driver's version as `12.8`, or why it is unknown.
fn driver_version() -> String {
    let mut v: c_int = 0;
    // SAFETY: the library is present (callers checked); `v` is a valid out-pointer.
    let r = unsafe { sys::cuDriverGetVersion(&mut v) };
    if r == CUresult::CUDA_SUCCESS {
        format!("{}.{}", v / 1000, (v % 1000) / 10)
    } else {
        format!("version unknown: {r:?}")
    }
}

/// Loads the driver and initializes it; `Ok` when it sees at least one GPU.
pub(crate) fn init() -> Result<()> {
    no_panic(|| {
        // SAFETY: tries to open the library by its names and closes it again; no other
        // state is touched.
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::NoDriver);
        }
        // SAFETY: the library is present; cuInit takes flags 0 and may be called again.
        let r = unsafe { sys::cuInit(0) };
        if r == CUresult::CUDA_ERROR_NO_DEVICE {
            return Err(Error::NoDevice {
                driver: driver_version(),
            });
        }
        check("cuInit", r)?;
        let mut n: c_int = 0;
        // SAFETY: initialized above; `n` is a valid out-pointer.
        check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) })?;
        if n <= 0 {
            return Err(Error::NoDevice {
                driver: driver_version(),
            });
        }
        Ok(())
    })
}

/// A NUL-terminated string the driver wrote into `buf`.
fn c_string(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

pub(crate) fn device(ordinal: u32) -> Result<sys::CUdevice> {
    let mut dev: sys::CUdevice = 0;
    // SAFETY: the driver is initialized (callers ran `init`); `dev` is a valid out-pointer.
    check("cuDeviceGet", unsafe {
        sys::cuDeviceGet(&mut dev, ordinal as c_int)
    })?;
    Ok(dev)
}

fn info(ordinal: u32) -> Result<DeviceInfo> {
    let dev = device(ordinal)?;
    let mut name = [0 as c_char; 256];
    let mut bus = [0 as c_char; 64];
    let mut mem: usize = 0;
    // SAFETY: `dev` is a valid device; each buffer is as long as the length passed with it.
    unsafe {
        check(
            "cuDeviceGetName",
            sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, dev),
        )?;
        check(
            "cuDeviceGetPCIBusId",
            sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as c_int, dev),
        )?;
        check("cuDeviceTotalMem", sys::cuDeviceTotalMem_v2(&mut mem, dev))?;
    }
    let bus = c_string(&bus);
    Ok(DeviceInfo {
        ordinal,
        name: c_string(&name),
        memory_bytes: mem as u64,
        pci_bus_id: normalize_bus_id(&bus).unwrap_or(bus),
    })
}

pub(crate) fn devices() -> Result<Vec<DeviceInfo>> {
    init()?;
    no_panic(|| {
        let mut n: c_int = 0;
        // SAFETY: initialized by `init`; `n` is a valid out-pointer.
        check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) })?;
        (0..n.max(0) as u32).map(info).collect()
    })
}

/// One GPU opened for measuring (see the module docs).
pub(crate) struct Gpu {
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    streams: [sys::CUstream; 2],
    start: sys::CUevent,
    mid: sys::CUevent,
    stop: sys::CUevent,
    dev_a: sys::CUdeviceptr,
    dev_b: sys::CUdeviceptr,
    pinned_a: *mut c_void,
    pinned_b: *mut c_void,
    pageable: Vec<u8>,
    len: usize,
    /// Mapped pinned memory (`CU_MEMHOSTALLOC_DEVICEMAP`): the ping word at offset 0 and
    /// the pong word at [`PONG`], a cache line apart; `flags_dev` is its device address.
    flags: *mut c_void,
    flags_dev: sys::CUdeviceptr,
    /// The last value the ping word took (values only grow, so a wait never sees an old
    /// one).
    seq: u32,
    /// A stream that did not drain in time waits on the GPU still: nothing more is
    /// enqueued, and [`Drop`] leaks the resources instead of waiting for ever.
    wedged: bool,
}

/// Byte offset of the pong word in the flag page.
const PONG: usize = 128;

/// How long the host waits for the GPU's answer in a flag round trip before giving up.
const FLAG_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Flag round trips enqueued at a time (see [`Gpu::flag_pass`]).
const FLAG_BATCH: u32 = 8;

impl Gpu {
    /// Opens GPU `ordinal` with buffers of `len` bytes.
    pub(crate) fn open(ordinal: u32, len: usize) -> Result<Gpu> {
        init()?;
        no_panic(|| {
            let len = len.max(LATENCY_BYTES as usize);
            let mut g = Gpu {
                dev: device(ordinal)?,
                ctx: std::ptr::null_mut(),
                streams: [std::ptr::null_mut(); 2],
                start: std::ptr::null_mut(),
                mid: std::ptr::null_mut(),
                stop: std::ptr::null_mut(),
                dev_a: 0,
                dev_b: 0,
                pinned_a: std::ptr::null_mut(),
                pinned_b: std::ptr::null_mut(),
                pageable: Vec::new(),
                len,
                flags: std::ptr::null_mut(),
                flags_dev: 0,
                seq: 0,
                wedged: false,
            };
            // SAFETY: each call gets a valid out-pointer into `g`, whose Drop releases
            // whatever was created if a later call fails. The context is made current
            // before anything is created in it.
            unsafe {
                check(
                    "cuDevicePrimaryCtxRetain",
                    sys::cuDevicePrimaryCtxRetain(&mut g.ctx, g.dev),
                )?;
                check("cuCtxSetCurrent", sys::cuCtxSetCurrent(g.ctx))?;
                for s in &mut g.streams {
                    // CU_STREAM_NON_BLOCKING: no implicit sync with the legacy stream.
                    check("cuStreamCreate", sys::cuStreamCreate(s, 1))?;
                }
                for e in [&mut g.start, &mut g.mid, &mut g.stop] {
                    check("cuEventCreate", sys::cuEventCreate(e, 0))?;
                }
                for d in [&mut g.dev_a, &mut g.dev_b] {
                    check("cuMemAlloc", sys::cuMemAlloc_v2(d, len))?;
                    check("cuMemsetD8", sys::cuMemsetD8_v2(*d, 0xa5, len))?;
                }
                for h in [&mut g.pinned_a, &mut g.pinned_b] {
                    check("cuMemHostAlloc", sys::cuMemHostAlloc(h, len, 0))?;
                    // Fault every page in before any timing.
                    std::ptr::write_bytes(*h as *mut u8, 0x5a, len);
                }
                check(
                    "cuMemHostAlloc",
                    sys::cuMemHostAlloc(
                        &mut g.flags,
                        2 * PONG,
                        sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE,
                    ),
                )?;
                std::ptr::write_bytes(g.flags as *mut u8, 0, 2 * PONG);
                check(
                    "cuMemHostGetDevicePointer",
                    sys::cuMemHostGetDevicePointer_v2(&mut g.flags_dev, g.flags, 0),
                )?;
            }
            // Written, so that every page is present before any timing.
            g.pageable = vec![0x5a; len];
            Ok(g)
        })
    }

    /// The device memory's copy rate in GB/s ([`crate::copy::memory_copy_gbps`]).
    pub(crate) fn memory_copy_gbps(&self) -> Option<f64> {
        let clock = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE;
        let width = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH;
        self.attribute(clock)
            .zip(self.attribute(width))
            .and_then(|(c, w)| crate::copy::memory_copy_gbps(c, w))
    }

    /// The GPU's L2 cache in bytes, where the driver says.
    pub(crate) fn l2_bytes(&self) -> Option<u64> {
        self.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
    }

    /// A positive device attribute, or `None` where the driver gives none.
    fn attribute(&self, a: sys::CUdevice_attribute) -> Option<u64> {
        let mut v: c_int = 0;
        // SAFETY: `self.dev` is a valid device; `v` a valid out-pointer.
        no_panic(|| Ok(unsafe { sys::cuDeviceGetAttribute(&mut v, a, self.dev) }))
            .ok()
            .filter(|&r| r == CUresult::CUDA_SUCCESS && v > 0)
            .map(|_| v as u64)
    }

    /// The host buffer of `host` memory for stream `k`'s copies.
    fn host(&mut self, host: Option<HostMemory>, k: usize) -> *mut c_void {
        match host {
            Some(HostMemory::Pageable) => self.pageable.as_mut_ptr().cast(),
            _ if k == 0 => self.pinned_a,
            _ => self.pinned_b,
        }
    }

    /// Enqueues one copy of `size` bytes of `copy` on stream `k`.
    fn enqueue(
        &mut self,
        copy: Copy,
        host: Option<HostMemory>,
        k: usize,
        size: usize,
    ) -> Result<()> {
        let h = self.host(host, k);
        let d = if k == 0 { self.dev_a } else { self.dev_b };
        let stream = self.streams[k];
        // The copy's direction is named, as `cudaMemcpyAsync` with an explicit kind does
        // (the CUDA C reference), rather than the generic `cuMemcpyAsync`, which first
        // looks both addresses up. A suspect, not yet confirmed on a GPU, for the H200 run
        // whose 8-byte copies took 1.18x the reference's time and 64 KiB device copies ran
        // at 0.71x its rate.
        // SAFETY: `d` and `h` are buffers of `self.len >= size` bytes owned by `self`
        // (device allocations, pinned or pageable host memory), on a stream of the current
        // context. The host buffers stay alive and untouched until the pass synchronizes.
        unsafe {
            match copy {
                Copy::HostToDevice => check(
                    "cuMemcpyHtoDAsync",
                    sys::cuMemcpyHtoDAsync_v2(d, h, size, stream),
                ),
                Copy::DeviceToHost => check(
                    "cuMemcpyDtoHAsync",
                    sys::cuMemcpyDtoHAsync_v2(h, d, size, stream),
                ),
                Copy::DeviceToDevice => check(
                    "cuMemcpyDtoDAsync",
                    sys::cuMemcpyDtoDAsync_v2(self.dev_b, self.dev_a, size, stream),
                ),
                // Callers split it into its two ways.
                Copy::Bidirectional => unreachable!("a bidirectional copy is enqueued per way"),
            }
        }
    }

    /// One timed pass of `test`: `copies` copies of `size` bytes between two events;
    /// returns the events' elapsed time in seconds.
    pub(crate) fn pass(&mut self, test: Test, size: usize, copies: u64) -> Result<f64> {
        if size > self.len {
            return Err(Error::Argument(format!(
                "a {size}-byte copy does not fit the {}-byte buffers",
                self.len
            )));
        }
        no_panic(|| {
            let [s0, s1] = self.streams;
            let bidir = test.copy == Copy::Bidirectional;
            // SAFETY: streams and events belong to the current context and live as long
            // as `self`; the copies' buffers are `self`'s.
            unsafe {
                check("cuCtxSetCurrent", sys::cuCtxSetCurrent(self.ctx))?;
                check("cuEventRecord", sys::cuEventRecord(self.start, s0))?;
                if bidir {
                    check(
                        "cuStreamWaitEvent",
                        sys::cuStreamWaitEvent(s1, self.start, 0),
                    )?;
                }
                for _ in 0..copies {
                    if bidir {
                        self.enqueue(Copy::HostToDevice, test.host, 0, size)?;
                        self.enqueue(Copy::DeviceToHost, test.host, 1, size)?;
                    } else {
                        self.enqueue(test.copy, test.host, 0, size)?;
                    }
                }
                if bidir {
                    check("cuEventRecord", sys::cuEventRecord(self.mid, s1))?;
                    check("cuStreamWaitEvent", sys::cuStreamWaitEvent(s0, self.mid, 0))?;
                }
                check("cuEventRecord", sys::cuEventRecord(self.stop, s0))?;
                check("cuEventSynchronize", sys::cuEventSynchronize(self.stop))?;
                let mut ms: f32 = 0.0;
                check(
                    "cuEventElapsedTime",
                    sys::cuEventElapsedTime(&mut ms, self.start, self.stop),
                )?;
                Ok(f64::from(ms) / 1e3)
            }
        })
    }

    /// One latency pass: `copies` small copies `way`, each followed by a stream
    /// synchronize; returns the host's wall time in seconds.
    pub(crate) fn latency_pass(&mut self, way: Way, copies: u64) -> Result<f64> {
        let copy = match way {
            Way::HostToDevice => Copy::HostToDevice,
            Way::DeviceToHost => Copy::DeviceToHost,
        };
        no_panic(|| {
            // SAFETY: the context is `self`'s.
            check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(self.ctx) })?;
            let t = Instant::now();
            for _ in 0..copies {
                self.enqueue(copy, Some(HostMemory::Pinned), 0, LATENCY_BYTES as usize)?;
                // SAFETY: stream 0 is `self`'s.
                check("cuStreamSynchronize", unsafe {
                    sys::cuStreamSynchronize(self.streams[0])
                })?;
            }
            Ok(t.elapsed().as_secs_f64())
        })
    }
}

impl Gpu {
    /// One flag round-trip pass: the GPU's stream waits until the ping word in mapped
    /// pinned memory reaches a value (`cuStreamWaitValue32`: the GPU polls host memory over
    /// PCIe), then writes it to the pong word (`cuStreamWriteValue32`); the host writes
    /// ping and spins on pong, `copies` times. Returns the host's wall time in seconds.
    ///
    /// The operations are enqueued [`FLAG_BATCH`] round trips at a time, and those round
    /// trips run before the next batch is enqueued: enqueueing them all first deadlocks
    /// once the stream's command queue is full (the enqueue blocks until the GPU moves on,
    /// and the GPU waits for a ping the host has not written yet: seen on an H200 with
    /// 1000 round trips). A GPU that never answers costs [`FLAG_TIMEOUT`] and an error,
    /// never a hang: the stream is drained with a bounded wait, and one that does not drain
    /// marks the GPU wedged (nothing more is enqueued, and its drop leaks rather than
    /// waits).
    pub(crate) fn flag_pass(&mut self, copies: u64) -> Result<f64> {
        use std::sync::atomic::{AtomicU32, Ordering};
        if self.wedged {
            return Err(Error::Argument(
                "flag round trip: the GPU's stream is still waiting from an earlier pass".into(),
            ));
        }
        no_panic(|| {
            let s0 = self.streams[0];
            let n = copies.min(u64::from(u32::MAX / 4)) as u32;
            let geq = sys::CUstreamWaitValue_flags_enum::CU_STREAM_WAIT_VALUE_GEQ as u32;
            // SAFETY: the page is 2 * PONG bytes, aligned to a page; both words are
            // 4-byte aligned and only ever accessed atomically on the host.
            let (ping, pong) = unsafe {
                (
                    &*(self.flags as *const AtomicU32),
                    &*((self.flags as *const u8).add(PONG) as *const AtomicU32),
                )
            };
            // SAFETY: the context is `self`'s.
            check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(self.ctx) })?;
            let mut secs = 0.0;
            let mut done = 0u32;
            let mut answered = true;
            while done < n && answered {
                let batch = (n - done).min(FLAG_BATCH);
                let base = self.seq;
                // SAFETY: both words lie in the flag page that `self` owns, mapped for
                // the device at `flags_dev`; the stream is drained (or the GPU marked
                // wedged) before this pass returns.
                let queued = (1..=batch).try_for_each(|k| unsafe {
                    check(
                        "cuStreamWaitValue32",
                        sys::cuStreamWaitValue32_v2(s0, self.flags_dev, base + k, geq),
                    )?;
                    check(
                        "cuStreamWriteValue32",
                        sys::cuStreamWriteValue32_v2(s0, self.flags_dev + PONG as u64, base + k, 0),
                    )
                });
                if let Err(e) = queued {
                    // Release the waits queued before the failure, and drain them.
                    ping.store(base + batch, Ordering::Release);
                    self.seq = base + batch;
                    self.drain(s0)?;
                    return Err(e);
                }
                let t = Instant::now();
                for k in 1..=batch {
                    ping.store(base + k, Ordering::Release);
                    let asked = Instant::now();
                    while pong.load(Ordering::Acquire) != base + k {
                        std::hint::spin_loop();
                        if asked.elapsed() > FLAG_TIMEOUT {
                            answered = false;
                            break;
                        }
                    }
                    if !answered {
                        break;
                    }
                }
                secs += t.elapsed().as_secs_f64();
                // Release every wait of the batch still queued (values only grow).
                ping.store(base + batch, Ordering::Release);
                self.seq = base + batch;
                done += batch;
                self.drain(s0)?;
            }
            if !answered {
                return Err(Error::Argument(format!(
                    "flag round trip: the GPU did not answer within {} s",
                    FLAG_TIMEOUT.as_secs()
                )));
            }
            Ok(secs)
        })
    }

    /// Waits for stream `s` to finish its work, at most [`FLAG_TIMEOUT`]; past it the GPU
    /// is marked wedged and the error says so.
    fn drain(&mut self, s: sys::CUstream) -> Result<()> {
        let t = Instant::now();
        loop {
            // SAFETY: `s` is one of `self`'s streams.
            let r = unsafe { sys::cuStreamQuery(s) };
            if r == CUresult::CUDA_SUCCESS {
                return Ok(());
            }
            if r != CUresult::CUDA_ERROR_NOT_READY {
                return check("cuStreamQuery", r);
            }
            if t.elapsed() > FLAG_TIMEOUT {
                self.wedged = true;
                return Err(Error::Argument(format!(
                    "flag round trip: the GPU's stream did not finish within {} s",
                    FLAG_TIMEOUT.as_secs()
                )));
            }
            std::thread::yield_now();
        }
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        if self.ctx.is_null() || self.wedged {
            return;
        }
        let _ = no_panic(|| {
            // SAFETY: everything freed here was created by `open` in `self.ctx` (null or
            // zero where it was not, and skipped); the streams are synchronized first so
            // that no copy still uses a buffer. Errors are ignored: nothing more can be
            // done about them while dropping.
            unsafe {
                sys::cuCtxSetCurrent(self.ctx);
                for &s in &self.streams {
                    if !s.is_null() {
                        sys::cuStreamSynchronize(s);
                        sys::cuStreamDestroy_v2(s);
                    }
                }
                for e in [self.start, self.mid, self.stop] {
                    if !e.is_null() {
                        sys::cuEventDestroy_v2(e);
                    }
                }
                for d in [self.dev_a, self.dev_b] {
                    if d != 0 {
                        sys::cuMemFree_v2(d);
                    }
                }
                for h in [self.pinned_a, self.pinned_b, self.flags] {
                    if !h.is_null() {
                        sys::cuMemFreeHost(h);
                    }
                }
                sys::cuDevicePrimaryCtxRelease_v2(self.dev);
            }
            Ok(())
        });
    }
}
