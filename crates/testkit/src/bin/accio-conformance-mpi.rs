//! The conformance suite on the `mpi` backend, run under `mpirun` (the backend serves only
//! ranks that MPI launched, so `cargo test` cannot run it directly):
//!
//! ```text
//! mpirun -n 1 accio-conformance-mpi [TEST...]   # the suite, both ends in one rank
//! mpirun -n 2 accio-conformance-mpi --pair       # echo and RMA between two ranks
//! ```
//!
//! Tests whose peer is a process the test itself starts are skipped, each with its reason
//! (see [`SKIPPED`]); the `--pair` mode covers two processes instead.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use accio::{Access, DeviceMemory, RmaFlags};
use accio_testkit::{
    device_copy_failure, device_window_rejection, device_window_rma, Backend, HostBackedDevice,
    TESTS,
};

/// Device windows, with host memory behind the device-memory trait (the mpi backend's
/// owner-served path is the same for CUDA memory).
const DEVICE_TESTS: &[(&str, fn(&Backend))] = &[
    ("device_window_rma", |b| {
        device_window_rma(b, HostBackedDevice::maker, 64 << 10)
    }),
    ("device_window_rma_chunks", |b| {
        // Past two staging chunks, so writes and reads keep several in flight.
        device_window_rma(b, HostBackedDevice::maker, 9 << 20)
    }),
    ("device_window_rejection", |b| {
        device_window_rejection(b, HostBackedDevice::maker, 4 << 10)
    }),
    ("device_copy_failure", device_copy_failure),
];

/// Suite tests that cannot run on `mpi`, and why.
const SKIPPED: &[(&str, &str)] = &[
    ("calls_after_peer_exit_fail", PEER_PROCESS),
    ("two_processes_echo", PEER_PROCESS),
    ("two_processes_rma", PEER_PROCESS),
    ("cpu_free_rma_with_stopped_peer_process", PEER_PROCESS),
    ("peer_death_during_recv", DEATH),
    ("peer_death_during_send", DEATH),
    ("peer_death_during_rma", DEATH),
    ("peer_death_seen_by_polling", DEATH),
];

const PEER_PROCESS: &str = "its peer is a process the test starts itself, which cannot join \
     an MPI world; --pair under mpirun -n 2 checks two processes";
const DEATH: &str = "a SIGKILLed MPI rank takes the job with it (mpirun aborts every rank): \
     MPI offers no surviving peer to check";

static PORT: AtomicU32 = AtomicU32::new(1);

fn fresh_mpi_addr() -> String {
    let (rank, _) = accio::mpi::init().expect("MPI init");
    format!("mpi://{rank}:{}", PORT.fetch_add(1, Ordering::Relaxed))
}

fn pair() -> Result<(), String> {
    let (rank, size) = accio::mpi::init().map_err(|e| e.to_string())?;
    if size != 2 {
        return Err(format!(
            "--pair needs exactly 2 ranks, this world has {size}"
        ));
    }
    let t = Duration::from_secs(10);
    let ep = if rank == 0 {
        let l = accio::listen("mpi://0:5").map_err(|e| e.to_string())?;
        // Rank 1 may connect only once the listener exists.
        accio::mpi::allgather(&[1]).map_err(|e| e.to_string())?;
        l.accept(Some(t)).map_err(|e| e.to_string())?
    } else {
        accio::mpi::allgather(&[1]).map_err(|e| e.to_string())?;
        accio::connect("mpi://0:5", t).map_err(|e| e.to_string())?
    };
    let e = |e: accio::Error| e.to_string();
    let win = ep.register(4 << 20, Access::READ_WRITE).map_err(e)?;
    ep.send(&win.offset().to_le_bytes()).map_err(e)?;
    let mut m = Vec::new();
    ep.recv_timeout(&mut m, Some(t)).map_err(e)?;
    let remote = u64::from_le_bytes(m[..8].try_into().map_err(|_| "short offset message")?);
    // Echo of messages up to 4 MiB, then a 4 MiB write signalled by fence_signal.
    for size in [0usize, 1, 8, 4096, 65536, 4 << 20] {
        let msg: Vec<u8> = (0..size).map(|i| (i * 31 + rank) as u8).collect();
        let want: Vec<u8> = (0..size).map(|i| (i * 31 + 1 - rank) as u8).collect();
        // Rank 0 speaks first: two large sends head to head would each wait for a receive.
        if rank == 0 {
            ep.send(&msg).map_err(e)?;
        }
        ep.recv_timeout(&mut m, Some(t)).map_err(e)?;
        if rank == 1 {
            ep.send(&msg).map_err(e)?;
        }
        if m != want {
            return Err(format!("rank {rank}: message of {size} bytes differs"));
        }
    }
    let data: Vec<u8> = (0..(4 << 20) - 8).map(|i| (i * 7 + rank) as u8).collect();
    ep.vwrite_to(&data, remote + 8, RmaFlags::ASYNC)
        .map_err(e)?;
    ep.fence_signal(None, Some((remote, 1))).map_err(e)?;
    win.wait_u64(0, 1, Some(t)).map_err(e)?;
    let mut got = vec![0u8; data.len()];
    win.read_at(8, &mut got).map_err(e)?;
    if got
        .iter()
        .enumerate()
        .any(|(i, &b)| b != (i * 7 + 1 - rank) as u8)
    {
        return Err(format!("rank {rank}: RMA data differs"));
    }
    // read_from of the peer's window: the peer's own pattern.
    let mut back = vec![0u8; 4096];
    ep.vread_from(&mut back, remote + 8, RmaFlags::SYNC)
        .map_err(e)?;
    if back
        .iter()
        .enumerate()
        .any(|(i, &b)| b != (i * 7 + rank) as u8)
    {
        return Err(format!("rank {rank}: vread_from data differs"));
    }
    device_pair(&*ep, rank)?;
    ep.send(b"done").map_err(e)?;
    ep.recv_timeout(&mut m, Some(t)).map_err(e)?;
    accio::mpi::allgather(&[1]).map_err(|e| e.to_string())?;
    println!(
        "rank {rank}: pair ok (messages 0 B..4 MiB, 4 MiB write + fence_signal, read, \
         9 MiB into and out of the peer's device window)"
    );
    Ok(())
}

