//! The streaming Jacobi/Laplacian workload of seed 001, timed by phase.
//!
//! A grid `X` starts with fixed borders (1.0 on every non-periodic global border) and
//! pseudo-random values inside. Each iteration takes the Laplacian of `X` into `Y` (5-point
//! in 2D, 7-point in 3D), adds `coef · Y` to `X` on every cell that is not a fixed border,
//! then the ranks exchange halos. The seed times three phases per iteration: compute,
//! communicate and synchronize; [`run`] records all three for every iteration
//! ([`StepTimes`]), synchronize being the neighbours' "ghosts free" handshake of
//! [`HaloExchange`].
//!
//! **The kernel streams.** `Y` is never a whole grid: `Y` of one slab (a row in 2D, a plane
//! in 3D) waits in a slab buffer, and `X` of that slab is updated in the same loop that
//! computes `Y` of the next one (see [`Kernel`]). Each iteration so reads `X` once and
//! writes it once (16 bytes per f64 cell) — the same work as a copy of the grid, the
//! ceiling [`run`]'s caller reports beside it. The inner loops are plain loops over
//! equal-length slices, which the compiler vectorizes, and each row asks for the next
//! row's operand from memory before it starts (a software prefetch: about 25% faster here,
//! see `prefetch`). The MPI reference (`benches/peers/laplace_mpi.c`) runs the same kernel,
//! prefetch included.
//!
//! **Strided faces are packed and unpacked in the sweep.** On the RMA path a face one
//! element per row (a split of the contiguous axis) would cost the exchange one cache and
//! TLB miss per element to gather, and the neighbour as many to scatter (seed 001, section
//! 6.3). [`run`] lets the kernel do both where the lines are hot: each face cell is copied
//! into the face's send buffer right after its update, and each ghost cell is copied from
//! the staged data the neighbour wrote just before the stencil that reads it
//! ([`HaloExchange::pack_in_compute`], [`HaloExchange::unpack_in_compute`]). The exchange
//! then only moves the packed bytes; the copies are timed as compute.
//!
//! **Results do not depend on the decomposition.** Every cell is computed by the same
//! expression with its operands in the same order, whichever rank owns it, so an N-rank run
//! equals a 1-rank run bit for bit ([`digest`] summarizes a rank's cells independently of
//! the split).

use std::time::{Duration, Instant};

use crate::decomp::Decomposition;
use crate::error::Result;
use crate::exchange::{HaloExchange, InRunProbe};
use crate::layout::{Layout, Runs};

/// Parameters of a run.
#[derive(Clone, Debug)]
pub struct LaplaceOptions {
    /// Iterations. Default 100.
    pub iters: usize,
    /// The factor of `Y` added to `X`; `None`: 0.2 in 2D, 0.1 in 3D (both stable: below
    /// 1/4 and 1/6).
    pub coef: Option<f64>,
    /// Seed of the initial values. Default 1.
    pub seed: u64,
    /// Every this many iterations, time one face crossing each pair right after the sweep
    /// ([`HaloExchange::probe_in_run`]): the pair's one-way time in the run's own cache
    /// state, interleaved with the exchanges it is compared to. Those iterations' exchange
    /// times are not the run's ([`StepTimes::probed`]). 0 (default): never.
    pub probe_every: usize,
}

impl Default for LaplaceOptions {
    fn default() -> Self {
        LaplaceOptions {
            iters: 100,
            coef: None,
            seed: 1,
            probe_every: 0,
        }
    }
}

/// Time of one iteration on one rank, by phase.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepTimes {
    /// The stencil and the update.
    pub compute: Duration,
    /// Waiting for the neighbours to be done with their ghosts.
    pub sync: Duration,
    /// Moving the halos.
    pub communicate: Duration,
    /// A probe ran between the sweep and the exchange ([`LaplaceOptions::probe_every`]):
    /// the faces had crossed already, so `sync` and `communicate` are not an exchange's.
    pub probed: bool,
}

/// One rank's run.
#[derive(Clone, Debug)]
pub struct RankRun {
    /// The rank.
    pub rank: usize,
    /// Cells this rank owns.
    pub cells: usize,
    /// Cells this rank updates per iteration (owned minus fixed borders).
    pub updated: usize,
    /// Data bytes this rank sends per exchange.
    pub halo_bytes: u64,
    /// Every iteration's phases.
    pub steps: Vec<StepTimes>,
    /// The in-run probes ([`LaplaceOptions::probe_every`]), every probed iteration's
    /// appended.
    pub probes: InRunProbe,
    /// [`digest`] of the final owned cells.
    pub digest: u64,
}

