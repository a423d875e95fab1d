//! Halo exchange over any endpoint: two-sided messages or one-sided RMA.
//!
//! One [`HaloExchange`] per rank owns the rank's local array (owned cells and ghost layers,
//! [`Layout`]), a page-aligned, shareable memory region its neighbours write into (the
//! array's first part, unless the array lives in private memory: [`ArrayMemory`]), and one
//! endpoint per distinct neighbour rank. An exchange fills every ghost layer with the neighbour's face across it,
//! in two phases that the returned [`ExchangeTimes`] report apart:
//!
//! 1. **synchronize**: each rank tells its neighbours that it has finished reading its
//!    ghosts (it finished the step that used them) and waits for them to say the same. This
//!    is the seed's barrier, restricted to the ranks that actually exchange data.
//! 2. **communicate**: faces move and land in the ghosts.
//!    - [`Path::Messages`]: pack each face into a buffer, send it, receive the neighbour's,
//!      unpack it (the `MPI_Sendrecv` way). Sends and receives progress together with
//!      `try_send`/`try_recv` in chunks the backend accepts, so no face size can deadlock.
//!    - [`Path::Rma`]: write each face straight into the neighbour's ghost cells with
//!      `vwrite_to`, then `fence_signal` a per-side counter there (the SCIF way); the
//!      receiver waits for the counter and has nothing else to do. A face that is not one
//!      contiguous run (the faces normal to the contiguous axis: one element per row) is
//!      packed first into an outbox, written into a staging area of the neighbour's
//!      region, and unpacked there: the copy section 6.3 of the seed measured, reported
//!      apart by [`HaloExchange::sides`]. A neighbour whose array is private memory gets
//!      every face in a staging area, contiguous ones written from the array as they are. (Over shm each rank could instead read its
//!      neighbours' faces, which their sweeps just left in cache. Tried and measured on
//!      the 2-vCPU machine of `MACHINE_NOTES.md`, 4096x4096 f64 on two ranks, five
//!      interleaved runs each: communicate 10.9 us median (contiguous faces) and 13.5
//!      (strided) reading, 8.3 and 8.5 writing; so every backend writes.)
//!
//! In the synchronize phase the RMA path writes a "ghosts free" counter into each
//! neighbour's region; the messages path sends an empty message. Counters only grow, one
//! step per exchange, so no reset is ever needed.
//!
//! **Checked mode** (seed 001, section 6.2): every cell carries a [`Tag`] — the rank that
//! owns it and its global coordinates — in a second array that travels with the data by the
//! same plan. Ghost tags are cleared before each exchange and verified after it: a cell that
//! landed in the wrong place, or a ghost nobody wrote, is a [`GridError::Misplaced`] naming
//! both ranks, the side and both cells.
//!
//! **Failure.** A neighbour that dies makes the exchange fail with the endpoint's
//! `PeerGone` within about a second (waits for counters probe the endpoint); a neighbour
//! that hangs makes it fail at the timeout. Both errors name the two ranks and the side.

use std::sync::Arc;
use std::time::{Duration, Instant};

use accio_core::{huge_pages, Access, Endpoint, Error, MemView, Progress, Region, Window};
use bytemuck::Pod;

use crate::decomp::{Decomposition, Dir};
use crate::error::{GridError, Result};
use crate::layout::{Layout, Runs};

mod checked;
mod messages;
mod rma;
mod sections;

use sections::Sections;

pub use checked::Tag;
use checked::TAG;

/// How faces travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Path {
    /// Pack, send, receive, unpack.
    Messages,
    /// Write straight into the neighbour's ghosts, then signal.
    Rma,
}

impl Path {
    /// `messages` or `rma`.
    pub fn name(self) -> &'static str {
        match self {
            Path::Messages => "messages",
            Path::Rma => "rma",
        }
    }
}

impl std::str::FromStr for Path {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Path, String> {
        match s {
            "messages" => Ok(Path::Messages),
            "rma" => Ok(Path::Rma),
            _ => Err(format!("{s:?} is not a path: messages or rma")),
        }
    }
}

/// How an exchange is set up.
#[derive(Clone, Debug)]
pub struct ExchangeOptions {
    /// The data path. Default [`Path::Rma`].
    pub path: Path,
    /// Carry a [`Tag`] with every cell and verify where ghosts came from. Default off.
    pub checked: bool,
    /// Longest wait for a neighbour before the exchange fails. Default 60 s.
    pub timeout: Duration,
    /// How long a wait for a neighbour spins before it starts yielding its core. Spinning
    /// answers fastest when every rank has a core of its own (MPI libraries spin forever
    /// then); yielding lets an oversubscribed node's other ranks run. Default 100 us;
    /// `Duration::MAX`: never yield.
    pub spin: Duration,
    /// RMA path: write faces into the neighbours with streaming stores
    /// ([`accio_core::RmaFlags::streaming`]): `Some(true)` always, `Some(false)` never,
    /// `None` (default) when this rank's array is at least [`STREAM_ARRAY_BYTES`].
    ///
    /// The neighbour's stencil may have just read its ghost lines, so a cached store of the
    /// face first fetches every line from that core; a streaming store only invalidates
    /// it. The ghosts are next read in the neighbour's next sweep, which evicts them from
    /// the caches anyway when the array is large. Measured on this machine's two vCPUs,
    /// 4096x4096 f64 on 2 ranks over shm, three interleaved runs each way: communicate
    /// 16.6, 5.6 and 5.3 us per iteration with cached stores, 4.2, 4.1 and 4.1 streaming
    /// (the first pair in a phase where the host had placed the vCPUs far apart).
    pub streaming: Option<bool>,
    /// Where the rank's array lives. Default [`ArrayMemory::Auto`].
    pub array: ArrayMemory,
}

