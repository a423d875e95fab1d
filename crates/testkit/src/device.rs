//! Device windows ([`Endpoint::register_device`]): every RMA call with device memory on
//! either side, and the same refusals as for host windows, with nothing moved. The tests
//! take the device memory from a [`DeviceMaker`]: [`HostBackedDevice`] (host memory behind
//! the [`DeviceMemory`] trait, which checks the backend's logic on any machine) or CUDA
//! memory on a GPU (`accio::device`, run by `ci/device.sh`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use accio::{
    Access, DeviceMemory, DeviceShare, DeviceWindow, Endpoint, Error, ErrorKind, RmaFlags, Window,
    PAGE,
};

use crate::harness::{expect_err, expect_text, guarded, ok, recv_u64s, send_u64s, Isolation};
use crate::pattern;
use crate::Backend;

/// Makes `len` bytes of device memory for a test (`None`: there is none here, and the
/// test says it skipped).
pub type DeviceMaker = fn(usize) -> Option<Arc<dyn DeviceMemory>>;

/// Host memory behind the [`DeviceMemory`] trait: a backend's device-window logic (tables,
/// records, bounds, rights, which copy runs) checked without a GPU. Peers in other
/// processes cannot open it ([`DeviceMemory::share`] refuses).
#[derive(Debug)]
pub struct HostBackedDevice {
    bytes: Mutex<Vec<u8>>,
    /// Every copy into it fails, as a broken driver's would (it stays zeroed).
    failing: bool,
}

impl HostBackedDevice {
    /// `len` zeroed bytes.
    pub fn new(len: usize) -> HostBackedDevice {
        HostBackedDevice {
            bytes: Mutex::new(vec![0; len]),
            failing: false,
        }
    }

    /// `len` zeroed bytes whose driver fails every copy into them.
    pub fn failing(len: usize) -> HostBackedDevice {
        HostBackedDevice {
            failing: true,
            ..HostBackedDevice::new(len)
        }
    }

    /// A [`DeviceMaker`] of this memory.
    pub fn maker(len: usize) -> Option<Arc<dyn DeviceMemory>> {
        Some(Arc::new(HostBackedDevice::new(len)))
    }