/// The initial value of global cell `g`: 1.0 on the fixed borders, pseudo-random in
/// [0, 1) elsewhere.
pub fn initial_value(decomp: &Decomposition, g: [usize; 3], seed: u64) -> f64 {
    if is_border(decomp, g) {
        return 1.0;
    }
    let shape = decomp.shape();
    let linear = (g[0] * shape[1] + g[1]) * shape[2] + g[2];
    (mix(linear as u64 ^ mix(seed)) >> 11) as f64 / (1u64 << 53) as f64
}

fn is_border(decomp: &Decomposition, g: [usize; 3]) -> bool {
    let (shape, periodic) = (decomp.shape(), decomp.periodic());
    (3 - decomp.ndim()..3).any(|a| !periodic[a] && (g[a] == 0 || g[a] + 1 == shape[a]))
}

/// splitmix64's finalizer.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fills `ex`'s owned cells with their [`initial_value`]s.
pub fn init(ex: &mut HaloExchange<f64>, seed: u64) {
    let (decomp, layout) = (ex.decomposition().clone(), ex.layout().clone());
    let field = ex.field_mut();
    let (lo, hi) = owned(&layout);
    Layout::for_each_cell(lo, hi, |c| {
        let g = layout
            .global_of(&decomp, c)
            .expect("owned cells are inside the grid");
        field[layout.index(c)] = initial_value(&decomp, g, seed);
    });
}

fn owned(layout: &Layout) -> ([usize; 3], [usize; 3]) {
    let lo = layout.halo;
    let hi = [0, 1, 2].map(|a| layout.halo[a] + layout.block.len[a]);
    (lo, hi)
}

/// An order-independent summary of a rank's owned cells: the wrapping sum over cells of a
/// hash of (global index, value bits). The digests of a decomposition's ranks sum to the
/// digest of the whole grid, whatever the split.
pub fn digest(ex: &HaloExchange<f64>) -> u64 {
    let (decomp, layout) = (ex.decomposition(), ex.layout());
    let shape = decomp.shape();
    let field = ex.field();
    let (lo, hi) = owned(layout);
    let mut sum = 0u64;
    Layout::for_each_cell(lo, hi, |c| {
        let g = layout
            .global_of(decomp, c)
            .expect("owned cells are inside the grid");
        let linear = ((g[0] * shape[1] + g[1]) * shape[2] + g[2]) as u64;
        sum = sum.wrapping_add(mix(linear ^ mix(field[layout.index(c)].to_bits())));
    });
    sum
}

/// The coefficient a run uses.
pub fn coef(decomp: &Decomposition, opts: &LaplaceOptions) -> f64 {
    opts.coef
        .unwrap_or(if decomp.ndim() == 2 { 0.2 } else { 0.1 })
}