/// Where a rank's array (owned cells and ghosts) lives.
///
/// In shared memory the RMA path writes a contiguous face straight into the neighbour's
/// ghost cells. But shared memory gets no transparent huge pages on most hosts
/// (`shmem_enabled` at `never`, Debian's and Ubuntu's default, where private memory gets
/// them on request): a sweep over a 64 MiB array then crosses 16,384 pages, and misses the
/// TLB on each. Measured on the machine of `MACHINE_NOTES.md` (AMD EPYC, 2 vCPUs), one
/// rank's NumPy Jacobi sweep of 4096x4096 f64 took 60.4 and 60.0 ms on the shared array,
/// 58.0 and 58.1 on a private NumPy copy (3-4%); with `shmem_enabled` at `advise` both
/// took 53.7-54.0. In private memory each face lands in a staging area of the region
/// instead and is copied into the ghosts when the exchange ends: one more copy of 32 KiB
/// for a 4096-wide face of f64, about a microsecond.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ArrayMemory {
    /// Private when the array is at least [`STREAM_ARRAY_BYTES`] and this host gives huge
    /// pages to private memory and not to shared memory ([`accio_core::huge_pages`]);
    /// shared otherwise.
    #[default]
    Auto,
    /// Shared memory, part of the region the neighbours map.
    Shared,
    /// Private memory of this rank, on huge pages where the host gives them.
    Private,
}

impl ArrayMemory {
    /// Whether an array of `bytes` lives in private memory on this host.
    pub fn is_private(self, bytes: usize) -> bool {
        match self {
            ArrayMemory::Shared => false,
            ArrayMemory::Private => true,
            ArrayMemory::Auto => {
                let h = huge_pages();
                bytes >= STREAM_ARRAY_BYTES && h.private && !h.shareable
            }
        }
    }

    /// `auto`, `shared` or `private`.
    pub fn name(self) -> &'static str {
        match self {
            ArrayMemory::Auto => "auto",
            ArrayMemory::Shared => "shared",
            ArrayMemory::Private => "private",
        }
    }
}

impl std::str::FromStr for ArrayMemory {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<ArrayMemory, String> {
        match s {
            "auto" => Ok(ArrayMemory::Auto),
            "shared" => Ok(ArrayMemory::Shared),
            "private" => Ok(ArrayMemory::Private),
            _ => Err(format!(
                "{s:?} is not an array memory: auto, shared or private"
            )),
        }
    }
}

/// Arrays from this size up stream their faces by default ([`ExchangeOptions::streaming`]):
/// several times a core's private caches, so a sweep evicts the ghosts before it reads
/// them again.
pub const STREAM_ARRAY_BYTES: usize = 8 << 20;

impl Default for ExchangeOptions {
    fn default() -> Self {
        ExchangeOptions {
            path: Path::Rma,
            checked: false,
            timeout: Duration::from_secs(60),
            spin: Duration::from_micros(100),
            streaming: None,
            array: ArrayMemory::Auto,
        }
    }
}

/// What [`HaloExchange::probe_in_run`] measured.
#[derive(Clone, Debug, Default)]
pub struct InRunProbe {
    /// The sides this rank timed (it is the lower rank of the pair), each with the one-way
    /// time of one face crossing alone.
    pub one_way: Vec<(SideInfo, Duration)>,
    /// Every side of this rank, each with the time of this rank's put while the neighbour
    /// put its face at the same moment (RMA path only).
    pub both: Vec<(SideInfo, Duration)>,
}

/// Time spent in one exchange, by phase.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ExchangeTimes {
    /// Waiting for the neighbours to be done with their ghosts.
    pub sync: Duration,
    /// Moving the faces until every ghost is filled.
    pub communicate: Duration,
}

/// How a rank gets an endpoint to another: `connect(peer_rank)`, e.g. a rank world's
/// `endpoint`. Errors of any type are kept as the cause of [`GridError::Connect`].
pub type ConnectFn<'a> = dyn FnMut(usize) -> std::result::Result<Box<dyn Endpoint>, BoxError> + 'a;

/// Any error, as the cause of a failed connection.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One side of a rank's subgrid that has a neighbour, as [`HaloExchange::sides`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SideInfo {
    /// The side.
    pub dir: Dir,
    /// The rank across it (this rank itself on a periodic axis it holds whole).
    pub peer: usize,
    /// Elements in the face.
    pub elems: usize,
    /// Contiguous runs the face is made of (1: contiguous).
    pub runs: usize,
}

