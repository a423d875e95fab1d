//! `accio run -n N PROGRAM [ARGS]`: N local ranks of one world without MPI, and
//! `accio world-check`: a program for such a world that connects every pair over every
//! backend that can serve it and says what the rule chose and why.

use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

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
    /// The program and its arguments, started once per rank. Every rank must join the
    /// world (`accio_world::World::from_env`), as every MPI rank calls `MPI_Init`.
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
pub fn run(a: RunArgs) -> anyhow::Result<()> {
    if a.n == 0 {
        bail!("-n 0: a world needs at least one rank");
    }
    if !(a.timeout.is_finite() && a.timeout > 0.0) {
        bail!(
            "--timeout {}: must be a positive number of seconds",
            a.timeout
        );
    }
    let timeout = Duration::from_secs_f64(a.timeout);
    let rdv = Rendezvous::bind(&std::env::temp_dir(), a.n).context("accio run")?;
    let mut children = Vec::with_capacity(a.n);
    for rank in 0..a.n {
        let child = Command::new(&a.program[0])
            .args(&a.program[1..])
            .env("ACCIO_RANK", rank.to_string())
            .env("ACCIO_SIZE", a.n.to_string())
            .env("ACCIO_RENDEZVOUS", rdv.addr())
            .env("ACCIO_WORLD_TIMEOUT_MS", timeout.as_millis().to_string())
            .spawn();
        match child {
            Ok(c) => children.push(c),
            Err(e) => {
                kill_all(&mut children);
                bail!("starting rank {rank} ({}): {e}", a.program[0]);
            }
        }
    }
    let mut dead = || {
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
        return Err(e).context("accio run: bootstrap failed");
    }
    loop {
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
            bail!(
                "rank {r} exited with {}; the other ranks were ended",
                describe(s)
            );
        }
        if running == 0 {
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
