//! `accio run -n N PROGRAM [ARGS]`: N local ranks of one world without MPI, and
//! `accio world-check`: a program for such a world that connects every pair over every
//! backend that can serve it and says what the rule chose and why.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::ExitWith;
use accio::{Access, RmaFlags};
use accio_world::rendezvous::Rendezvous;
use accio_world::World;
use anyhow::{bail, Context};

/// Arguments of `accio run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Number of ranks to start.
    #[arg(short = 'n', long = "np", value_name = "N")]
    n: usize,
    /// Seconds the ranks may take to join the world (and each pair to connect).
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    timeout: f64,
    /// Start more than 64 ranks per CPU this process may run on (refused without it, as a
    /// typo such as `-n 100000` would start that many processes). `ACCIO_OVERSUBSCRIBE=1`
    /// does the same, also for `accio demo laplace`, which starts `accio run` itself.
    #[arg(long)]
    oversubscribe: bool,
    /// Pin each rank to a CPU of its own (`core`, rank r on the r-th CPU this process may
    /// use, as `mpirun --bind-to core` does), or let them float (`none`). `auto`: `core`
    /// when there is a CPU for every rank, else `none`.
    #[arg(long, default_value = "auto", value_parser = ["auto", "core", "none"], value_name = "HOW")]
    bind_to: String,
    /// The program and its arguments, started once per rank. Every rank must join the
    /// world (`accio_world::World::from_env`), as every MPI rank calls `MPI_Init`. The
    /// program `accio` is this accio, whether or not it is on PATH.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    program: Vec<String>,
}

fn describe(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("status {c}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => s.to_string(),
    }
}

/// Ranks per CPU `accio run` starts at most without `--oversubscribe`: far more than any
/// useful world (one rank per core is the rule), far fewer than a typo's hundred thousand.
const RANKS_PER_CPU: usize = 64;

/// The environment variable that allows more ranks than [`RANKS_PER_CPU`] per CPU.
const OVERSUBSCRIBE_ENV: &str = "ACCIO_OVERSUBSCRIBE";

/// Refuses a rank count of 0, or above [`RANKS_PER_CPU`] per CPU this process may run on
/// unless `force` or `ACCIO_OVERSUBSCRIBE=1`.
pub fn check_ranks(n: usize, force: bool) -> anyhow::Result<()> {
    if n == 0 {
        return Err(ExitWith::usage("-n 0: a world needs at least one rank").into());
    }
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
    let cap = cpus.saturating_mul(RANKS_PER_CPU);
    let forced = force || std::env::var_os(OVERSUBSCRIBE_ENV).is_some_and(|v| v == "1");
    if n > cap && !forced {
        return Err(ExitWith::usage(format!(
            "{n} ranks: more than {RANKS_PER_CPU} per CPU this process may run on ({cpus} \
             CPUs, so at most {cap}); pass --oversubscribe (or set {OVERSUBSCRIBE_ENV}=1) to \
             start them anyway"
        ))
        .into());
    }
    Ok(())
}

/// The signal that asked `accio run` to stop (SIGINT, SIGTERM, SIGHUP), or 0.
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop_signal(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP_SIGNAL.store(sig, Ordering::SeqCst);
}

/// Catches SIGINT, SIGTERM and SIGHUP, so that `accio run` ends its ranks and removes its
/// rendezvous socket before it exits (the ranks get the default dispositions back at exec).
fn catch_stop_signals() -> anyhow::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction is valid; the handler only stores to an atomic.
        let r = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop_signal as *const () as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("accio run: installing the handler of signal {sig}"));
        }
    }
    Ok(())
}

fn stop_signal() -> Option<libc::c_int> {
    Some(STOP_SIGNAL.load(Ordering::SeqCst)).filter(|&s| s != 0)
}