struct Peer {
    rank: usize,
    ep: Box<dyn Endpoint>,
    /// Keeps the region registered on this endpoint.
    _window: Option<Window>,
    /// The peer's region in its window space.
    remote_base: u64,
    /// The peer's array is private memory (it says so when it greets): every face lands
    /// in its staging areas.
    private: bool,
    chunk: usize,
    /// Sides of this rank whose faces go to this peer, in send order.
    sends: Vec<usize>,
    /// Sides of this rank whose ghosts this peer fills, in the peer's send order.
    recvs: Vec<usize>,
}

struct Side {
    dir: Dir,
    rank: usize,
    /// Index into `peers`; `None` when the neighbour is this rank (a periodic axis held
    /// whole).
    peer: Option<usize>,
    face: Runs,
    ghosts: Runs,
    /// The face and the ghosts are one run each (the same holds across the side: the
    /// neighbour's face and ghosts have the same shape).
    contiguous: bool,
    /// RMA straight into the neighbour's ghosts (one run, in its shared array).
    direct: bool,
    /// The neighbour's face lands in this rank's staging area for the side, copied into
    /// the ghosts when the exchange ends (ghosts of several runs, or a private array).
    staged_in: bool,
    /// Where the face lands in the neighbour's region: its ghost cells (direct) or its
    /// staging area, and their tags.
    remote_data: u64,
    remote_tags: u64,
    remote_ready: u64,
    remote_filled: u64,
    remote_probe: u64,
    /// Packed face of the messages path (the RMA path packs into the region's outbox).
    send_buf: Vec<u8>,
    /// The caller keeps the packed face up to date while it computes (see
    /// [`HaloExchange::pack_in_compute`]): `start` does not pack it.
    caller_packs: bool,
    /// The caller unpacks the staging area into the ghosts while it computes (see
    /// [`HaloExchange::unpack_in_compute`]): the exchange does not.
    caller_unpacks: bool,
    recv_buf: Vec<u8>,
}

impl Side {
    /// Goes to another rank and is not one run each way (its face is packed, its ghosts
    /// are filled from a staging area).
    fn strided_to_peer(&self) -> bool {
        self.peer.is_some() && !self.contiguous
    }
}

/// A rank's part of a grid and the machinery to exchange its halos. See the module docs.
pub struct HaloExchange<T: Pod> {
    decomp: Decomposition,
    rank: usize,
    layout: Layout,
    opts: ExchangeOptions,
    secs: Sections,
    _region: Arc<Region>,
    view: MemView,
    /// The array's memory when it is private (else it is the region's first part).
    array: Option<Region>,
    peers: Vec<Peer>,
    sides: Vec<Side>,
    generation: u64,
    /// Probes run so far: counter values of each probe lie above every earlier one's.
    probes: u64,
    scratch: Vec<u8>,
    fault: Option<(Dir, isize)>,
    _elem: std::marker::PhantomData<T>,
}

impl<T: Pod> std::fmt::Debug for HaloExchange<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HaloExchange")
            .field("rank", &self.rank)
            .field("grid", &self.decomp.grid_name())
            .field("path", &self.opts.path)
            .field("checked", &self.opts.checked)
            .finish()
    }
}

const HELLO_MAGIC: u64 = 0x6163_6369_6f67_7264; // "accio grd"

