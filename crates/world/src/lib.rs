//! # accio-world
//!
//! A rank world: every process learns its rank, the world size and which ranks share its
//! node, and gets an endpoint to any other rank on demand with [`World::endpoint`], through
//! the backend chosen for the pair by the rule of [`choice`] (same node → `shm`, else `mpi`
//! when MPI launched the world, else `tcp`; overridable with `ACCIO_TRANSPORT` and a
//! per-pair config file, and explained by [`World::choice`]).
//!
//! Bootstrap without MPI: `accio run -n N PROGRAM [ARGS]` starts N ranks, giving each
//! `ACCIO_RANK`, `ACCIO_SIZE` and `ACCIO_RENDEZVOUS` (a Unix socket it serves, see
//! [`rendezvous`]); [`World::from_env`] reads them. It also gives them a fresh per-job
//! `ACCIO_TCP_SECRET` ([`rendezvous::job_secret`]; one already set is kept), so that the
//! ranks' tcp endpoints authenticate each other with a key no other job holds. Under
//! mpirun ([`World::from_mpi`]) the ranks use `ACCIO_TCP_SECRET` when the launch exports
//! one (`mpirun -x ACCIO_TCP_SECRET`), else a fresh secret rank 0 sends every rank
//! through MPI. A process outside the world that connects to a rank's tcp listener
//! needs that secret; with neither (a program using the backends directly), tcp
//! endpoints use the user's key file (`~/.config/accio/tcp.key`, made on first use). A world can also be built from a table
//! exchanged by other means (MPI's allgather) with [`World::from_table`].
//!
//! Every pair connects on demand: both ranks call `endpoint(peer)`; the lower rank connects
//! to the higher rank's listener for the chosen backend and introduces itself with one
//! message (its rank and the connection's channel), the higher rank's acceptor files the
//! endpoint under that rank and channel. [`World::barrier`] keeps connections of its own
//! (channel 1), so its messages never meet a program's.

pub mod choice;
mod error;
mod node;
pub mod rendezvous;

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use accio::{Endpoint, ErrorKind, Listener, Options};

pub use choice::{Choice, PairRules, Rules};
pub use error::{Result, WorldError};
pub use node::NodeId;
pub use rendezvous::Record;

/// The first message on every world connection: magic, the connecting rank (u64 LE) and
/// the channel the connection serves (one byte).
const HELLO: &[u8; 4] = b"AWLD";
/// The length of the whole first message.
const HELLO_LEN: usize = HELLO.len() + 8 + 1;

/// What a world connection serves: a program's endpoint, or the world's own barrier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Channel {
    Program = 0,
    Barrier = 1,
}

impl Channel {
    fn from_byte(b: u8) -> Option<Channel> {
        match b {
            0 => Some(Channel::Program),
            1 => Some(Channel::Barrier),
            _ => None,
        }
    }
}

/// How a rank joins a world (what [`World::from_env`] reads from the environment).
#[derive(Clone, Debug)]
pub struct Bootstrap {
    /// This rank.
    pub rank: usize,
    /// The world size.
    pub size: usize,
    /// The launcher's rendezvous (`unix:PATH`).
    pub rendezvous: String,
    /// How long bootstrap and each [`World::endpoint`] may wait.
    pub timeout: Duration,
    /// The host tcp listeners bind (`ACCIO_WORLD_TCP_HOST`, default `127.0.0.1`).
    pub tcp_host: String,
    /// This rank's node; `None` is [`NodeId::current`]. Tests set it to act as another node.
    pub node: Option<NodeId>,
    /// The choice rules this rank offers (rank 0's are used).
    pub rules: Rules,
}

fn env_var(name: &str) -> Result<Option<String>> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(e) => Err(WorldError::Config {
            what: name.to_string(),
            cause: e.to_string(),
        }),
    }
}

fn env_num(name: &str) -> Result<Option<u64>> {
    env_var(name)?
        .map(|v| {
            v.trim().parse().map_err(|_| WorldError::Config {
                what: format!("{name}={v}"),
                cause: "not a non-negative integer".into(),
            })
        })
        .transpose()
}