/// Runs the workload on one rank: initial values, a first exchange to fill the ghosts,
/// then `iters` times compute and exchange, each phase timed.
pub fn run(ex: &mut HaloExchange<f64>, opts: &LaplaceOptions) -> Result<RankRun> {
    init(ex, opts.seed);
    ex.exchange()?;
    let c = coef(ex.decomposition(), opts);
    let mut kernel = Kernel::new(ex.decomposition(), ex.layout());
    // Every rank sweeps in memory order, as the MPI reference does. Sweeping toward the
    // face that leaves next (descending on a rank whose only neighbour is below) kept the
    // face in cache for its put, but the descending sweeps ran slower beside an ascending
    // one and the pair waited for them, so the kernel no longer sweeps descending:
    // 4096x4096 on 2 ranks over shm, 6 interleaved runs of 3 each way, total per iteration
    // 1.02x the MPI reference's (median of the runs' ratios) toward the face, 0.97x in
    // memory order, synchronize 0.02-0.06 ms against 0.01-0.05. With streaming puts, a
    // face read from memory costs the put little.
    // Strided faces are packed in the sweep, where their cells are hot, and their ghosts
    // unpacked in it, each row's just before its stencil.
    if kernel.pack_faces(&ex.packable_faces()) {
        ex.pack_in_compute();
    }
    if kernel.unpack_ghosts(&ex.unpackable_ghosts()) {
        ex.unpack_in_compute();
    }
    // The faces the exchange reads come into cache as the sweep ends. Measured on 2 ranks
    // over shm, 4096x4096, three runs each interleaved with runs without: communicate 4.0,
    // 4.1 and 4.2 us per iteration against 4.8, 4.9 and 5.4 with contiguous faces (rank 1's
    // face, its first row, was put from memory), 3.9-4.2 against 3.9-4.4 packed; total
    // within the noise.
    kernel.warm_faces(&ex.direct_faces());
    let mut steps = Vec::with_capacity(opts.iters);
    let mut probes = InRunProbe::default();
    for i in 0..opts.iters {
        let t = Instant::now();
        let (field, mut faces, staged) = ex.field_and_packed_faces_mut();
        kernel.step_packing(field, c, &mut faces, &staged);
        let compute = t.elapsed();
        // Probed iterations sit in the middle of each stretch, away from the first.
        let probed = opts.probe_every > 0 && i % opts.probe_every == opts.probe_every / 2;
        if probed {
            // One face alone and both at once take turns.
            let p = ex.probe_in_run((i / opts.probe_every) % 2 == 1)?;
            probes.one_way.extend(p.one_way);
            probes.both.extend(p.both);
        }
        let x = ex.exchange()?;
        steps.push(StepTimes {
            compute,
            sync: x.sync,
            communicate: x.communicate,
            probed,
        });
    }
    // The ghosts the sweep would have filled next, so the array is whole again.
    ex.unpack_staged();
    Ok(RankRun {
        rank: ex.rank(),
        cells: ex.layout().block.cells(),
        updated: kernel.updated(),
        halo_bytes: ex.halo_bytes(),
        steps,
        probes,
        digest: digest(ex),
    })
}

/// The streaming stencil over one rank's subgrid (see the module docs).
#[derive(Clone, Debug)]
pub struct Kernel {
    ndim: usize,
    layout: Layout,
    /// The cells updated, in allocated coordinates: `lo..hi` per axis.
    lo: [usize; 3],
    hi: [usize; 3],
    /// `Y` of the slab swept last, waiting to be added to its `X`.
    slab: Vec<f64>,
    /// The widest vectors the CPU has: the loops run in a copy compiled for them.
    simd: Simd,
    /// The columns of the faces packed in the sweep (see [`Kernel::pack_faces`]).
    face_cols: Vec<usize>,
    /// The columns of the ghosts unpacked in the sweep (see [`Kernel::unpack_ghosts`]).
    ghost_cols: Vec<usize>,
    /// The row whose face cells [`pack_later`](Self::pack_later) packs next.
    pending_pack: std::cell::Cell<Option<(usize, usize)>>,
    /// The runs of the array brought into cache as the sweep ends (see
    /// [`Kernel::warm_faces`]): (first element, elements).
    warm: Vec<(usize, usize)>,
}

impl Kernel {
    /// The kernel for `layout`'s subgrid of `decomp`.
    pub fn new(decomp: &Decomposition, layout: &Layout) -> Kernel {
        let (shape, periodic) = (decomp.shape(), decomp.periodic());
        let (mut lo, mut hi) = owned(layout);
        for a in 3 - decomp.ndim()..3 {
            if !periodic[a] {
                if layout.block.start[a] == 0 {
                    lo[a] += 1;
                }
                if layout.block.start[a] + layout.block.len[a] == shape[a] {
                    hi[a] -= 1;
                }
            }
            hi[a] = hi[a].max(lo[a]);
        }
        let ndim = decomp.ndim();
        let rows = if ndim == 3 { hi[1] - lo[1] } else { 1 };
        let slab = rows * (hi[2] - lo[2]);
        Kernel {
            ndim,
            layout: layout.clone(),
            lo,
            hi,
            slab: vec![0.0; slab],
            simd: Simd::detect(),
            face_cols: Vec::new(),
            ghost_cols: Vec::new(),
            pending_pack: std::cell::Cell::new(None),
            warm: Vec::new(),
        }
    }

    /// Packs these faces during the sweep: each updated cell of a face is also written into
    /// that face's buffer (given to [`step_packing`](Self::step_packing)) right after its
    /// update, while its line is in cache. A face can be packed so when it is one column of
    /// the owned cells (the contiguous axis, halo 1): one element per row, rows in order.
    /// Returns false, and packs nothing, when one of `faces` is not such a column.
    pub fn pack_faces(&mut self, faces: &[Runs]) -> bool {
        match self.columns(faces) {
            Some(cols) => {
                self.face_cols = cols;
                true
            }
            None => false,
        }
    }