impl<T: Pod> HaloExchange<T> {
    /// Sets up `rank`'s part of `decomp`: allocates its array (zeroed), connects to every
    /// neighbour with `connect(peer_rank)`, checks that both agree on the grid, and with the
    /// RMA path registers the array on each endpoint.
    ///
    /// `connect` is called once per distinct neighbour rank, in increasing rank order, and
    /// must return an endpoint whose peer is that rank's `HaloExchange` (a rank world's
    /// `endpoint(rank)`, or a mesh of connected pairs).
    pub fn new(
        decomp: &Decomposition,
        rank: usize,
        opts: ExchangeOptions,
        connect: &mut ConnectFn<'_>,
    ) -> Result<HaloExchange<T>> {
        let size = decomp.size();
        if rank >= size {
            return Err(GridError::Decomposition {
                grid: decomp.grid_name(),
                reason: format!("rank {rank} is outside a world of {size} ranks"),
            });
        }
        let elem = std::mem::size_of::<T>();
        let ndim = decomp.ndim();
        let layout = Layout::of(decomp, rank);
        let private = opts.array.is_private(layout.elems() * elem);
        let secs = Sections::of(&layout, ndim, elem, opts.checked, private);
        let memory_err = |what: String| {
            move |source| GridError::Endpoint {
                what: format!("rank {rank}: {what}"),
                source,
            }
        };
        let array = if private {
            let what = format!("{} bytes of private memory for its array", secs.array_len);
            Some(Region::anonymous_huge(secs.array_len).map_err(memory_err(what))?)
        } else {
            None
        };
        let what = format!("{} bytes of shared memory for its subgrid", secs.len);
        let region = Region::shareable(secs.len, &format!("accio-grid-rank-{rank}"), true)
            .map_err(memory_err(what))?;
        let region = Arc::new(region);
        let view = MemView::whole(region.clone());

        // Where each face lands in the neighbour is known once it said whether its array
        // is private (`hello`).
        let mut sides = Vec::new();
        let mut peer_ranks: Vec<usize> = Vec::new();
        for dir in Dir::all(ndim) {
            let Some(peer) = decomp.neighbour(rank, dir) else {
                continue;
            };
            if peer != rank && !peer_ranks.contains(&peer) {
                peer_ranks.push(peer);
            }
            let face = layout.face(dir);
            let ghosts = layout.ghosts(dir);
            let remote_ghosts = Layout::of(decomp, peer).ghosts(dir.opposite());
            let contiguous = face.is_contiguous() && remote_ghosts.is_contiguous();
            sides.push(Side {
                dir,
                rank: peer,
                peer: None,
                ghosts,
                face,
                contiguous,
                direct: false,
                staged_in: private || !contiguous,
                remote_data: 0,
                remote_tags: 0,
                remote_ready: 0,
                remote_filled: 0,
                remote_probe: 0,
                send_buf: Vec::new(),
                caller_packs: false,
                caller_unpacks: false,
                recv_buf: Vec::new(),
            });
        }
        peer_ranks.sort_unstable();

        let mut peers = Vec::new();
        for &p in &peer_ranks {
            let ep = connect(p).map_err(|source| GridError::Connect {
                rank,
                peer: p,
                source,
            })?;
            let window = match opts.path {
                Path::Rma => Some(ep.register_view(&view, Access::READ_WRITE).map_err(
                    |source| GridError::Peer {
                        rank,
                        peer: p,
                        dir: "registering the subgrid".into(),
                        source,
                    },
                )?),
                Path::Messages => None,
            };
            let chunk = ep.capabilities().max_try_send.max(1);
            // Sides whose faces go to p, in this rank's (= the sending) order; sides whose
            // ghosts p fills, in p's sending order: p sends across its side e the face that
            // lands in this rank's ghosts on side -e.
            let sends = (0..sides.len()).filter(|&i| sides[i].rank == p).collect();
            let recvs = Dir::all(ndim)
                .filter(|&e| decomp.neighbour(p, e) == Some(rank))
                .filter_map(|e| {
                    sides
                        .iter()
                        .position(|s| s.dir == e.opposite() && s.rank == p)
                })
                .collect();
            peers.push(Peer {
                rank: p,
                ep,
                remote_base: 0,
                private: false,
                _window: window,
                chunk,
                sends,
                recvs,
            });
        }
        for s in &mut sides {
            s.peer = peers.iter().position(|p| p.rank == s.rank);
        }

        let mut ex = HaloExchange {
            decomp: decomp.clone(),
            rank,
            layout,
            opts,
            secs,
            _region: region,
            view,
            array,
            peers,
            sides,
            generation: 0,
            probes: 0,
            scratch: Vec::new(),
            fault: None,
            _elem: std::marker::PhantomData,
        };
        ex.hello()?;
        ex.plan_remote();
        if ex.opts.checked {
            ex.stamp_tags();
        }
        Ok(ex)
    }

    /// The decomposition.
    pub fn decomposition(&self) -> &Decomposition {
        &self.decomp
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Where this rank's cells sit in [`field`](Self::field).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The options this exchange was made with.
    pub fn options(&self) -> &ExchangeOptions {
        &self.opts
    }

    /// Where this rank's array lives: [`ArrayMemory::Shared`] or [`ArrayMemory::Private`]
    /// (what [`ArrayMemory::Auto`] chose).
    pub fn array_memory(&self) -> ArrayMemory {
        if self.secs.private {
            ArrayMemory::Private
        } else {
            ArrayMemory::Shared
        }
    }

    /// The local array: owned cells and ghosts, row-major ([`Layout::index`]).
    pub fn field(&self) -> &[T] {
        // SAFETY: the data section holds `layout.elems()` elements of `T` (sized in
        // `Sections::of`), page-aligned so aligned for any `T`; `T: Pod` makes every bit
        // pattern a valid value. Neighbours write into this memory only between this rank's
        // `start` and the end of `wait`, which borrow `self` mutably, so no write by a
        // well-behaved peer overlaps this shared borrow.
        unsafe { std::slice::from_raw_parts(self.arr(self.secs.data).cast(), self.layout.elems()) }
    }

    /// The local array, writable. See [`field`](Self::field).
    pub fn field_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `field`; `&mut self` makes this the only borrow on this side.
        unsafe {
            std::slice::from_raw_parts_mut(self.arr(self.secs.data).cast(), self.layout.elems())
        }
    }

    /// The tags of checked mode, one per cell of [`field`](Self::field).
    pub fn tags(&self) -> Option<&[Tag]> {
        self.opts.checked.then(|| {
            // SAFETY: as in `field`, for the tag section (present in checked mode).
            unsafe {
                std::slice::from_raw_parts(self.arr(self.secs.tags).cast(), self.layout.elems())
            }
        })
    }