impl Bootstrap {
    /// Reads `ACCIO_RANK`, `ACCIO_SIZE`, `ACCIO_RENDEZVOUS` (set by `accio run`), and
    /// optionally `ACCIO_WORLD_TIMEOUT_MS` (default 10000), `ACCIO_WORLD_TCP_HOST`,
    /// `ACCIO_TRANSPORT`, `ACCIO_WORLD_CONFIG`.
    pub fn from_env() -> Result<Bootstrap> {
        let need = |name: &str| -> Result<u64> {
            env_num(name)?.ok_or_else(|| WorldError::Config {
                what: name.to_string(),
                cause: "not set: start the program with `accio run -n N` (or mpirun with the mpi feature)".into(),
            })
        };
        let rank = need("ACCIO_RANK")? as usize;
        let size = need("ACCIO_SIZE")? as usize;
        let rendezvous = env_var("ACCIO_RENDEZVOUS")?.ok_or_else(|| WorldError::Config {
            what: "ACCIO_RENDEZVOUS".into(),
            cause: "not set: start the program with `accio run -n N`".into(),
        })?;
        let timeout = Duration::from_millis(env_num("ACCIO_WORLD_TIMEOUT_MS")?.unwrap_or(10_000));
        let tcp_host = env_var("ACCIO_WORLD_TCP_HOST")?.unwrap_or_else(|| "127.0.0.1".into());
        Ok(Bootstrap {
            rank,
            size,
            rendezvous,
            timeout,
            tcp_host,
            node: None,
            rules: Rules::from_env(false)?,
        })
    }
}

/// Accepted endpoints by (peer rank, scheme, channel), oldest first.
type Accepted = HashMap<(usize, String, Channel), VecDeque<Box<dyn Endpoint>>>;

/// This rank's listeners, one per scheme.
pub type Listeners = Vec<(String, Box<dyn Listener>)>;

/// Endpoints accepted but not yet asked for, by (peer rank, scheme).
#[derive(Default)]
struct Pending {
    map: Mutex<Accepted>,
    ready: Condvar,
}

/// One process's view of the world. See the [crate docs](crate).
pub struct World {
    rank: usize,
    table: Vec<Record>,
    choices: Vec<Option<Choice>>,
    timeout: Duration,
    opts: Options,
    pending: Arc<Pending>,
    stop: Arc<AtomicBool>,
    acceptors: Vec<JoinHandle<()>>,
    barrier: Mutex<BarrierState>,
}

/// Where this rank stands in its barriers: the barriers completed, the round of the one
/// under way and whether that round's message went out, and the barrier's own endpoints
/// by peer. Kept between calls so that a barrier that timed out resumes where it stopped.
#[derive(Default)]
struct BarrierState {
    done: u64,
    round: u32,
    sent: bool,
    eps: HashMap<usize, Box<dyn Endpoint>>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("rank", &self.rank)
            .field("size", &self.table.len())
            .field("choices", &self.choices)
            .finish_non_exhaustive()
    }
}

/// This rank's listeners (one per backend the world may use) and the record naming them.
pub fn listen_all(
    rank: usize,
    size: usize,
    tcp_host: &str,
    node: NodeId,
    rules: Rules,
) -> Result<(Listeners, Record)> {
    listen_all_with(rank, size, tcp_host, node, rules, &Options::default())
}

/// [`listen_all`] with backend options (the world's tcp secret, say).
pub fn listen_all_with(
    rank: usize,
    size: usize,
    tcp_host: &str,
    node: NodeId,
    rules: Rules,
    opts: &Options,
) -> Result<(Listeners, Record)> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let wanted = [
        format!("shm://accio-w{}-{nanos}-{rank}", std::process::id()),
        format!("tcp://{tcp_host}:0"),
    ];
    let mut listeners = Vec::new();
    let mut addrs = Vec::new();
    for a in wanted {
        let l = accio::listen_with(&a, opts).map_err(|e| WorldError::Bootstrap {
            rank,
            cause: format!("listening on {a}: {e}"),
        })?;
        let scheme = l.local_addr().scheme().to_string();
        addrs.push((scheme.clone(), l.local_addr().to_string()));
        listeners.push((scheme, l));
    }
    let cpus = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("Cpus_allowed_list:")
                    .map(|v| v.trim().to_string())
            })
        })
        .unwrap_or_default();
    let rec = Record {
        rank,
        size,
        node,
        cpus,
        addrs,
        rules,
    };
    Ok((listeners, rec))
}