    /// Brings these runs of the array, and the face buffers of
    /// [`pack_faces`](Self::pack_faces), into cache as the sweep ends (prefetched as its
    /// last slab starts, up to 512 KiB in all): the faces the exchange after the
    /// sweep reads. A face the sweep wrote first (the lower face of the slow axis), or a
    /// buffer it filled cell by cell from the first row on, has left the caches by then,
    /// and the exchange would wait for memory.
    pub fn warm_faces(&mut self, faces: &[Runs]) {
        self.warm = faces.iter().flat_map(|f| f.as_slice().to_vec()).collect();
    }

    /// Fills these ghosts during the sweep, each row's just before its stencil, from the
    /// staged data given to [`step_packing`](Self::step_packing); the same condition as
    /// [`pack_faces`](Self::pack_faces).
    pub fn unpack_ghosts(&mut self, ghosts: &[Runs]) -> bool {
        match self.columns(ghosts) {
            Some(cols) => {
                self.ghost_cols = cols;
                true
            }
            None => false,
        }
    }

    /// The column of each of `sets`, if each is one column over the owned rows.
    fn columns(&self, sets: &[Runs]) -> Option<Vec<usize>> {
        let l = &self.layout;
        let mut cols = Vec::new();
        for f in sets {
            let &(first, _) = f.as_slice().first()?;
            let col = first % l.alloc[2];
            let mut want = Vec::new();
            for z in l.halo[0]..l.halo[0] + l.block.len[0] {
                for y in l.halo[1]..l.halo[1] + l.block.len[1] {
                    want.push((l.index([z, y, col]), 1));
                }
            }
            if f.as_slice() != want.as_slice() {
                return None;
            }
            cols.push(col);
        }
        Some(cols)
    }

    /// [`step`](Self::step), also writing the faces set by [`pack_faces`](Self::pack_faces)
    /// into `faces` (one buffer per face, in the same order, each 8 bytes per face cell)
    /// and filling the ghosts set by [`unpack_ghosts`](Self::unpack_ghosts) from `ghosts`
    /// (likewise).
    ///
    /// # Panics
    /// If `faces` does not match the faces set, or a buffer is too short.
    pub fn step_packing(
        &mut self,
        x: &mut [f64],
        coef: f64,
        faces: &mut [&mut [u8]],
        ghosts: &[&[u8]],
    ) {
        assert_eq!(
            faces.len(),
            self.face_cols.len(),
            "one buffer per packed face"
        );
        assert_eq!(
            ghosts.len(),
            self.ghost_cols.len(),
            "one staging per unpacked ghost"
        );
        let l = &self.layout;
        let n = l.block.len[0] * l.block.len[1] * 8;
        for f in faces.iter() {
            assert!(f.len() >= n, "a face buffer is short");
        }
        for g in ghosts {
            assert!(g.len() >= n, "a staging area is short");
        }
        self.step_inner(x, coef, faces, ghosts);
    }

    /// Cells updated per step.
    pub fn updated(&self) -> usize {
        (0..3).map(|a| self.hi[a] - self.lo[a]).product()
    }

    /// One Jacobi step on `x` (the rank's array, ghosts filled): `x += coef · ∇²x` on every
    /// updated cell.
    ///
    /// # Panics
    /// If `x` is shorter than the layout's allocation.
    pub fn step(&mut self, x: &mut [f64], coef: f64) {
        self.step_inner(x, coef, &mut [], &[]);
    }

    fn step_inner(&mut self, x: &mut [f64], coef: f64, faces: &mut [&mut [u8]], ghosts: &[&[u8]]) {
        if self.updated() == 0 {
            return;
        }
        assert!(
            x.len() >= self.layout.elems(),
            "the kernel's array holds {} elements, its layout {}",
            x.len(),
            self.layout.elems()
        );
        match self.simd {
            // SAFETY: `Simd::detect` picks AVX-512 only where the CPU reports AVX512F.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512 => unsafe { self.step_avx512(x, coef, faces, ghosts) },
            // SAFETY: `Simd::detect` picks AVX2 only where the CPU reports AVX2.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => unsafe { self.step_avx2(x, coef, faces, ghosts) },
            Simd::Baseline => self.step_body(x, coef, faces, ghosts),
        }
    }