    /// The faces a caller may pack itself while it computes (see
    /// [`pack_in_compute`](Self::pack_in_compute)), in the order
    /// [`field_and_packed_faces_mut`](Self::field_and_packed_faces_mut) returns their
    /// buffers: every side whose face is strided and goes to another rank by the RMA path,
    /// unchecked.
    pub fn packable_faces(&self) -> Vec<Runs> {
        self.sides_packed_in_compute()
            .map(|s| s.face.clone())
            .collect()
    }

    /// The faces the RMA path reads straight from the array when it puts them: every side
    /// whose face is one contiguous run going to another rank (none on the messages path).
    /// A caller that computes them may bring them into cache just before its compute ends
    /// ([`Kernel::warm_faces`](crate::laplace::Kernel::warm_faces)).
    pub fn direct_faces(&self) -> Vec<Runs> {
        if self.opts.path != Path::Rma {
            return Vec::new();
        }
        self.sides
            .iter()
            .filter(|s| s.peer.is_some() && s.contiguous)
            .map(|s| s.face.clone())
            .collect()
    }

    /// The sides whose strided faces the caller may pack (and whose ghosts it may unpack)
    /// while it computes: on the RMA path, unchecked, without an injected fault, every side
    /// that goes to another rank and is not one contiguous run.
    fn sides_packed_in_compute(&self) -> impl Iterator<Item = &Side> {
        let eligible = self.opts.path == Path::Rma && !self.opts.checked && self.fault.is_none();
        self.sides
            .iter()
            .filter(move |s| eligible && s.strided_to_peer())
    }

    /// Lets the caller pack the [`packable_faces`](Self::packable_faces) itself while it
    /// computes, where the cells are hot in cache, instead of `start` gathering them one
    /// cache line each afterwards (seed 001, section 6.3). Each is packed whole now, once;
    /// from then on `start` sends those buffers as they are: the caller must write every
    /// face cell it changes into its buffer (the `j`-th element of the face's runs at bytes
    /// `j · size_of::<T>()`) before the next exchange.
    pub fn pack_in_compute(&mut self) {
        let n = self.packable_faces().len();
        if n == 0 {
            return;
        }
        for s in &mut self.sides {
            s.caller_packs = false;
        }
        self.pack_faces(true);
        for s in &mut self.sides {
            s.caller_packs = s.strided_to_peer();
        }
    }

    /// The ghosts a caller may unpack itself while it computes, in the order
    /// [`field_and_packed_faces_mut`](Self::field_and_packed_faces_mut) returns their staged
    /// data: the ghosts of the [`packable_faces`](Self::packable_faces)' sides.
    pub fn unpackable_ghosts(&self) -> Vec<Runs> {
        self.sides_packed_in_compute()
            .map(|s| s.ghosts.clone())
            .collect()
    }

    /// Lets the caller fill the [`unpackable_ghosts`](Self::unpackable_ghosts) itself while
    /// it computes, each ghost cell just before the stencil that reads it, when its line is
    /// in cache anyway, instead of the exchange scattering them one cache line each. From
    /// now on, after an exchange those ghosts hold old values until the caller copies them
    /// from the staged data (the `j`-th element of the ghosts' runs at bytes
    /// `j · size_of::<T>()`); [`unpack_staged`](Self::unpack_staged) copies them all and
    /// ends this mode. The neighbour writes the staged data again only after this rank's
    /// next `start`, so it stays valid through the compute between two exchanges.
    pub fn unpack_in_compute(&mut self) {
        if self.unpackable_ghosts().is_empty() {
            return;
        }
        for s in &mut self.sides {
            s.caller_unpacks = s.strided_to_peer();
        }
    }

    /// Fills the ghosts that [`unpack_in_compute`](Self::unpack_in_compute) left to the
    /// caller from their staged data, and ends that mode.
    pub fn unpack_staged(&mut self) {
        for i in 0..self.sides.len() {
            if self.sides[i].caller_unpacks {
                self.sides[i].caller_unpacks = false;
                self.unpack_staging(i);
            }
        }
    }

    /// The local array, writable, the buffers of the faces the caller packs (see
    /// [`pack_in_compute`](Self::pack_in_compute); empty before it) and the staged data of
    /// the ghosts it unpacks (see [`unpack_in_compute`](Self::unpack_in_compute)).
    pub fn field_and_packed_faces_mut(&mut self) -> (&mut [T], Vec<&mut [u8]>, Vec<&[u8]>) {
        let elem = self.elem();
        // SAFETY: as in `field_mut`; the slice covers the data section of the region, which
        // neither the outboxes nor the staging areas (their own sections) overlap.
        let field = unsafe {
            std::slice::from_raw_parts_mut(self.arr(self.secs.data).cast(), self.layout.elems())
        };
        let staged = self
            .sides
            .iter()
            .filter(|s| s.caller_unpacks)
            .map(|s| {
                // SAFETY: the staging area of a side holds its ghosts' elements (sized in
                // `Sections::of`); the neighbour writes it only after this rank's next
                // `start`, which needs `&mut self`, so not while this borrow lives.
                unsafe {
                    std::slice::from_raw_parts(
                        self.ptr(self.secs.staging[s.dir.index()]),
                        s.ghosts.elems() * elem,
                    )
                }
            })
            .collect();
        let bufs = self
            .sides
            .iter()
            .filter(|s| s.caller_packs)
            .map(|s| {
                // SAFETY: the outbox of a side holds its face's elements (`Sections::of`),
                // one per side; the exchange reads it only in this rank's next `start`,
                // which needs `&mut self`.
                unsafe {
                    std::slice::from_raw_parts_mut(
                        self.ptr(self.secs.outbox[s.dir.index()]),
                        s.face.elems() * elem,
                    )
                }
            })
            .collect();
        (field, bufs, staged)
    }