impl World {
    /// Joins the world this process was started in: `accio run` (see
    /// [`Bootstrap::from_env`]), or, without `ACCIO_RANK` and when MPI launched it and the
    /// `mpi` feature is built, MPI's world ([`World::from_mpi`]).
    pub fn from_env() -> Result<World> {
        if std::env::var_os("ACCIO_RANK").is_none() && accio::mpi::launched_by_mpi() {
            if accio::mpi::BUILT {
                return World::from_mpi();
            }
            return Err(WorldError::Config {
                what: "world bootstrap".into(),
                cause: "launched by MPI, but this build has no MPI (build with `--features mpi`), \
                        and ACCIO_RANK is not set (start with `accio run -n N` instead)"
                    .into(),
            });
        }
        World::bootstrap(Bootstrap::from_env()?)
    }

    /// Joins MPI's world (collective: every rank calls it): rank and size from MPI, the
    /// records exchanged by `MPI_Allgather`. Listeners: shm, tcp on `ACCIO_WORLD_TCP_HOST`
    /// (default: this host's first non-loopback IPv4 address, so other hosts can reach
    /// it), and mpi. The ranks' tcp endpoints authenticate with `ACCIO_TCP_SECRET` where
    /// the launch set it, else with a fresh secret rank 0 makes and sends every rank
    /// through MPI (so ranks on nodes without a shared home directory agree on one).
    pub fn from_mpi() -> Result<World> {
        let (rank, size) = accio::mpi::init().map_err(|e| WorldError::Bootstrap {
            rank: 0,
            cause: format!("MPI: {e}"),
        })?;
        let timeout = Duration::from_millis(env_num("ACCIO_WORLD_TIMEOUT_MS")?.unwrap_or(10_000));
        let tcp_host = match env_var("ACCIO_WORLD_TCP_HOST")? {
            Some(h) => h,
            None => first_ipv4().unwrap_or_else(|| "127.0.0.1".into()),
        };
        let rules = Rules::from_env(true)?;
        let opts = if std::env::var_os("ACCIO_TCP_SECRET").is_some() {
            Options::default()
        } else {
            let mine = if rank == 0 {
                rendezvous::job_secret()?
            } else {
                String::new()
            };
            let all =
                accio::mpi::allgather(mine.as_bytes()).map_err(|e| WorldError::Bootstrap {
                    rank,
                    cause: format!("MPI_Allgather of the job's tcp secret: {e}"),
                })?;
            let secret = all.into_iter().next().unwrap_or_default();
            Options::new().with(accio::TcpOptions::new().secret(secret))
        };
        let (mut listeners, mut rec) =
            listen_all_with(rank, size, &tcp_host, NodeId::current(), rules, &opts)?;
        let mpi_addr = format!("mpi://{rank}");
        let l = accio::listen(&mpi_addr).map_err(|e| WorldError::Bootstrap {
            rank,
            cause: format!("listening on {mpi_addr}: {e}"),
        })?;
        rec.addrs.push(("mpi".into(), mpi_addr));
        listeners.push(("mpi".into(), l));
        let bytes = serde_json::to_vec(&rec).map_err(|e| WorldError::Bootstrap {
            rank,
            cause: format!("encoding this rank's record: {e}"),
        })?;
        let all = accio::mpi::allgather(&bytes).map_err(|e| WorldError::Bootstrap {
            rank,
            cause: format!("MPI_Allgather of the records: {e}"),
        })?;
        let mut table = Vec::with_capacity(size);
        for (r, b) in all.iter().enumerate() {
            let t: Record = serde_json::from_slice(b).map_err(|e| WorldError::Rank {
                rank: r,
                cause: format!("sent an unreadable record: {e}"),
            })?;
            table.push(t);
        }
        let mut world = World::from_table(rank, table, listeners, timeout)?;
        world.opts = opts;
        Ok(world)
    }