/// Each rank writes 9 MiB (three staging chunks) into the other's device window and reads
/// them back, then checks its own device memory. Rank 1 first sleeps, making no MPI call,
/// so its progress thread serves rank 0's requests; then each serves the other's while it
/// waits for its own answers.
fn device_pair(ep: &dyn accio::Endpoint, rank: usize) -> Result<(), String> {
    let e = |e: accio::Error| e.to_string();
    let t = Some(Duration::from_secs(10));
    let len = 9 << 20;
    let mine = Arc::new(HostBackedDevice::new(len));
    let w = ep
        .register_device(mine.clone(), Access::READ_WRITE)
        .map_err(e)?;
    ep.send(&w.offset().to_le_bytes()).map_err(e)?;
    let mut m = Vec::new();
    ep.recv_timeout(&mut m, t).map_err(e)?;
    let remote = u64::from_le_bytes(m[..8].try_into().map_err(|_| "short offset message")?);
    let stream = |r: usize| -> Vec<u8> { (0..len).map(|i| (i * 13 + r * 101) as u8).collect() };
    let data = stream(rank);
    if rank == 1 {
        std::thread::sleep(Duration::from_millis(200));
    }
    ep.vwrite_to(&data, remote, RmaFlags::SYNC).map_err(e)?;
    let mut back = vec![0u8; len];
    ep.vread_from(&mut back, remote, RmaFlags::SYNC)
        .map_err(e)?;
    if back != data {
        return Err(format!(
            "rank {rank}: the peer's device window read back differs"
        ));
    }
    ep.send(b"written").map_err(e)?;
    ep.recv_timeout(&mut m, t).map_err(e)?;
    let mut got = vec![0u8; len];
    mine.read(0, &mut got).map_err(e)?;
    if got != stream(1 - rank) {
        return Err(format!(
            "rank {rank}: the peer's write into this device window differs"
        ));
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--pair") {
        return match pair() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Err(e) = accio::mpi::init() {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    let backend = Backend::new("mpi", fresh_mpi_addr);
    let (mut passed, mut failed, mut skipped) = (0, Vec::new(), 0);
    for (name, test) in TESTS.iter().chain(DEVICE_TESTS) {
        if !args.is_empty() && !args.iter().any(|a| a == name) {
            continue;
        }
        if let Some((_, why)) = SKIPPED.iter().find(|(n, _)| n == name) {
            println!("test {name} ... skipped: {why}");
            skipped += 1;
            continue;
        }
        match catch_unwind(AssertUnwindSafe(|| test(&backend))) {
            Ok(()) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Err(_) => {
                println!("test {name} ... FAILED");
                failed.push(*name);
            }
        }
    }
    println!(
        "mpi conformance: {passed} passed, {} failed, {skipped} skipped{}",
        failed.len(),
        if failed.is_empty() {
            String::new()
        } else {
            format!(" ({})", failed.join(", "))
        }
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