    /// [`step`](Self::step) compiled for AVX-512 (512-bit vectors, as `gcc -march=native`
    /// compiles the MPI reference's kernel on such a CPU; same expressions, same bits).
    ///
    /// # Safety
    /// The CPU must support AVX512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn step_avx512(
        &mut self,
        x: &mut [f64],
        coef: f64,
        faces: &mut [&mut [u8]],
        ghosts: &[&[u8]],
    ) {
        self.step_body(x, coef, faces, ghosts);
    }

    /// [`step`](Self::step) compiled for AVX2 (the same expressions: Rust never fuses a
    /// multiply and an add, so results stay bit-identical to the generic copy).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn step_avx2(
        &mut self,
        x: &mut [f64],
        coef: f64,
        faces: &mut [&mut [u8]],
        ghosts: &[&[u8]],
    ) {
        self.step_body(x, coef, faces, ghosts);
    }

    /// One pass over the slabs. `Y` of the first slab goes into the slab buffer; then each
    /// next slab's `Y` is computed cell by cell, and in the same loop the slab before it gets
    /// its `X += coef · Y` from the buffer, whose cell then takes the new `Y`. A cell of the
    /// slab before is read by no stencil after the one of the same cell in this slab (the
    /// stencils of this slab read only that cell of it), so it may be updated right there:
    /// each cell of `X` is loaded and stored once per step, and the three rows the stencil
    /// reads, the row it updates and the buffer stay in cache between slabs. (Two buffers,
    /// `Y` of a whole slab and then the update as a second loop, ran 15-25% slower here: the
    /// update pass reloaded the slab and its `X` from L2.)
    #[inline(always)]
    fn step_body(&mut self, x: &mut [f64], coef: f64, faces: &mut [&mut [u8]], ghosts: &[&[u8]]) {
        let s_axis = 3 - self.ndim;
        let (first, last) = (self.lo[s_axis], self.hi[s_axis]);
        let mut y = std::mem::take(&mut self.slab);
        // Each row's ghosts are filled while the row before it is swept (`unpack_next`):
        // the first row's here.
        if let Some((zz, yy)) = self.rows(first).next() {
            self.unpack_row(x, zz, yy, ghosts);
        }
        self.laplacian(x, first, &mut y, ghosts);
        for s in first + 1..last {
            if s + 1 == last {
                self.prefetch_faces(x, faces);
            }
            self.fused(x, s, &mut y, coef, faces, ghosts);
        }
        self.update(x, last - 1, &y, coef, faces);
        self.slab = y;
    }

    /// Prefetches the runs of [`warm_faces`](Self::warm_faces) and the face buffers, up to
    /// [`WARM_BYTES`] in all.
    #[inline(always)]
    fn prefetch_faces(&self, x: &[f64], faces: &[&mut [u8]]) {
        let mut budget = WARM_BYTES;
        for &(at, n) in &self.warm {
            let n = n.min(budget / 8);
            prefetch(x, at, n);
            budget -= n * 8;
        }
        for f in faces {
            let n = f.len().min(budget);
            prefetch(f, 0, n);
            budget -= n;
        }
    }

    /// The rows of slab `s`, as (z, y) pairs.
    #[inline(always)]
    fn rows(&self, s: usize) -> impl Iterator<Item = (usize, usize)> {
        let (lo, hi, ndim) = (self.lo, self.hi, self.ndim);
        let ys = if ndim == 3 { lo[1]..hi[1] } else { s..s + 1 };
        let z = if ndim == 3 { s } else { lo[0] };
        ys.map(move |y| (z, y))
    }

    /// Distances between neighbours along the rows and the planes of `x`.
    #[inline(always)]
    fn strides(&self) -> (usize, usize) {
        let l = &self.layout;
        (l.alloc[2], l.alloc[1] * l.alloc[2])
    }

    /// `Y` of slab `s` into `y`.
    #[inline(always)]
    fn laplacian(&self, x: &mut [f64], s: usize, y: &mut [f64], ghosts: &[&[u8]]) {
        let w = self.hi[2] - self.lo[2];
        let (row, plane) = self.strides();
        for (k, (zz, yy)) in self.rows(s).enumerate() {
            self.unpack_next(x, zz, yy, ghosts);
            let m = self.layout.index([zz, yy, self.lo[2]]);
            let out = &mut y[k * w..(k + 1) * w];
            let (left, mid, right) = (&x[m - 1..m - 1 + w], &x[m..m + w], &x[m + 1..m + 1 + w]);
            let (up, down) = (&x[m - row..m - row + w], &x[m + row..m + row + w]);
            if self.ndim == 2 {
                for i in 0..w {
                    out[i] = (left[i] + right[i]) + (up[i] + down[i]) - 4.0 * mid[i];
                }
            } else {
                let (front, back) = (&x[m - plane..m - plane + w], &x[m + plane..m + plane + w]);
                for i in 0..w {
                    out[i] = ((left[i] + right[i]) + (up[i] + down[i])) + (front[i] + back[i])
                        - 6.0 * mid[i];
                }
            }
        }
    }

    /// `Y` of slab `s`, and in the same loop `X += coef · y` on the slab swept before it
    /// (`s - 1`), `y` then taking slab `s`'s `Y`.
    #[inline(always)]
    fn fused(
        &self,
        x: &mut [f64],
        s: usize,
        y: &mut [f64],
        coef: f64,
        faces: &mut [&mut [u8]],
        ghosts: &[&[u8]],
    ) {
        let w = self.hi[2] - self.lo[2];
        let (row, plane) = self.strides();
        // The slab before, seen from a cell of this one.
        let back = if self.ndim == 2 { row } else { plane };
        for (k, (zz, yy)) in self.rows(s).enumerate() {
            self.unpack_next(x, zz, yy, ghosts);
            let m = self.layout.index([zz, yy, self.lo[2]]);
            // The next row's operand from memory (see `prefetch`).
            prefetch(x, m + row + if self.ndim == 2 { row } else { plane }, w);
            let ys = &mut y[k * w..(k + 1) * w];
            // The row updated is one of the stencil's operands (up in 2D, front in 3D) and
            // lies wholly before every other one, so `x` splits into that row, mutable, and
            // the rest.
            let base = m - back + w;
            let (before, rest) = x.split_at_mut(base);
            let done = &mut before[m - back..];
            let o = |d: isize| &rest[(m as isize + d) as usize - base..][..w];
            let (left, mid, right) = (o(-1), o(0), o(1));
            if self.ndim == 2 {
                let down = o(row as isize);
                for i in 0..w {
                    let v = (left[i] + right[i]) + (done[i] + down[i]) - 4.0 * mid[i];
                    done[i] += coef * ys[i];
                    ys[i] = v;
                }
            } else {
                let (up, down) = (o(-(row as isize)), o(row as isize));
                let behind = o(plane as isize);
                for i in 0..w {
                    let v = ((left[i] + right[i]) + (up[i] + down[i])) + (done[i] + behind[i])
                        - 6.0 * mid[i];
                    done[i] += coef * ys[i];
                    ys[i] = v;
                }
            }
            // The row of the slab before, just updated.
            if self.ndim == 2 {
                self.pack_later(x, zz, yy - 1, faces);
            } else {
                self.pack_later(x, zz - 1, yy, faces);
            }
        }
    }

    /// `X += coef · y` on slab `s`.
    #[inline(always)]
    fn update(&self, x: &mut [f64], s: usize, y: &[f64], coef: f64, faces: &mut [&mut [u8]]) {
        let w = self.hi[2] - self.lo[2];
        for (k, (zz, yy)) in self.rows(s).enumerate() {
            let m = self.layout.index([zz, yy, self.lo[2]]);
            let (xs, ys) = (&mut x[m..m + w], &y[k * w..(k + 1) * w]);
            for (xv, yv) in xs.iter_mut().zip(ys) {
                *xv += coef * yv;
            }
            self.pack_later(x, zz, yy, faces);
        }
        // The last row updated.
        if let Some((zz, yy)) = self.pending_pack.take() {
            self.pack_row(x, zz, yy, faces);
        }
    }

    /// Copies the ghost cells of the row swept after (`zz`, `yy`), if any, from their
    /// staged data, before (`zz`, `yy`)'s stencil. The staged value of a row is loaded from
    /// a line the neighbour's core wrote (a miss every 8 rows), and the ghost store waits
    /// for it; done right before its own row's stencil, that wait cost the sweep: 4096x4096
    /// over 2 ranks split along rows (packed faces), 100 steps, 10 runs each of the build
    /// before and this one interleaved, rank 0 (its ghosts at the ends of its rows)
    /// computed a step in 8.66 ms (median) against rank 1's 7.88 before, and rank 1 waited
    /// for it; one row ahead, 8.05 and 7.87, total per step 8.09 ms against 8.68, lower in
    /// all 10 runs, same final grid (the imbalance the last stops had seen and not
    /// explained). Unpacking in the exchange instead cost a step more (8.74 ms against 8.97
    /// in another 8 runs) and made communicate 0.083 ms instead of 0.0055. Split along
    /// columns (no ghosts unpacked here), 8 runs each: 9.07 against 9.08.
    #[inline(always)]
    fn unpack_next(&self, x: &mut [f64], zz: usize, yy: usize, ghosts: &[&[u8]]) {
        if self.ghost_cols.is_empty() {
            return;
        }
        let next = if yy + 1 < self.hi[1] {
            Some((zz, yy + 1))
        } else if self.ndim == 3 && zz + 1 < self.hi[0] {
            Some((zz + 1, self.lo[1]))
        } else {
            None
        };
        if let Some((z, y)) = next {
            self.unpack_row(x, z, y, ghosts);
        }
    }

    /// Copies the ghost cells of row (`zz`, `yy`) from their staged data.
    #[inline(always)]
    fn unpack_row(&self, x: &mut [f64], zz: usize, yy: usize, ghosts: &[&[u8]]) {
        let l = &self.layout;
        let j = (zz - l.halo[0]) * l.block.len[1] + (yy - l.halo[1]);
        for (g, &col) in ghosts.iter().zip(&self.ghost_cols) {
            let v: [u8; 8] = g[j * 8..j * 8 + 8].try_into().expect("8 bytes");
            x[l.index([zz, yy, col])] = f64::from_ne_bytes(v);
        }
    }

    /// Packs the face cells of the row updated before (`zz`, `yy`), and keeps this one for
    /// the next call (or the end of [`update`](Self::update)): each face cell is read a row
    /// after the loop stored it. Read right after, the face at the end of the rows (the last
    /// cell the loop stores) stalled the sweep: 4096x4096 on 2 ranks as 1x2 (strided faces),
    /// rank 0 (its face at the end of its rows) computed a step 0.10-0.21 ms slower than
    /// rank 1, 0.03 with the face packed a row later, six interleaved runs each; reading the
    /// cell without writing it cost the same, writing the buffer without reading it did not.
    #[inline(always)]
    fn pack_later(&self, x: &[f64], zz: usize, yy: usize, faces: &mut [&mut [u8]]) {
        if self.face_cols.is_empty() {
            return;
        }
        if let Some((z, y)) = self.pending_pack.replace(Some((zz, yy))) {
            self.pack_row(x, z, y, faces);
        }
    }

    /// Copies the face cells of row (`zz`, `yy`) into the face buffers.
    #[inline(always)]
    fn pack_row(&self, x: &[f64], zz: usize, yy: usize, faces: &mut [&mut [u8]]) {
        let l = &self.layout;
        let j = (zz - l.halo[0]) * l.block.len[1] + (yy - l.halo[1]);
        for (f, &col) in faces.iter_mut().zip(&self.face_cols) {
            f[j * 8..j * 8 + 8].copy_from_slice(&x[l.index([zz, yy, col])].to_ne_bytes());
        }
    }
}