    /// Every side with a neighbour: the rank there and the shape of the face.
    pub fn sides(&self) -> Vec<SideInfo> {
        self.sides
            .iter()
            .map(|s| SideInfo {
                dir: s.dir,
                peer: s.rank,
                elems: s.face.elems(),
                runs: s.face.as_slice().len(),
            })
            .collect()
    }

    /// Bytes of data (tags not counted) this rank sends to other ranks per exchange.
    pub fn halo_bytes(&self) -> u64 {
        self.sides
            .iter()
            .filter(|s| s.peer.is_some())
            .map(|s| (s.face.elems() * std::mem::size_of::<T>()) as u64)
            .sum()
    }

    /// Fault injection for tests of checked mode: from now on the face sent across `dir`
    /// is taken from `delta` elements off (messages, RMA into a staging area) or lands
    /// `delta` elements off in the neighbour (direct RMA), as an indexing bug would.
    pub fn inject_misplacement(&mut self, dir: Dir, delta: isize) {
        self.fault = Some((dir, delta));
    }

    /// Exchanges every halo, blocking until this rank's ghosts are filled.
    pub fn exchange(&mut self) -> Result<ExchangeTimes> {
        self.start()?.wait()
    }

    /// Synchronizes with the neighbours and starts moving this rank's faces; the returned
    /// [`Pending`] finishes the exchange. The array cannot be touched in between (the
    /// neighbours may be writing into it).
    pub fn start(&mut self) -> Result<Pending<'_, T>> {
        let t0 = Instant::now();
        self.generation += 1;
        if self.opts.checked {
            self.clear_ghost_tags();
        }
        match self.opts.path {
            Path::Rma => self.sync_rma()?,
            Path::Messages => self.sync_messages()?,
        }
        let sync = t0.elapsed();
        let t1 = Instant::now();
        self.copy_to_self();
        if self.opts.path == Path::Rma {
            self.put_faces()?;
        } else {
            self.pack_faces(false);
        }
        Ok(Pending {
            ex: self,
            sync,
            started: t1,
        })
    }

    /// The byte at `at` of the region.
    fn ptr(&self, at: usize) -> *mut u8 {
        debug_assert!(at <= self.view.len());
        // SAFETY: `at` is an offset inside the region (the sections there are).
        unsafe { self.view.as_ptr().add(at) }
    }

    /// The byte at `at` of the array's memory (its elements, then its tags).
    fn arr(&self, at: usize) -> *mut u8 {
        match &self.array {
            Some(a) => {
                debug_assert!(at <= a.len());
                // SAFETY: `at` is an offset inside the array's memory.
                unsafe { a.as_ptr().add(at) }
            }
            None => self.ptr(at),
        }
    }

    fn elem(&self) -> usize {
        std::mem::size_of::<T>()
    }

    /// Bytes a cell takes in a packed face: its element, and its tag in checked mode.
    fn per_cell(&self) -> usize {
        self.elem() + if self.opts.checked { TAG } else { 0 }
    }

    fn face_runs(&self, side: &Side) -> Runs {
        match self.fault {
            Some((d, delta)) if d == side.dir && !(side.direct && self.opts.path == Path::Rma) => {
                side.face.shifted(delta)
            }
            _ => side.face.clone(),
        }
    }

    fn hello(&mut self) -> Result<()> {
        let d = &self.decomp;
        let mut words = vec![
            HELLO_MAGIC,
            self.rank as u64,
            d.size() as u64,
            d.ndim() as u64,
        ];
        words.extend(d.shape().map(|v| v as u64));
        words.extend(d.dims().map(|v| v as u64));
        words.extend(d.periodic().map(u64::from));
        words.extend([
            d.halo() as u64,
            self.elem() as u64,
            u64::from(self.opts.checked),
            u64::from(self.opts.path == Path::Rma),
        ]);
        let names = [
            "magic",
            "rank",
            "size",
            "axes",
            "nz",
            "ny",
            "nx",
            "dz",
            "dy",
            "dx",
            "periodic z",
            "periodic y",
            "periodic x",
            "halo",
            "element size",
            "checked",
            "path",
        ];
        for i in 0..self.peers.len() {
            let mut msg: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let base = self.peers[i]._window.as_ref().map_or(0, |w| w.offset());
            msg.extend(base.to_le_bytes());
            msg.extend(u64::from(self.secs.private).to_le_bytes());
            let p = &self.peers[i];
            p.ep.send(&msg)
                .map_err(|e| self.peer_err(p.rank, "greeting", e))?;
        }
        for i in 0..self.peers.len() {
            let p = &self.peers[i];
            let mut buf = Vec::new();
            p.ep.recv_timeout(&mut buf, Some(self.opts.timeout))
                .map_err(|e| self.peer_err(p.rank, "greeting", e))?;
            let mismatch = |reason: String| GridError::Mismatch {
                rank: self.rank,
                peer: p.rank,
                reason,
            };
            if buf.len() != (words.len() + 2) * 8 {
                return Err(mismatch(format!(
                    "its greeting is {} bytes, not {}",
                    buf.len(),
                    (words.len() + 2) * 8
                )));
            }
            let theirs: Vec<u64> = buf
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8-byte chunks")))
                .collect();
            for (k, name) in names.iter().enumerate() {
                let expected = if k == 1 { p.rank as u64 } else { words[k] };
                if theirs[k] != expected {
                    return Err(mismatch(format!(
                        "{name}: {} here, {} there",
                        expected, theirs[k]
                    )));
                }
            }
            let private = match theirs[words.len() + 1] {
                0 => false,
                1 => true,
                v => return Err(mismatch(format!("array memory {v} is neither 0 nor 1"))),
            };
            self.peers[i].remote_base = theirs[words.len()];
            self.peers[i].private = private;
        }
        Ok(())
    }

    /// Where each face lands in its neighbour's region, and which counters there it
    /// writes: computed from the neighbour's layout and whether its array is private.
    fn plan_remote(&mut self) {
        let (ndim, elem, checked) = (self.decomp.ndim(), self.elem(), self.opts.checked);
        for s in &mut self.sides {
            let private = match s.peer {
                Some(pi) => self.peers[pi].private,
                None => self.secs.private,
            };
            let peer_layout = Layout::of(&self.decomp, s.rank);
            let peer_secs = Sections::of(&peer_layout, ndim, elem, checked, private);
            let back = s.dir.opposite();
            s.direct = s.contiguous && !private;
            (s.remote_data, s.remote_tags) = if s.direct {
                let first = peer_layout.ghosts(back).as_slice()[0].0;
                (
                    (peer_secs.data + first * elem) as u64,
                    (peer_secs.tags + first * TAG) as u64,
                )
            } else {
                let at = peer_secs.staging[back.index()];
                (at as u64, (at + s.face.elems() * elem) as u64)
            };
            s.remote_ready = peer_secs.ready(back) as u64;
            s.remote_filled = peer_secs.filled(back) as u64;
            s.remote_probe = peer_secs.probe(back) as u64;
        }
    }

    fn peer_err(&self, peer: usize, what: &str, source: Error) -> GridError {
        GridError::Peer {
            rank: self.rank,
            peer,
            dir: what.to_string(),
            source,
        }
    }

    /// Spins, then yields; every 1024 rounds checks the timeout and, for a wait on side
    /// `side`, whether its peer is still there.
    fn backoff(&mut self, w: &mut Wait, side: Option<(usize, &'static str)>) -> Result<()> {
        w.spins = w.spins.wrapping_add(1);
        if !w.yielding && w.spins.is_multiple_of(64) {
            w.yielding = w.start.elapsed() >= self.opts.spin;
        }
        if w.yielding {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
        if !w.spins.is_multiple_of(1024) {
            return Ok(());
        }
        let start = w.start;
        if let Some((i, _)) = side {
            let s = &self.sides[i];
            if let Some(pi) = s.peer {
                let p = &self.peers[pi];
                match p.ep.try_recv(&mut self.scratch) {
                    Ok(Progress::WouldBlock) => {}
                    Ok(Progress::Ready(n)) => {
                        return Err(self.peer_err(
                            p.rank,
                            &s.dir.to_string(),
                            Error::Protocol {
                                peer: p.ep.peer_addr().to_string(),
                                reason: format!("a {n}-byte message during a one-sided exchange"),
                            },
                        ))
                    }
                    Err(e) => return Err(self.peer_err(p.rank, &s.dir.to_string(), e)),
                }
            }
        }
        if start.elapsed() > self.opts.timeout {
            let (i, what) = side.unwrap_or((0, "synchronize"));
            let s = &self.sides[i.min(self.sides.len().saturating_sub(1))];
            return Err(GridError::Timeout {
                rank: self.rank,
                peer: s.rank,
                dir: s.dir,
                what,
                after: self.opts.timeout,
            });
        }
        Ok(())
    }

    /// Faces across a periodic axis this rank holds whole land in its own opposite ghosts.
    fn copy_to_self(&mut self) {
        let elem = self.elem();
        for i in 0..self.sides.len() {
            let s = &self.sides[i];
            if s.peer.is_some() {
                continue;
            }
            let face = self.face_runs(s);
            let ghosts = self.layout.ghosts(s.dir.opposite());
            let mut sections = vec![(self.secs.data, elem)];
            if self.opts.checked {
                sections.push((self.secs.tags, TAG));
            }
            for (base, size) in sections {
                let mut buf = Vec::with_capacity(face.elems() * size);
                // SAFETY: runs lie inside the section of `size`-byte elements at `base`.
                unsafe { pack(self.arr(base), &face, size, &mut buf) };
                // SAFETY: as above, for the ghost runs of the same element count.
                unsafe { unpack(self.arr(base), &ghosts, size, &buf) };
            }
        }
    }

    /// Packs the faces that go to other ranks (with `strided_only`, those a direct RMA
    /// cannot move).
    fn pack_faces(&mut self, strided_only: bool) {
        for i in 0..self.sides.len() {
            let s = &self.sides[i];
            if s.peer.is_some() && !(strided_only && s.contiguous) && !s.caller_packs {
                self.pack_side(i);
            }
        }
    }

    /// Packs side `i`'s face: into its outbox on the RMA path (written into the neighbour
    /// from there), into its send buffer on the messages path.
    fn pack_side(&mut self, i: usize) {
        let elem = self.elem();
        let face = self.face_runs(&self.sides[i]);
        let (pd, pt) = (self.arr(self.secs.data), self.arr(self.secs.tags));
        let checked = self.opts.checked;
        if self.opts.path == Path::Rma {
            let out = self.ptr(self.secs.outbox[self.sides[i].dir.index()]);
            // SAFETY: face runs lie inside the data (and tag) sections; the outbox of a
            // strided side holds its face's elements and tags (`Sections::of`) and
            // overlaps neither.
            unsafe {
                let n = pack_into(pd, &face, elem, out);
                if checked {
                    pack_into(pt, &face, TAG, out.add(n));
                }
            }
            return;
        }
        let buf = &mut self.sides[i].send_buf;
        buf.clear();
        // SAFETY: face runs lie inside the data (and tag) sections.
        unsafe {
            pack(pd, &face, elem, buf);
            if checked {
                pack(pt, &face, TAG, buf);
            }
        }
    }

    fn finish(&mut self) -> Result<()> {
        match self.opts.path {
            Path::Rma => {
                for i in 0..self.sides.len() {
                    if self.sides[i].peer.is_none() {
                        continue;
                    }
                    let at = self.secs.filled(self.sides[i].dir);
                    self.wait_counter(i, at, "fill its ghosts")?;
                    if self.sides[i].staged_in && !self.sides[i].caller_unpacks {
                        self.unpack_staging(i);
                    }
                }
            }
            Path::Messages => self.progress_messages()?,
        }
        if self.opts.checked {
            self.verify()?;
        }
        Ok(())
    }
}

/// One wait for a neighbour: spinning until [`ExchangeOptions::spin`] has passed, then
/// yielding the core.
pub(crate) struct Wait {
    start: Instant,
    spins: u32,
    yielding: bool,
}

impl Wait {
    pub(crate) fn new() -> Wait {
        Wait {
            start: Instant::now(),
            spins: 0,
            yielding: false,
        }
    }
}

/// An exchange in flight: [`wait`](Pending::wait) finishes it.
#[must_use = "an exchange finishes only in wait()"]
pub struct Pending<'a, T: Pod> {
    ex: &'a mut HaloExchange<T>,
    sync: Duration,
    started: Instant,
}