/// Ends every rank still running: SIGTERM, then SIGKILL for those alive after `grace`.
fn end_all(children: &mut [Child], grace: Duration) {
    for c in children.iter_mut() {
        if let Ok(None) = c.try_wait() {
            // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child.
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        }
    }
    let t0 = Instant::now();
    while t0.elapsed() < grace
        && children
            .iter_mut()
            .any(|c| matches!(c.try_wait(), Ok(None)))
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    kill_all(children);
}

/// After a stop signal: ends the ranks, removes the rendezvous socket, then dies of the
/// same signal (so a shell or a batch system sees what ended it).
fn stop(sig: libc::c_int, children: &mut [Child], rdv: Rendezvous) -> ! {
    end_all(children, Duration::from_secs(1));
    drop(rdv);
    eprintln!("accio run: ended by signal {sig}; the ranks were ended");
    // SAFETY: restoring the default disposition and raising the signal in this thread.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
    std::process::exit(128 + sig);
}

/// The longest piece of a rank's stderr written as one line.
const MAX_LINE: u64 = 64 * 1024;

/// Where a rank's output goes: ours, stdout or stderr.
#[derive(Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

/// Copies a rank's stdout or stderr to ours line by line, each line written with one call,
/// so that ranks' lines never interleave mid-line (as `print(a, b)` in Python, which
/// writes each piece apart, would on a shared descriptor). Stderr lines are prefixed with
/// the rank; stdout lines are not, as mpirun's are not. Tells `done` when the pipe closed.
fn forward(
    rank: usize,
    pipe: impl Read + Send + 'static,
    to: Stream,
    done: mpsc::Sender<()>,
) -> std::io::Result<()> {
    let (prefix, name) = match to {
        Stream::Stdout => (String::new(), "stdout"),
        Stream::Stderr => (format!("[rank {rank}] "), "stderr"),
    };
    std::thread::Builder::new()
        .name(format!("rank-{rank}-{name}"))
        .stack_size(64 * 1024)
        .spawn(move || {
            let mut r = BufReader::new(pipe);
            let mut line = Vec::new();
            loop {
                line.clear();
                line.extend_from_slice(prefix.as_bytes());
                match (&mut r).take(MAX_LINE).read_until(b'\n', &mut line) {
                    Ok(0) => break,
                    Ok(_) => {
                        if line.last() != Some(&b'\n') {
                            line.push(b'\n');
                        }
                        let _ = match to {
                            Stream::Stdout => {
                                let mut out = std::io::stdout().lock();
                                out.write_all(&line).and_then(|()| out.flush())
                            }
                            Stream::Stderr => std::io::stderr().lock().write_all(&line),
                        };
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let _ = done.send(());
        })
        .map(|_| ())
}

fn kill_all(children: &mut [Child]) {
    for c in children.iter_mut() {
        if let Ok(None) = c.try_wait() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts the ranks, serves their address exchange, and waits for them; the first rank to
/// fail ends the others (as mpirun does) and is named in the error.
///
/// Each rank gets a fresh per-job `ACCIO_TCP_SECRET` (one already set is passed on), and
/// each is pinned to a CPU of its own when there is one for every rank (`--bind-to`);
/// its stdout and stderr are copied to ours line by line (stderr lines prefixed with
/// `[rank N] `), so that ranks' lines never interleave mid-line. On
/// SIGINT, SIGTERM or SIGHUP the ranks are ended and the rendezvous socket removed.
pub fn run(a: RunArgs) -> anyhow::Result<()> {
    check_ranks(a.n, a.oversubscribe)?;
    if !(a.timeout.is_finite() && a.timeout > 0.0) {
        return Err(ExitWith::usage(format!(
            "--timeout {}: must be a positive number of seconds",
            a.timeout
        ))
        .into());
    }
    let timeout = Duration::from_secs_f64(a.timeout);
    let cpus = crate::cpus::allowed().context("accio run: reading the CPUs it may use")?;
    let pinned = match a.bind_to.as_str() {
        "core" if a.n > cpus.len() => {
            return Err(ExitWith::usage(format!(
                "--bind-to core: {} ranks, but {} CPU(s) to pin them to; pass --bind-to none \
                 to let them share",
                a.n,
                cpus.len()
            ))
            .into())
        }
        "core" => true,
        "auto" => a.n <= cpus.len(),
        _ => false,
    };
    let columns = crate::term::stdout_width();
    catch_stop_signals()?;
    let secret = match std::env::var_os("ACCIO_TCP_SECRET") {
        Some(s) => s,
        None => accio_world::rendezvous::job_secret()
            .context("accio run")?
            .into(),
    };
    // `accio run -n 4 accio world-check` means this accio, not whichever PATH finds first
    // (or none, for a build run from its target folder).
    let program = match a.program[0].as_str() {
        "accio" => std::env::current_exe()
            .context("accio run: finding this accio's own executable")?
            .into_os_string(),
        p => p.into(),
    };
    let rdv = Rendezvous::bind(&std::env::temp_dir(), a.n).context("accio run")?;
    let mut children = Vec::with_capacity(a.n);
    let (done_tx, done_rx) = mpsc::channel();
    for rank in 0..a.n {
        if let Some(sig) = stop_signal() {
            stop(sig, &mut children, rdv);
        }
        let mut cmd = Command::new(&program);
        // The ranks write into pipes (forwarded line by line), not to the terminal: they
        // learn its width from COLUMNS, so that their tables and warnings still fit it.
        if columns != usize::MAX {
            cmd.env("COLUMNS", columns.to_string());
        }
        if let Some(&cpu) = cpus.get(rank).filter(|_| pinned) {
            // SAFETY: the closure runs in the forked child before exec and makes one
            // async-signal-safe system call (sched_setaffinity) on a set on its stack.
            unsafe {
                cmd.pre_exec(move || crate::cpus::pin(cpu));
            }
        }
        let child = cmd
            .args(&a.program[1..])
            .env("ACCIO_RANK", rank.to_string())
            .env("ACCIO_SIZE", a.n.to_string())
            .env("ACCIO_RENDEZVOUS", rdv.addr())
            .env("ACCIO_WORLD_TIMEOUT_MS", timeout.as_millis().to_string())
            .env("ACCIO_TCP_SECRET", &secret)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        match child {
            Ok(mut c) => {
                let out = c
                    .stdout
                    .take()
                    .map(|p| forward(rank, p, Stream::Stdout, done_tx.clone()));
                let err = c
                    .stderr
                    .take()
                    .map(|p| forward(rank, p, Stream::Stderr, done_tx.clone()));
                let forwarded = out.unwrap_or(Ok(())).and(err.unwrap_or(Ok(())));
                children.push(c);
                if let Err(e) = forwarded {
                    kill_all(&mut children);
                    bail!("starting the output threads of rank {rank}: {e}");
                }
            }
            Err(e) => {
                kill_all(&mut children);
                bail!("starting rank {rank} ({}): {e}", a.program[0]);
            }
        }
    }
    drop(done_tx);
    // Waits (a little) for the ranks' last output lines to be written out.
    let drain = |rx: &mpsc::Receiver<()>| {
        let deadline = Instant::now() + Duration::from_secs(2);
        while rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .is_ok()
        {}
    };
    let mut dead = || {
        if let Some(sig) = stop_signal() {
            return Some(format!("accio run was ended by signal {sig}"));
        }
        children.iter_mut().enumerate().find_map(|(r, c)| {
            c.try_wait().ok().flatten().map(|s| {
                format!(
                    "rank {r} exited with {} before joining the world",
                    describe(s)
                )
            })
        })
    };
    if let Err(e) = rdv.serve(timeout, &mut dead) {
        if let Some(sig) = stop_signal() {
            stop(sig, &mut children, rdv);
        }
        // The ranks that joined were told; give them a moment to say so, then end them.
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(1)
            && children
                .iter_mut()
                .any(|c| matches!(c.try_wait(), Ok(None)))
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        kill_all(&mut children);
        drain(&done_rx);
        return Err(e).context("accio run: bootstrap failed");
    }
    loop {
        if let Some(sig) = stop_signal() {
            stop(sig, &mut children, rdv);
        }
        let mut running = 0;
        let mut failed: Vec<(usize, ExitStatus)> = Vec::new();
        for (r, c) in children.iter_mut().enumerate() {
            match c.try_wait() {
                Ok(Some(s)) if !s.success() => failed.push((r, s)),
                Ok(Some(_)) => {}
                Ok(None) => running += 1,
                Err(e) => bail!("waiting for rank {r}: {e}"),
            }
        }
        // A rank killed by a signal is named before ranks that exited with a status: those
        // usually exited because they found it gone.
        use std::os::unix::process::ExitStatusExt;
        if let Some(&(r, s)) = failed
            .iter()
            .find(|(_, s)| s.signal().is_some())
            .or(failed.first())
        {
            kill_all(&mut children);
            drain(&done_rx);
            bail!(
                "rank {r} exited with {}; the other ranks were ended",
                describe(s)
            );
        }
        if running == 0 {
            drain(&done_rx);
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Arguments of `accio world-check`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Bytes moved by one RMA write per pair and backend.
    #[arg(long, default_value_t = 1 << 20)]
    bytes: usize,
}

/// Connects every pair of ranks over the chosen backend and every other one that can serve
/// the pair, moves a message each way and an RMA write checked by the receiver, and prints
/// one line per pair and backend.
pub fn check(a: CheckArgs) -> anyhow::Result<()> {
    let w = World::from_env().context("joining the world")?;
    let me = w.rank();
    println!(
        "rank {me} of {} on {} (cpus {}), node shared with ranks {:?}",
        w.size(),
        w.node(me)?,
        w.table()[me].cpus,
        w.node_ranks()
    );
    let len = a.bytes.max(16);
    for x in 0..w.size() {
        for y in x + 1..w.size() {
            if me != x && me != y {
                continue;
            }
            let peer = if me == x { y } else { x };
            let choice = w.choice(peer)?.clone();
            for scheme in w.usable(peer)? {
                let ep = w.endpoint_via(peer, &scheme)?;
                let win = ep.register(len.next_multiple_of(accio::PAGE), Access::READ_WRITE)?;
                ep.send(&win.offset().to_le_bytes())?;
                let mut m = Vec::new();
                ep.recv_timeout(&mut m, Some(Duration::from_secs(10)))?;
                let remote = u64::from_le_bytes(m[..8].try_into()?);
                let data: Vec<u8> = (0..len - 8).map(|i| (i * 7 + me) as u8).collect();
                ep.vwrite_to(&data, remote + 8, RmaFlags::ASYNC)?;
                ep.fence_signal(None, Some((remote, 1)))?;
                win.wait_u64(0, 1, Some(Duration::from_secs(10)))?;
                let mut got = vec![0u8; len - 8];
                win.read_at(8, &mut got)?;
                if got
                    .iter()
                    .enumerate()
                    .any(|(i, &b)| b != (i * 7 + peer) as u8)
                {
                    bail!("rank {me} <- rank {peer} over {scheme}: RMA data differs");
                }
                ep.send(b"done")?;
                ep.recv_timeout(&mut m, Some(Duration::from_secs(10)))?;
                let mark = if scheme == choice.scheme {
                    "chosen"
                } else {
                    "also"
                };
                println!(
                    "rank {me} <-> rank {peer}: {scheme} ok ({mark}{})",
                    if mark == "chosen" {
                        format!(": {}", choice.reason)
                    } else {
                        String::new()
                    }
                );
            }
        }
    }
    Ok(())
}
