//! The address exchange without MPI: `accio run` serves a Unix socket, every rank sends its
//! [`Record`] as one JSON line and receives the whole table (or an error naming the rank at
//! fault) as one JSON line.
//!
//! The launcher checks what only it can see: a rank outside the world, two ranks claiming
//! one number, a rank whose size differs from the launcher's, and a rank whose process
//! exited before it reported. Each ends the bootstrap of every rank with one error.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::choice::Rules;
use crate::error::{Result, WorldError};
use crate::node::NodeId;

/// What one rank tells the others.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Its rank.
    pub rank: usize,
    /// The world size it believes in.
    pub size: usize,
    /// Its node.
    pub node: NodeId,
    /// The CPUs it may run on (`Cpus_allowed_list`), for matrix labels.
    pub cpus: String,
    /// Its listeners: `(scheme, address)`.
    pub addrs: Vec<(String, String)>,
    /// Its choice rules; the world uses rank 0's.
    pub rules: Rules,
}

#[derive(Debug, Serialize, Deserialize)]
enum Reply {
    Table(Vec<Record>),
    Error(String),
}

/// The launcher's side of the exchange.
#[derive(Debug)]
pub struct Rendezvous {
    listener: UnixListener,
    path: PathBuf,
    size: usize,
}

impl Rendezvous {
    /// Binds a fresh owner-only socket in `dir` for a world of `size` ranks.
    pub fn bind(dir: &Path, size: usize) -> Result<Rendezvous> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = dir.join(format!("accio-run-{}-{nanos}.sock", std::process::id()));
        let io = |e: std::io::Error| WorldError::Config {
            what: format!("rendezvous socket {}", path.display()),
            cause: e.to_string(),
        };
        let listener = UnixListener::bind(&path).map_err(io)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
        listener.set_nonblocking(true).map_err(io)?;
        Ok(Rendezvous {
            listener,
            path,
            size,
        })
    }

    /// The address ranks are given (`ACCIO_RENDEZVOUS`): `unix:PATH`.
    pub fn addr(&self) -> String {
        format!("unix:{}", self.path.display())
    }

    /// Collects every rank's record and sends everyone the table. Gives up after `timeout`
    /// or as soon as `dead()` reports a rank that ended (its text names the rank), telling
    /// every rank that reported why.
    pub fn serve(
        &self,
        timeout: Duration,
        dead: &mut dyn FnMut() -> Option<String>,
    ) -> Result<Vec<Record>> {
        let deadline = Instant::now() + timeout;
        let mut conns: Vec<(UnixStream, Record)> = Vec::new();
        let fail = |conns: &mut Vec<(UnixStream, Record)>, rank: usize, cause: String| {
            let text = format!("rank {rank}: {cause}");
            for (c, _) in conns.iter_mut() {
                let _ = send_line(c, &Reply::Error(text.clone()));
            }
            WorldError::Rank { rank, cause }
        };
        while conns.len() < self.size {
            if let Some(why) = dead() {
                let rank = why
                    .split_whitespace()
                    .nth(1)
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(usize::MAX);
                return Err(fail(&mut conns, rank, why));
            }
            if Instant::now() > deadline {
                let missing: Vec<String> = (0..self.size)
                    .filter(|r| !conns.iter().any(|(_, c)| c.rank == *r))
                    .map(|r| r.to_string())
                    .collect();
                let first = missing.first().and_then(|r| r.parse().ok()).unwrap_or(0);
                return Err(fail(
                    &mut conns,
                    first,
                    format!(
                        "did not report within {timeout:?} (missing ranks: {})",
                        missing.join(", ")
                    ),
                ));
            }
            let mut stream = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                Err(e) => {
                    return Err(WorldError::Config {
                        what: format!("rendezvous socket {}", self.path.display()),
                        cause: e.to_string(),
                    })
                }
            };
            let rec: Record = match read_line(&mut stream, Duration::from_secs(2)) {
                Ok(r) => r,
                // A stranger or a rank that died mid-line: not a member; keep waiting.
                Err(_) => continue,
            };
            if rec.rank >= self.size {
                let _ = send_line(
                    &mut stream,
                    &Reply::Error(format!(
                        "rank {} is outside the world of {} ranks",
                        rec.rank, self.size
                    )),
                );
                return Err(fail(
                    &mut conns,
                    rec.rank,
                    format!("outside the world of {} ranks", self.size),
                ));
            }
            if rec.size != self.size {
                let cause = format!(
                    "believes the world has {} ranks, the launcher started {}",
                    rec.size, self.size
                );
                let _ = send_line(
                    &mut stream,
                    &Reply::Error(format!("rank {}: {cause}", rec.rank)),
                );
                return Err(fail(&mut conns, rec.rank, cause));
            }
            if conns.iter().any(|(_, c)| c.rank == rec.rank) {
                let cause = "reported twice (two processes claim this rank)".to_string();
                let _ = send_line(
                    &mut stream,
                    &Reply::Error(format!("rank {}: {cause}", rec.rank)),
                );
                return Err(fail(&mut conns, rec.rank, cause));
            }
            conns.push((stream, rec));
        }
        let mut table: Vec<Record> = conns.iter().map(|(_, r)| r.clone()).collect();
        table.sort_by_key(|r| r.rank);
        for (c, _) in conns.iter_mut() {
            let _ = send_line(c, &Reply::Table(table.clone()));
        }
        Ok(table)
    }
}