/// The most face bytes a sweep brings into cache for the exchange after it
/// ([`Kernel::warm_faces`]): a fraction of a core's private cache (2 MiB of L2 here), so
/// that a large 3D face does not evict the rows the sweep still works on.
const WARM_BYTES: usize = 512 << 10;

/// Asks the CPU to bring `x[at..at + len]` (clamped to `x`) into its caches: one prefetch
/// per cache line (of 64 bytes).
///
/// The sweep calls it with the next row's only operand that comes from memory (its down
/// row in 2D, the plane behind in 3D) before each row's loop. The hardware prefetcher
/// follows that stream only partly while the loop also walks the four rows in cache; asked
/// for a row ahead, the lines arrive while this row computes. Measured with the `kernel`
/// example on one rank, 40 steps, three runs interleaved with the build before: 4096x4096
/// 12.98-13.24 ms per step at the min against 16.19-16.75 (10.1-10.3 GB/s of cells against
/// 8.0-8.3); 256x256x256 15.1 against 18.1 (one run each). Prefetching in chunks of 512
/// cells inside the loop gained less (14.6-15.1 ms), two or four rows ahead no more than
/// one. The MPI reference's copy of the kernel gained as much (compute 18.8 and 19.3 ms to
/// 14.8 and 14.5, same digest).
#[inline(always)]
fn prefetch<E>(x: &[E], at: usize, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let end = (at + len).min(x.len());
        let step = (64 / std::mem::size_of::<E>()).max(1);
        let mut i = at;
        // (A `while` loop: `step_by` compiled to slower code here, 14.1-14.9 ms per step.)
        while i < end {
            // SAFETY: `i` is inside `x`, and a prefetch changes no memory.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    x.as_ptr().add(i).cast(),
                )
            };
            i += step;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (x, at, len);
}