impl<T: Pod> Pending<'_, T> {
    /// Waits until every ghost of this rank is filled (and, in checked mode, verified).
    pub fn wait(self) -> Result<ExchangeTimes> {
        self.ex.finish()?;
        Ok(ExchangeTimes {
            sync: self.sync,
            communicate: self.started.elapsed(),
        })
    }
}

/// Appends the elements of `runs` (of `size` bytes each) at `base` to `out`.
///
/// # Safety
/// Every run must lie inside memory valid for reads at `base`.
unsafe fn pack(base: *const u8, runs: &Runs, size: usize, out: &mut Vec<u8>) {
    out.reserve(runs.elems() * size);
    for &(start, n) in runs.as_slice() {
        // SAFETY: the caller guarantees the run is readable.
        let src = unsafe { std::slice::from_raw_parts(base.add(start * size), n * size) };
        out.extend_from_slice(src);
    }
}

/// Copies the elements of `runs` (of `size` bytes each) at `base` to `out`, one after
/// another; returns the bytes copied.
///
/// # Safety
/// Every run must lie inside memory valid for reads at `base`; `out` must be valid for
/// writes of every element and overlap none of them.
unsafe fn pack_into(base: *const u8, runs: &Runs, size: usize, out: *mut u8) -> usize {
    let mut at = 0;
    for &(start, n) in runs.as_slice() {
        let len = n * size;
        // SAFETY: the caller guarantees both ranges.
        unsafe { std::ptr::copy_nonoverlapping(base.add(start * size), out.add(at), len) };
        at += len;
    }
    at
}

/// Scatters `src` over the elements of `runs` (of `size` bytes each) at `base`.
///
/// # Safety
/// Every run must lie inside memory valid for writes at `base`, not overlapping `src`.
unsafe fn unpack(base: *mut u8, runs: &Runs, size: usize, src: &[u8]) {
    let mut at = 0;
    for &(start, n) in runs.as_slice() {
        let len = n * size;
        // SAFETY: the caller guarantees the run is writable and disjoint from `src`.
        unsafe {
            std::ptr::copy_nonoverlapping(src[at..at + len].as_ptr(), base.add(start * size), len)
        };
        at += len;
    }
}