impl Drop for Rendezvous {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn send_line<T: Serialize>(s: &mut UnixStream, v: &T) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(v).map_err(std::io::Error::other)?;
    line.push(b'\n');
    s.write_all(&line)
}

fn read_line<T: for<'de> Deserialize<'de>>(
    s: &mut UnixStream,
    timeout: Duration,
) -> std::io::Result<T> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    let mut line = String::new();
    // Bounded: a table of thousands of ranks is well under 16 MiB.
    let n = BufReader::new(s.take_limited()).read_line(&mut line)?;
    if n == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "closed before a line",
        ));
    }
    serde_json::from_str(&line).map_err(std::io::Error::other)
}

trait TakeLimited {
    fn take_limited(&mut self) -> std::io::Take<&mut Self>;
}

impl TakeLimited for UnixStream {
    fn take_limited(&mut self) -> std::io::Take<&mut Self> {
        std::io::Read::take(self, 16 << 20)
    }
}

/// A fresh secret for one job's tcp endpoints: 32 bytes from `/dev/urandom`, in hex.
/// `accio run` gives it to its ranks as `ACCIO_TCP_SECRET`, so that their tcp endpoints
/// accept only each other (see `accio_tcp::auth`), with a key no other job has.
pub fn job_secret() -> Result<String> {
    use std::io::Read;
    let mut raw = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut raw))
        .map_err(|e| WorldError::Config {
            what: "the job's tcp secret (/dev/urandom)".into(),
            cause: e.to_string(),
        })?;
    Ok(raw.iter().map(|b| format!("{b:02x}")).collect())
}

/// A rank's side: sends `rec` to the launcher at `addr` (`unix:PATH`) and waits at most
/// `timeout` for the table.
pub fn exchange(addr: &str, rec: &Record, timeout: Duration) -> Result<Vec<Record>> {
    let rank = rec.rank;
    let err = |cause: String| WorldError::Bootstrap { rank, cause };
    let path = addr
        .strip_prefix("unix:")
        .ok_or_else(|| err(format!("ACCIO_RENDEZVOUS={addr:?}: expected unix:PATH")))?;
    let deadline = Instant::now() + timeout;
    let mut s = loop {
        match UnixStream::connect(path) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(err(format!("cannot reach the launcher at {path}: {e}"))),
        }
    };
    send_line(&mut s, rec).map_err(|e| err(format!("sending to the launcher: {e}")))?;
    let left = deadline.saturating_duration_since(Instant::now());
    match read_line::<Reply>(&mut s, left) {
        Ok(Reply::Table(t)) => Ok(t),
        Ok(Reply::Error(e)) => Err(err(e)),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Err(err(format!(
                "no table from the launcher within {timeout:?}"
            )))
        }
        Err(e) => Err(err(format!("the launcher went away: {e}"))),
    }
}