    fn bytes(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.bytes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl DeviceMemory for HostBackedDevice {
    fn len(&self) -> usize {
        self.bytes().len()
    }

    fn kind(&self) -> &'static str {
        "host-backed test"
    }

    fn device(&self) -> u32 {
        0
    }

    fn address(&self) -> u64 {
        self.bytes().as_ptr() as u64
    }

    fn read(&self, at: usize, dst: &mut [u8]) -> accio::Result<()> {
        dst.copy_from_slice(&self.bytes()[at..at + dst.len()]);
        Ok(())
    }

    fn write(&self, at: usize, src: &[u8]) -> accio::Result<()> {
        if self.failing {
            return Err(Error::invalid("device write", "the test driver fails"));
        }
        self.bytes()[at..at + src.len()].copy_from_slice(src);
        Ok(())
    }

    fn share(&self) -> accio::Result<DeviceShare> {
        Err(Error::invalid(
            "share",
            "host-backed test memory serves peers in this process only",
        ))
    }
}

/// For backends where the target's CPU copies into its device windows (tcp, mpi): a
/// device copy that fails at the target is a refused write for the initiator (an I/O
/// error naming the window), the rest of its payload is consumed, and the connection goes
/// on.
pub fn device_copy_failure(b: &Backend) {
    let b = b.clone();
    guarded(
        "device_copy_failure",
        secs(60),
        Isolation::Shared,
        move || {
            let (x, y) = b.pair();
            let (x, y) = (&*x, &*y);
            let len = 9 << 20;
            let w = share(
                y,
                x,
                Arc::new(HostBackedDevice::failing(len)),
                Access::READ_WRITE,
            );
            let e = expect_err(
                x.vwrite_to(&vec![7u8; len], w.offset(), RmaFlags::SYNC),
                ErrorKind::Io,
                "a write the target's driver fails",
            );
            expect_text(&e, &["device copy failed"], "a failed device copy");
            send_u64s(x, &[1]);
            assert_eq!(recv_u64s(y), [1], "a message after the failed write");
            let mut back = vec![1u8; 4096];
            ok(
                x.vread_from(&mut back, w.offset(), RmaFlags::SYNC),
                "vread_from after the failed write",
            );
            assert!(
                back.iter().all(|&b| b == 0),
                "the failing driver reads zeros"
            );
        },
    );
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn fill(m: &dyn DeviceMemory, seed: u64) {
    ok(
        m.write(0, &pattern::vec(m.len(), seed, 0)),
        "fill device memory",
    );
}

fn bytes(m: &dyn DeviceMemory) -> Vec<u8> {
    let mut v = vec![0u8; m.len()];
    ok(m.read(0, &mut v), "read device memory");
    v
}

/// Asserts `m` holds stream `seed` except bytes `at..at + len`, which hold stream
/// `hole_seed` from index `hole_start`.
#[track_caller]
fn assert_device(
    m: &dyn DeviceMemory,
    seed: u64,
    hole: Option<(usize, usize, u64, u64)>,
    what: &str,
) {
    let all = bytes(m);
    let (at, len, hs, hstart) = hole.unwrap_or((all.len(), 0, 0, 0));
    pattern::assert_matches(&all[..at], seed, 0, &format!("{what}: bytes before"));
    pattern::assert_matches(
        &all[at..at + len],
        hs,
        hstart,
        &format!("{what}: transferred bytes"),
    );
    pattern::assert_matches(
        &all[at + len..],
        seed,
        (at + len) as u64,
        &format!("{what}: bytes after"),
    );
}

fn host_bytes(w: &Window) -> Vec<u8> {
    let mut v = vec![0u8; w.len()];
    ok(w.read_at(0, &mut v), "read_at");
    v
}

fn fill_host(w: &Window, seed: u64) {
    ok(w.write_at(0, &pattern::vec(w.len(), seed, 0)), "write_at");
}

/// Registers `memory` on `owner` and tells `peer` of it.
fn share(
    owner: &dyn Endpoint,
    peer: &dyn Endpoint,
    memory: Arc<dyn DeviceMemory>,
    access: Access,
) -> DeviceWindow {
    let w = ok(owner.register_device(memory, access), "register_device");
    send_u64s(owner, &[w.offset(), w.len() as u64]);
    assert_eq!(recv_u64s(peer), [w.offset(), w.len() as u64]);
    w
}

fn fence(ep: &dyn Endpoint) {
    let m = ok(ep.fence_mark(), "fence_mark");
    ok(ep.fence_wait(m), "fence_wait");
}

/// Every RMA call with device windows on one side, the other or both, at an odd offset
/// and length of `len`-byte memories from `make`, and `fence_signal` into device words:
/// the bytes arrive exactly, nothing around them changes.
pub fn device_window_rma(b: &Backend, make: DeviceMaker, len: usize) {
    let b = b.clone();
    guarded(
        "device_window_rma",
        secs(120),
        Isolation::Shared,
        move || {
            let (Some(dm), Some(lm)) = (make(len), make(len)) else {
                eprintln!("skipped: no device memory here");
                return;
            };
            let (x, y) = b.pair();
            let (x, y) = (&*x, &*y);
            let dw = share(y, x, dm.clone(), Access::READ_WRITE);
            let ldw = ok(
                x.register_device(lm.clone(), Access::NONE),
                "register_device",
            );
            let hw = ok(y.register(len, Access::READ_WRITE), "register");
            send_u64s(y, &[hw.offset()]);
            recv_u64s(x);
            let lw = ok(x.register(len, Access::NONE), "register");
            let (at, n) = (PAGE + 3, len - 2 * PAGE - 5);
            let src = pattern::vec(n, 9, 0);
            let r = |w: u64| w + at as u64;

            for flags in [RmaFlags::SYNC, RmaFlags::ASYNC] {
                let sync = if flags.sync { "SYNC" } else { "ASYNC" };
                // Host slice → peer device window, and back.
                fill(&*dm, 1);
                ok(
                    x.vwrite_to(&src, r(dw.offset()), flags),
                    "vwrite_to a device window",
                );
                fence(x);
                assert_device(&*dm, 1, Some((at, n, 9, 0)), &format!("vwrite_to {sync}"));
                let mut back = vec![0u8; n];
                ok(
                    x.vread_from(&mut back, r(dw.offset()), flags),
                    "vread_from a device window",
                );
                assert!(back == src, "vread_from a device window {sync}");

                // Local host window ↔ peer device window.
                fill_host(&lw, 2);
                fill(&*dm, 3);
                ok(
                    x.write_to(r(lw.offset()), n, r(dw.offset()), flags),
                    "write_to host → device",
                );
                fence(x);
                assert_device(
                    &*dm,
                    3,
                    Some((at, n, 2, at as u64)),
                    &format!("write_to host → device {sync}"),
                );
                fill_host(&lw, 4);
                ok(
                    x.read_from(r(lw.offset()), n, r(dw.offset()), flags),
                    "read_from device → host",
                );
                let got = host_bytes(&lw);
                pattern::assert_matches(&got[at..at + n], 2, at as u64, "read_from device → host");
                pattern::assert_matches(&got[..at], 4, 0, "read_from device → host: bytes before");

                // Local device window ↔ peer host window.
                fill(&*lm, 5);
                fill_host(&hw, 6);
                ok(
                    x.write_to(r(ldw.offset()), n, r(hw.offset()), flags),
                    "write_to device → host",
                );
                fence(x);
                let got = host_bytes(&hw);
                pattern::assert_matches(&got[at..at + n], 5, at as u64, "write_to device → host");
                pattern::assert_matches(
                    &got[at + n..],
                    6,
                    (at + n) as u64,
                    "write_to device → host: after",
                );
                fill(&*lm, 7);
                ok(
                    x.read_from(r(ldw.offset()), n, r(hw.offset()), flags),
                    "read_from host → device",
                );
                assert_device(
                    &*lm,
                    7,
                    Some((at, n, 5, at as u64)),
                    &format!("read_from host → device {sync}"),
                );

                // Device window → device window, both ways.
                fill(&*lm, 8);
                fill(&*dm, 10);
                ok(
                    x.write_to(r(ldw.offset()), n, r(dw.offset()), flags),
                    "write_to device → device",
                );
                fence(x);
                assert_device(
                    &*dm,
                    10,
                    Some((at, n, 8, at as u64)),
                    &format!("write_to device → device {sync}"),
                );
                fill(&*lm, 11);
                ok(
                    x.read_from(r(ldw.offset()), n, r(dw.offset()), flags),
                    "read_from device → device",
                );
                assert_device(
                    &*lm,
                    11,
                    Some((at, n, 8, at as u64)),
                    &format!("read_from device → device {sync}"),
                );
            }

            // Signals into device words, after the data.
            ok(
                x.check_remote(dw.offset(), len, Access::READ_WRITE),
                "check_remote of a device window",
            );
            fill(&*dm, 12);
            ok(
                x.vwrite_to(&src[..64], dw.offset() + 64, RmaFlags::ASYNC),
                "vwrite_to",
            );
            ok(
                x.fence_signal(
                    Some((ldw.offset() + 8, 0xA5A5)),
                    Some((dw.offset() + 16, 0x5A5A)),
                ),
                "fence_signal into device windows",
            );
            // `fence_signal` returns once the stores are queued; a fence waits for them.
            fence(x);
            let word = |m: &dyn DeviceMemory, at: usize| {
                let mut w = [0u8; 8];
                ok(m.read(at, &mut w), "read a signal word");
                u64::from_le_bytes(w)
            };
            assert_eq!(word(&*dm, 16), 0x5A5A, "remote signal word");
            assert_eq!(word(&*lm, 8), 0xA5A5, "local signal word");
            assert_eq!(
                bytes(&*dm)[64..128],
                src[..64],
                "the data before the signal"
            );
        },
    );
}

/// Device windows refuse what host windows refuse, naming the window, with nothing moved:
/// past the end, a missing right, a withdrawn window; and `map_remote` says a device
/// window is reached with RMA, not mapped.
pub fn device_window_rejection(b: &Backend, make: DeviceMaker, len: usize) {
    let b = b.clone();
    guarded(
        "device_window_rejection",
        secs(60),
        Isolation::Shared,
        move || {
            let (Some(rw), Some(ro), Some(wo)) = (make(len), make(len), make(len)) else {
                eprintln!("skipped: no device memory here");
                return;
            };
            let (x, y) = b.pair();
            let (x, y) = (&*x, &*y);
            let w_rw = share(y, x, rw.clone(), Access::READ_WRITE);
            let w_ro = share(y, x, ro.clone(), Access::READ);
            let w_wo = share(y, x, wo.clone(), Access::WRITE);
            for (m, seed) in [(&rw, 1), (&ro, 2), (&wo, 3)] {
                fill(&**m, seed);
            }
            let lw = ok(x.register(len, Access::NONE), "register");
            fill_host(&lw, 4);
            let range =
                |w: &DeviceWindow| format!("{:#x}..{:#x}", w.offset(), w.offset() + w.len() as u64);
            let data = pattern::vec(16, 5, 0);

            let end = w_rw.offset() + len as u64;
            let past = [
                expect_err(
                    x.vwrite_to(&data, end - 8, RmaFlags::SYNC),
                    ErrorKind::OutOfWindow,
                    "vwrite_to past the end",
                ),
                expect_err(
                    x.write_to(lw.offset(), 16, end - 8, RmaFlags::ASYNC),
                    ErrorKind::OutOfWindow,
                    "write_to past the end",
                ),
                expect_err(
                    x.read_from(lw.offset(), 16, end - 8, RmaFlags::SYNC),
                    ErrorKind::OutOfWindow,
                    "read_from past the end",
                ),
                expect_err(
                    x.vread_from(&mut [0u8; 16], end - 8, RmaFlags::SYNC),
                    ErrorKind::OutOfWindow,
                    "vread_from past the end",
                ),
                expect_err(
                    x.check_remote(end - 8, 16, Access::WRITE),
                    ErrorKind::OutOfWindow,
                    "check_remote past the end",
                ),
            ];
            for e in &past {
                expect_text(
                    e,
                    &[&format!("{:#x}", end - 8), "16", &range(&w_rw), "remote"],
                    "past the end",
                );
            }
            let e = expect_err(
                x.vwrite_to(&data, w_ro.offset() + 8, RmaFlags::SYNC),
                ErrorKind::AccessDenied,
                "vwrite_to a read-only device window",
            );
            expect_text(
                &e,
                &[&range(&w_ro), "(r-)"],
                "write to a read-only device window",
            );
            expect_err(
                x.write_to(lw.offset(), 16, w_ro.offset(), RmaFlags::SYNC),
                ErrorKind::AccessDenied,
                "write_to a read-only device window",
            );
            expect_err(
                x.fence_signal(None, Some((w_ro.offset() + 8, 1))),
                ErrorKind::AccessDenied,
                "fence_signal into a read-only device window",
            );
            let e = expect_err(
                x.vread_from(&mut [0u8; 16], w_wo.offset(), RmaFlags::SYNC),
                ErrorKind::AccessDenied,
                "vread_from a write-only device window",
            );
            expect_text(
                &e,
                &[&range(&w_wo), "(-w)"],
                "read from a write-only device window",
            );
            // A bad local side refuses before the device window is touched.
            expect_err(
                x.write_to(
                    lw.offset() + len as u64 - 8,
                    16,
                    w_rw.offset(),
                    RmaFlags::SYNC,
                ),
                ErrorKind::OutOfWindow,
                "write_to from past the local window",
            );
            if x.capabilities().map_remote {
                let e = expect_err(
                    x.map_remote(w_rw.offset(), 16).map(|_| ()),
                    ErrorKind::InvalidArgument,
                    "map_remote of a device window",
                );
                expect_text(
                    &e,
                    &["device memory", "RMA"],
                    "map_remote of a device window",
                );
            }

            // Withdrawn: refused, as a host window would be.
            ok(y.unregister(w_wo.offset()), "unregister a device window");
            send_u64s(y, &[1]);
            recv_u64s(x);
            expect_err(
                x.vwrite_to(&data, w_wo.offset(), RmaFlags::SYNC),
                ErrorKind::OutOfWindow,
                "vwrite_to a withdrawn device window",
            );
            fence(x);
            assert_device(&*rw, 1, None, "read-write device window after refusals");
            assert_device(&*ro, 2, None, "read-only device window after refusals");
            assert_device(&*wo, 3, None, "write-only device window after refusals");
            let got = host_bytes(&lw);
            pattern::assert_matches(&got, 4, 0, "local window after refused reads");
        },
    );
}