/// The vector width a [`Kernel`] is compiled for, chosen at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Simd {
    Baseline,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Simd {
    fn detect() -> Simd {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Simd::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Simd::Avx2;
            }
        }
        Simd::Baseline
    }
}

/// The STREAM-like ceiling of the kernel: the best rate, over `reps` passes, of sweeping a
/// fresh array of `bytes` in place (`x[i] = x[i] · s`: each element read once and written
/// once, as the kernel does, and as vectorizable), in GB/s of array bytes per second. Run
/// on every rank at once, it is the node's memory bandwidth shared as the run shares it.
pub fn sweep_gbps(bytes: usize, reps: usize) -> f64 {
    let n = (bytes / 8).max(512);
    let mut x = vec![1.0f64; n];
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        // The array goes through black_box before and after the pass, so the pass can be
        // neither skipped nor moved past the clock.
        let xs = std::hint::black_box(&mut x[..]);
        for v in xs.iter_mut() {
            *v *= 1.000_000_1;
        }
        std::hint::black_box(xs);
        best = best.min(t.elapsed().as_secs_f64());
    }
    (n * 8) as f64 / best / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The textbook step: `Y` of the whole grid into a second array, then `X += coef · Y`,
    /// with the kernel's expressions in the kernel's order.
    fn naive_step(x: &mut [f64], l: &Layout, lo: [usize; 3], hi: [usize; 3], ndim: usize) {
        let (row, plane) = (l.alloc[2], l.alloc[1] * l.alloc[2]);
        let coef = if ndim == 2 { 0.2 } else { 0.1 };
        let mut y = vec![0.0; x.len()];
        Layout::for_each_cell(lo, hi, |c| {
            let m = l.index(c);
            let lr = x[m - 1] + x[m + 1];
            let ud = x[m - row] + x[m + row];
            y[m] = if ndim == 2 {
                lr + ud - 4.0 * x[m]
            } else {
                (lr + ud) + (x[m - plane] + x[m + plane]) - 6.0 * x[m]
            };
        });
        Layout::for_each_cell(lo, hi, |c| x[l.index(c)] += coef * y[l.index(c)]);
    }

    /// The fused one-buffer sweep equals the two-array step bit for bit
    /// (2D and 3D, one rank, non-periodic: every updated cell's neighbours are owned).
    #[test]
    fn the_fused_sweep_equals_the_two_array_step_bit_for_bit() {
        for shape in [
            &[13usize, 11][..],
            &[7, 6, 9][..],
            &[3, 3][..],
            &[4, 3, 3][..],
        ] {
            let d = Decomposition::new(shape, 1, None, &vec![false; shape.len()], 1).unwrap();
            let l = Layout::of(&d, 0);
            let mut x0 = vec![0.0; l.elems()];
            let (lo, hi) = owned(&l);
            Layout::for_each_cell(lo, hi, |c| {
                let g = l.global_of(&d, c).unwrap();
                x0[l.index(c)] = initial_value(&d, g, 7);
            });
            let coef = coef(&d, &LaplaceOptions::default());
            let mut k = Kernel::new(&d, &l);
            let (mut x, mut want) = (x0.clone(), x0.clone());
            for _ in 0..3 {
                k.step(&mut x, coef);
                naive_step(&mut want, &l, k.lo, k.hi, d.ndim());
            }
            let bits = |v: &[f64]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&x), bits(&want), "{shape:?}");
            assert_ne!(bits(&x), bits(&x0), "{shape:?}: the step changed nothing");
        }
    }
}