    /// Joins a world through a launcher's rendezvous.
    pub fn bootstrap(b: Bootstrap) -> Result<World> {
        if b.rank >= b.size {
            return Err(WorldError::Rank {
                rank: b.rank,
                cause: format!("outside the world of {} ranks", b.size),
            });
        }
        let node = b.node.clone().unwrap_or_else(NodeId::current);
        let (listeners, rec) = listen_all(b.rank, b.size, &b.tcp_host, node, b.rules.clone())?;
        let table = rendezvous::exchange(&b.rendezvous, &rec, b.timeout)?;
        World::from_table(b.rank, table, listeners, b.timeout)
    }

    /// Builds the world from a complete table (one record per rank, in rank order, as an
    /// allgather gives it) and this rank's listeners from [`listen_all`].
    pub fn from_table(
        rank: usize,
        table: Vec<Record>,
        listeners: Listeners,
        timeout: Duration,
    ) -> Result<World> {
        let size = table.len();
        for (i, r) in table.iter().enumerate() {
            if r.rank != i {
                return Err(WorldError::Rank {
                    rank: r.rank,
                    cause: format!("found at position {i} of the table"),
                });
            }
            if r.size != size {
                return Err(WorldError::Rank {
                    rank: i,
                    cause: format!(
                        "believes the world has {} ranks, the table has {size}",
                        r.size
                    ),
                });
            }
        }
        let rules = table[0].rules.clone();
        rules.pairs.check(size)?;
        let me = &table[rank].node;
        let mut choices = Vec::with_capacity(size);
        for (p, rec) in table.iter().enumerate() {
            choices.push(if p == rank {
                None
            } else {
                let (a, b) = (rank.min(p), rank.max(p));
                let (na, nb) = if rank < p {
                    (me, &rec.node)
                } else {
                    (&rec.node, me)
                };
                let c = rules.choose(a, b, na, nb)?;
                if std::env::var_os("ACCIO_LOG").is_some_and(|v| v == "debug") {
                    eprintln!(
                        "accio-world: rank {rank} -> rank {p}: {} ({})",
                        c.scheme, c.reason
                    );
                }
                Some(c)
            });
        }
        let pending = Arc::new(Pending::default());
        let stop = Arc::new(AtomicBool::new(false));
        let acceptors = listeners
            .into_iter()
            .map(|(scheme, l)| {
                let pending = Arc::clone(&pending);
                let stop = Arc::clone(&stop);
                std::thread::Builder::new()
                    .name(format!("accio-world-{scheme}"))
                    .spawn(move || accept_loop(l, scheme, size, pending, stop))
                    .map_err(|e| WorldError::Bootstrap {
                        rank,
                        cause: format!("starting the acceptor thread: {e}"),
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(World {
            rank,
            table,
            choices,
            timeout,
            opts: Options::default(),
            pending,
            stop,
            acceptors,
            barrier: Mutex::default(),
        })
    }

    /// How long [`World::endpoint`] waits for its peer (default: the bootstrap timeout).
    /// Programs whose ranks reach a pair at very different times (a bench measuring pairs
    /// one after another) raise it.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.table.len()
    }

    /// Every rank's record (node, CPUs, listener addresses), in rank order.
    pub fn table(&self) -> &[Record] {
        &self.table
    }

    /// The node of `rank`.
    pub fn node(&self, rank: usize) -> Result<&NodeId> {
        self.check(rank).map(|_| &self.table[rank].node)
    }

    /// The ranks on this rank's node (itself included), ascending.
    pub fn node_ranks(&self) -> Vec<usize> {
        let me = &self.table[self.rank].node;
        (0..self.size())
            .filter(|&r| self.table[r].node.differs_from(me).is_none())
            .collect()
    }

    /// Whether this node runs more ranks than the CPUs they may run on together (their
    /// `Cpus_allowed_list`s): some ranks then share a core, and a rank that waits should
    /// hand its core over at once rather than spin (MPI libraries yield when they see
    /// oversubscription). False where the lists are unknown.
    pub fn oversubscribed(&self) -> bool {
        let node = self.node_ranks();
        let mut cpus = std::collections::BTreeSet::new();
        for &r in &node {
            match cpu_list(&self.table[r].cpus) {
                Some(list) => cpus.extend(list),
                None => return false,
            }
        }
        node.len() > cpus.len()
    }

    /// The backend chosen for the pair (this rank, `peer`) and why.
    pub fn choice(&self, peer: usize) -> Result<&Choice> {
        self.check(peer)?;
        self.choices[peer].as_ref().ok_or_else(|| WorldError::Rank {
            rank: peer,
            cause: "is this rank: no endpoint to itself".into(),
        })
    }

    /// The schemes that can serve the pair: shm only on one node.
    pub fn usable(&self, peer: usize) -> Result<Vec<String>> {
        self.check(peer)?;
        let same = self.table[peer]
            .node
            .differs_from(&self.table[self.rank].node)
            .is_none();
        Ok(self.table[peer]
            .addrs
            .iter()
            .map(|(s, _)| s.clone())
            .filter(|s| same || s != "shm")
            .collect())
    }

    fn check(&self, rank: usize) -> Result<()> {
        if rank >= self.size() {
            return Err(WorldError::Rank {
                rank,
                cause: format!("outside the world of {} ranks", self.size()),
            });
        }
        Ok(())
    }

    /// An endpoint to `peer` over the chosen backend. Collective for the pair: `peer`
    /// must call `endpoint(self.rank())` too. Each call makes a new connection.
    pub fn endpoint(&self, peer: usize) -> Result<Box<dyn Endpoint>> {
        let scheme = self.choice(peer)?.scheme.clone();
        self.endpoint_via(peer, &scheme)
    }

    /// An endpoint to `peer` over `scheme`, whatever the rule chose (for measuring every
    /// backend of a pair). Collective for the pair, like [`World::endpoint`].
    pub fn endpoint_via(&self, peer: usize, scheme: &str) -> Result<Box<dyn Endpoint>> {
        self.connect_pair(peer, scheme, Channel::Program, self.timeout)
    }

    /// The connection of `channel` to `peer` over `scheme`: the lower rank connects and
    /// introduces itself, the higher rank takes it from its acceptors, waiting at most
    /// `patience`.
    fn connect_pair(
        &self,
        peer: usize,
        scheme: &str,
        channel: Channel,
        patience: Duration,
    ) -> Result<Box<dyn Endpoint>> {
        self.choice(peer)?;
        let addr = self.table[peer]
            .addrs
            .iter()
            .find(|(s, _)| s == scheme)
            .map(|(_, a)| a.clone())
            .ok_or_else(|| WorldError::Rank {
                rank: peer,
                cause: format!("has no {scheme} listener"),
            })?;
        let terr = |source| self.transport(peer, scheme, source);
        if self.rank < peer {
            let ep = accio::connect_with(&addr, patience, &self.opts).map_err(terr)?;
            let mut hello = HELLO.to_vec();
            hello.extend_from_slice(&(self.rank as u64).to_le_bytes());
            hello.push(channel as u8);
            ep.send(&hello).map_err(terr)?;
            return Ok(ep);
        }
        let deadline = Instant::now() + patience;
        let key = (peer, scheme.to_string(), channel);
        let mut map = self.pending.map.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(ep) = map.get_mut(&key).and_then(|q| q.pop_front()) {
                return Ok(ep);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(WorldError::Timeout {
                    rank: self.rank,
                    peer,
                    scheme: scheme.to_string(),
                    waited: "endpoint",
                    after: patience,
                });
            }
            map = self
                .pending
                .ready
                .wait_timeout(map, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Waits until every rank has called `barrier` (collective: every rank calls it, as
    /// often as the others). A dissemination barrier: in round k, rank r tells rank
    /// r + 2^k and hears from rank r − 2^k (modulo the size), so it takes ⌈log2 size⌉
    /// message latencies, over the pair's chosen backend on connections of the barrier's
    /// own that it makes on first use.
    ///
    /// `timeout` bounds this call (`None`: wait as long as it takes; a rank that died is
    /// still reported, as `PeerGone` from the transport). A barrier that timed out is not
    /// lost: the next call resumes it where it stopped, so a caller may wait in slices (to
    /// check for Ctrl-C between them, say) and only the call that completes returns `Ok`.
    pub fn barrier(&self, timeout: Option<Duration>) -> Result<()> {
        let start = Instant::now();
        let size = self.size();
        let mut st = self.barrier.lock().unwrap_or_else(|p| p.into_inner());
        // A round's wait: what is left of `timeout` (`None`: no limit).
        let left = || timeout.map(|t| t.saturating_sub(start.elapsed()));
        while (1usize << st.round) < size {
            let d = 1usize << st.round;
            let to = (self.rank + d) % size;
            let from = (self.rank + size - d) % size;
            let tag = st.done.to_le_bytes();
            if !st.sent {
                self.barrier_ep(&mut st, to, left())?;
                st.eps[&to]
                    .send(&tag)
                    .map_err(|e| self.transport(to, self.scheme(to), e))?;
                st.sent = true;
            }
            self.barrier_ep(&mut st, from, left())?;
            let scheme = self.scheme(from);
            let mut m = Vec::new();
            match st.eps[&from].recv_timeout(&mut m, left()) {
                Ok(_) if m == tag => {}
                Ok(_) => {
                    return Err(WorldError::Rank {
                        rank: from,
                        cause: format!(
                            "sent {m:02x?} in barrier {} of rank {}: the ranks do not call \
                             barrier alike",
                            st.done, self.rank
                        ),
                    })
                }
                Err(e) if e.kind() == ErrorKind::Timeout => {
                    return Err(WorldError::Timeout {
                        rank: self.rank,
                        peer: from,
                        scheme: scheme.to_string(),
                        waited: "barrier message",
                        after: start.elapsed(),
                    })
                }
                Err(e) => return Err(self.transport(from, scheme, e)),
            }
            st.round += 1;
            st.sent = false;
        }
        st.round = 0;
        st.done += 1;
        Ok(())
    }

    /// Makes sure the barrier has its connection to `peer`.
    fn barrier_ep(&self, st: &mut BarrierState, peer: usize, left: Option<Duration>) -> Result<()> {
        if let Entry::Vacant(slot) = st.eps.entry(peer) {
            let scheme = self.scheme(peer);
            // The lower rank connects to a listener that is up since bootstrap: it gets the
            // world's patience whatever is left of this call, so that a caller waiting in
            // short slices never cuts a connect (and its handshake) short. The higher rank
            // only waits for that connection, which a later call can go on waiting for.
            let patience = match left {
                Some(l) if self.rank > peer => l,
                _ => self.timeout,
            };
            slot.insert(self.connect_pair(peer, scheme, Channel::Barrier, patience)?);
        }
        Ok(())
    }

    /// The backend the rule chose for the pair (this rank, `peer`); `peer` is another rank
    /// of the world (the barrier's ranks are, by construction).
    fn scheme(&self, peer: usize) -> &str {
        self.choices[peer]
            .as_ref()
            .map_or("", |c| c.scheme.as_str())
    }

    fn transport(&self, peer: usize, scheme: &str, source: accio::Error) -> WorldError {
        WorldError::Transport {
            rank: self.rank,
            peer,
            scheme: scheme.to_string(),
            source: Box::new(source),
        }
    }
}

/// The CPUs of a `Cpus_allowed_list` (`"0-3,6"`, from another rank's record); `None` if
/// it is empty, not one, or names more CPUs than a kernel has ([`MAX_CPUS`]).
fn cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',') {
        let (lo, hi): (usize, usize) = match part.split_once('-') {
            Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
            None => {
                let c = part.parse().ok()?;
                (c, c)
            }
        };
        if lo > hi || hi >= MAX_CPUS || cpus.len() + (hi - lo) >= MAX_CPUS {
            return None;
        }
        cpus.extend(lo..=hi);
    }
    Some(cpus)
}

/// Linux's most CPUs (`CONFIG_NR_CPUS` at most 8192).
const MAX_CPUS: usize = 8192;

/// The first IPv4 address of an interface that is up and not loopback.
fn first_ipv4() -> Option<String> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list`, freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut p = list;
    while !p.is_null() {
        // SAFETY: `p` walks the list getifaddrs returned; entries stay valid until freed.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        let up = ifa.ifa_flags & libc::IFF_UP as u32 != 0;
        let lo = ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0;
        if !up || lo || ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_addr is non-null; its family says which sockaddr it is.
        if unsafe { (*ifa.ifa_addr).sa_family } as i32 != libc::AF_INET {
            continue;
        }
        // SAFETY: an AF_INET address is a sockaddr_in.
        let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
        found = Some(std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)).to_string());
        break;
    }
    // SAFETY: `list` came from getifaddrs.
    unsafe { libc::freeifaddrs(list) };
    found
}

fn accept_loop(
    l: Box<dyn Listener>,
    scheme: String,
    size: usize,
    pending: Arc<Pending>,
    stop: Arc<AtomicBool>,
) {
    let mut buf = Vec::new();
    while !stop.load(Ordering::Acquire) {
        let ep = match l.accept(Some(Duration::from_millis(200))) {
            Ok(ep) => ep,
            Err(e) if e.kind() == ErrorKind::Timeout => continue,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        // A connection that does not introduce itself as a rank of this world is dropped.
        let Ok(HELLO_LEN) = ep.recv_timeout(&mut buf, Some(Duration::from_secs(2))) else {
            continue;
        };
        if &buf[..4] != HELLO {
            continue;
        }
        let from = u64::from_le_bytes(buf[4..12].try_into().expect("8 bytes")) as usize;
        let Some(channel) = Channel::from_byte(buf[12]) else {
            continue;
        };
        if from >= size {
            continue;
        }
        let mut map = pending.map.lock().unwrap_or_else(|p| p.into_inner());
        map.entry((from, scheme.clone(), channel))
            .or_default()
            .push_back(ep);
        pending.ready.notify_all();
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for t in self.acceptors.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::cpu_list;

    #[test]
    fn a_cpu_list_names_every_cpu_of_its_ranges() {
        assert_eq!(cpu_list("0-3,6\n"), Some(vec![0, 1, 2, 3, 6]));
        assert_eq!(cpu_list("5"), Some(vec![5]));
        assert_eq!(cpu_list(""), None);
        assert_eq!(cpu_list("3-1"), None);
        assert_eq!(cpu_list("0-x"), None);
        assert_eq!(cpu_list("8191").map(|c| c.len()), Some(1));
        assert_eq!(cpu_list("8192"), None);
        assert_eq!(cpu_list(&["0-4095"; 3].join(",")), None);
    }

    #[test]
    fn any_cpu_list_decodes_or_is_refused_without_a_panic() {
        // Another rank's record is outside bytes: random lists of the characters a list
        // is made of, and of a few others, are decoded within bounds or refused.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let alphabet = b"0123456789-,, \n9x";
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 24) as usize;
            let text: String = (0..len)
                .map(|k| alphabet[((x >> (k % 8 * 8)) as usize + k) % alphabet.len()] as char)
                .collect();
            if let Some(cpus) = cpu_list(&text) {
                assert!(cpus.len() <= super::MAX_CPUS, "{text:?}");
                assert!(cpus.iter().all(|&c| c < super::MAX_CPUS), "{text:?}");
            }
        }
    }
}
