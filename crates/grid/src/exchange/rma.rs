//! The one-sided path: "ghosts free" and "ghosts filled" counters written with
//! `fence_signal`, faces written straight into the neighbour's region, and the pair probe.

use std::time::{Duration, Instant};

use accio_core::RmaFlags;
use bytemuck::Pod;

use super::{unpack, HaloExchange, InRunProbe, Path, SideInfo, Wait, TAG};
use crate::decomp::Dir;
use crate::error::{GridError, Result};

/// What one probe round does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Round {
    /// The caches put in a run's state first (with `sweep`, the whole arrays rewritten);
    /// one face each way.
    Prepared { sweep: bool },
    /// The caches as the caller left them; one face each way.
    AsLeft,
    /// The caches as the caller left them; both faces at once.
    Both,
}

impl<T: Pod> HaloExchange<T> {
    /// Tells every neighbour this rank's ghosts are free, then waits until each neighbour
    /// says the same of its own.
    pub(super) fn sync_rma(&mut self) -> Result<()> {
        for i in 0..self.sides.len() {
            if self.sides[i].peer.is_some() {
                self.signal(i, self.sides[i].remote_ready, self.generation)?;
            }
        }
        for i in 0..self.sides.len() {
            if self.sides[i].peer.is_some() {
                let at = self.secs.ready(self.sides[i].dir);
                self.wait_counter(i, at, "free its ghosts")?;
            }
        }
        Ok(())
    }

    /// Waits for the counter at `at` to reach this exchange's generation; every few hundred
    /// microseconds probes side `i`'s endpoint so that a dead neighbour is noticed.
    pub(super) fn wait_counter(&mut self, i: usize, at: usize, what: &'static str) -> Result<()> {
        self.wait_until(i, at, self.generation, what)
    }

    /// Waits until the counter at `at` reaches `value`. A neighbour found gone fails the
    /// wait only if the counter is still short after that: a neighbour that did its part
    /// and left between our look and the probe (its last exchange done) is no failure.
    fn wait_until(&mut self, i: usize, at: usize, value: u64, what: &'static str) -> Result<()> {
        let mut wait = Wait::new();
        let reached = |ex: &Self| {
            ex.view
                .load_u64(at)
                .map(|v| v >= value)
                .map_err(|source| GridError::Endpoint {
                    what: format!("rank {}: reading a counter", ex.rank),
                    source,
                })
        };
        while !reached(self)? {
            if let Err(e) = self.backoff(&mut wait, Some((i, what))) {
                return if reached(self)? { Ok(()) } else { Err(e) };
            }
        }
        Ok(())
    }

    /// RMA: writes every face (strided ones packed already) into the neighbour's ghosts
    /// (or staging), then signals them filled.
    pub(super) fn put_faces(&mut self) -> Result<()> {
        self.pack_faces(true);
        for i in 0..self.sides.len() {
            let s = &self.sides[i];
            if s.peer.is_some() {
                self.put_side(i, s.remote_filled, self.generation)?;
            }
        }
        Ok(())
    }

    /// Writes side `i`'s face (packed already if it is strided) into its neighbour, then
    /// stores `value` at `counter` of the neighbour's region once the data is there.
    pub(super) fn put_side(&self, i: usize, counter: u64, value: u64) -> Result<()> {
        let elem = self.elem();
        let streaming = self
            .opts
            .streaming
            .unwrap_or(self.layout.elems() * elem >= super::STREAM_ARRAY_BYTES);
        let flags = RmaFlags {
            streaming,
            ..RmaFlags::ASYNC
        };
        let s = &self.sides[i];
        let p = &self.peers[s.peer.expect("a side with another rank")];
        let fail = |e| self.peer_err(s.rank, &s.dir.to_string(), e);
        if s.contiguous && !s.direct {
            // One run, into the neighbour's staging area (its array is private): data,
            // then tags. An injected fault shifts the run read (`face_runs`).
            let (start, n) = self.face_runs(s).as_slice()[0];
            // SAFETY: the run lies inside the array's memory; see `field` for sharing.
            let src = unsafe {
                std::slice::from_raw_parts(self.arr(self.secs.data + start * elem), n * elem)
            };
            p.ep.vwrite_to(src, p.remote_base + s.remote_data, flags)
                .map_err(fail)?;
            if self.opts.checked {
                // SAFETY: as above, in the tag section.
                let src = unsafe {
                    std::slice::from_raw_parts(self.arr(self.secs.tags + start * TAG), n * TAG)
                };
                p.ep.vwrite_to(src, p.remote_base + s.remote_tags, flags)
                    .map_err(fail)?;
            }
        } else if s.direct {
            let (start, n) = s.face.as_slice()[0];
            let shift = match self.fault {
                Some((d, delta)) if d == s.dir => delta,
                _ => 0,
            };
            let dst = |base: u64, size: usize| {
                (p.remote_base + base).wrapping_add_signed(shift as i64 * size as i64)
            };
            // SAFETY: the run lies inside the data section; see `field` for sharing.
            let src = unsafe {
                std::slice::from_raw_parts(self.arr(self.secs.data + start * elem), n * elem)
            };
            p.ep.vwrite_to(src, dst(s.remote_data, elem), flags)
                .map_err(fail)?;
            if self.opts.checked {
                // SAFETY: as above, in the tag section.
                let src = unsafe {
                    std::slice::from_raw_parts(self.arr(self.secs.tags + start * TAG), n * TAG)
                };
                p.ep.vwrite_to(src, dst(s.remote_tags, TAG), flags)
                    .map_err(fail)?;
            }
        } else {
            // SAFETY: the outbox holds the packed face (`pack_faces`, or the caller's
            // packing in compute): its elements, then their tags in checked mode.
            let src = unsafe {
                std::slice::from_raw_parts(
                    self.ptr(self.secs.outbox[s.dir.index()]),
                    s.face.elems() * self.per_cell(),
                )
            };
            p.ep.vwrite_to(src, p.remote_base + s.remote_data, flags)
                .map_err(fail)?;
        }
        self.signal(i, counter, value)
    }

    /// Stores `value` at `counter` of side `i`'s neighbour's region, once every earlier
    /// write of this endpoint is there (`fence_signal`).
    fn signal(&self, i: usize, counter: u64, value: u64) -> Result<()> {
        let s = &self.sides[i];
        let p = &self.peers[s.peer.expect("a side with another rank")];
        p.ep.fence_signal(None, Some((p.remote_base + counter, value)))
            .map_err(|e| self.peer_err(s.rank, &s.dir.to_string(), e))
    }

    /// The one-way time of one face across every side, the "pair bandwidth" an exchange is
    /// judged against: each pair of neighbours ping-pongs its faces `reps` times by this
    /// exchange's path (after one round not timed), the lower side's rank timing the round
    /// trips and halving them. On the RMA path each face crosses as in a run: before each
    /// round, untimed, both ranks rewrite their faces (their lines in the sender's cache, as
    /// a sweep leaves them) and read the ghosts (or staging) the neighbour will write (in
    /// the receiver's cache, as the stencil leaves them), so every line really changes
    /// hands. Collective: every rank calls it, and pairs take turns in one global order,
    /// so no rank waits on a pair that waits on it. Overwrites the ghosts: call it before
    /// filling the grid. Returns, for the sides this rank timed, the side and the median
    /// one-way time.
    pub fn probe(&mut self, reps: usize) -> Result<Vec<(SideInfo, Duration)>> {
        Ok(self
            .probe_rounds(reps, Round::Prepared { sweep: false })?
            .one_way)
    }

    /// [`probe`](Self::probe) in the cache state a run leaves: on the RMA path both ranks
    /// rewrite their whole array, face last, before each round (untimed), as a sweep does,
    /// so the face crosses between two caches full of other dirty lines and through page
    /// translations the sweep has evicted.
    pub fn probe_after_sweep(&mut self, reps: usize) -> Result<Vec<(SideInfo, Duration)>> {
        Ok(self
            .probe_rounds(reps, Round::Prepared { sweep: true })?
            .one_way)
    }

    /// One probe round per pair in whatever state the caches are in. Called during a run,
    /// after a sweep and before the exchange, it times the faces crossing in exactly the
    /// state (and the host's placement of the ranks) of the run's own exchanges: with
    /// `both` false, one face alone, as [`probe`](Self::probe) (the pair bandwidth); with
    /// `both` true (RMA path only), both faces of each pair at once, each rank timing its
    /// own put: what the pair's memory path gives two copies at a time, which an exchange
    /// cannot beat. Nothing is prepared and no round is left untimed, and only one kind
    /// runs per call: the first round moves the lines, so a second would find them warm.
    /// The faces it writes into the neighbours are the ones the exchange writes next, and
    /// every neighbour has finished its sweep when they land (each waits in its own call
    /// first), so the run computes the same grid; the exchange that follows finds the
    /// lines moved already, and its times are not the run's. Collective, as `probe`.
    pub fn probe_in_run(&mut self, both: bool) -> Result<InRunProbe> {
        self.probe_rounds(1, if both { Round::Both } else { Round::AsLeft })
    }

    fn probe_rounds(&mut self, reps: usize, kind: Round) -> Result<InRunProbe> {
        // Counters only grow: this probe's values start above every earlier probe's
        // (probe number, then pair, then round: 8 values per round, 2^21 per pair).
        let reps = reps.clamp(1, (1 << 20) - 1);
        self.probes += 1;
        let epoch = self.probes << 48;
        if self.opts.path == Path::Messages {
            self.pack_faces(false);
        } else {
            self.pack_faces(true);
        }
        let decomp = self.decomp.clone();
        let infos = self.sides();
        let mut out = Vec::new();
        let mut both = Vec::new();
        let mut pair = 0u64;
        for r in 0..decomp.size() {
            for d in Dir::all(decomp.ndim()).filter(|d| d.up) {
                let Some(q) = decomp.neighbour(r, d).filter(|&q| q != r) else {
                    continue;
                };
                pair += 1;
                let (mine, initiator) = if self.rank == r {
                    (d, true)
                } else if self.rank == q {
                    (d.opposite(), false)
                } else {
                    continue;
                };
                let i = self
                    .sides
                    .iter()
                    .position(|s| s.dir == mine && s.rank == if initiator { q } else { r })
                    .expect("the pair's side exists");
                if kind == Round::Both {
                    if self.opts.path == Path::Rma {
                        let v = epoch | (pair << 24) | 8;
                        both.push((infos[i].clone(), self.probe_both(i, v)?));
                    }
                    continue;
                }
                let (prepare, untimed) = match kind {
                    Round::Prepared { sweep } => (Some(sweep), 1),
                    _ => (None, 0),
                };
                let mut times = Vec::with_capacity(reps);
                for rep in 0..reps + untimed {
                    let v = epoch | (pair << 24) | (8 * (rep as u64 + 1));
                    let round = if self.opts.path == Path::Rma {
                        self.probe_round(i, initiator, v, prepare)?
                    } else {
                        self.probe_messages(i, initiator)?
                    };
                    if rep >= untimed {
                        times.push(round / 2);
                    }
                }
                if initiator {
                    times.sort_unstable();
                    out.push((infos[i].clone(), times[times.len() / 2]));
                }
            }
        }
        Ok(InRunProbe { one_way: out, both })
    }

    /// Both faces of side `i`'s pair at once: each rank says it is ready (`v + 1`), waits
    /// for the other's word, puts its face (`v + 2`), and waits for the other's. Returns
    /// this rank's put time (the copy and its signal).
    fn probe_both(&mut self, i: usize, v: u64) -> Result<Duration> {
        let (counter, at) = (
            self.sides[i].remote_probe,
            self.secs.probe(self.sides[i].dir),
        );
        self.signal(i, counter, v + 1)?;
        let what = "answer the probe";
        self.wait_until(i, at, v + 1, what)?;
        let t = Instant::now();
        self.put_side(i, counter, v + 2)?;
        let put = t.elapsed();
        self.wait_until(i, at, v + 2, what)?;
        Ok(put)
    }

    /// One round of the RMA probe: both ranks prepare their caches as a run leaves them
    /// ([`Self::prepare`]), each while the other waits; then the initiator times its put
    /// of its face and signal, the responder's put and signal back. Counter values
    /// `v + 1 ..= v + 4`, so rounds (`v` steps of 8) never satisfy each other's waits.
    fn probe_round(
        &mut self,
        i: usize,
        initiator: bool,
        v: u64,
        prepare: Option<bool>,
    ) -> Result<Duration> {
        let (counter, at) = (
            self.sides[i].remote_probe,
            self.secs.probe(self.sides[i].dir),
        );
        let what = "answer the probe";
        if initiator {
            if let Some(sweep) = prepare {
                self.prepare(i, sweep);
            }
            self.signal(i, counter, v + 1)?;
            self.wait_until(i, at, v + 2, what)?;
            let t = Instant::now();
            self.put_side(i, counter, v + 3)?;
            self.wait_until(i, at, v + 4, what)?;
            Ok(t.elapsed())
        } else {
            self.wait_until(i, at, v + 1, what)?;
            if let Some(sweep) = prepare {
                self.prepare(i, sweep);
            }
            self.signal(i, counter, v + 2)?;
            self.wait_until(i, at, v + 3, what)?;
            self.put_side(i, counter, v + 4)?;
            Ok(Duration::ZERO)
        }
    }

    /// Puts side `i` in the state a sweep leaves it: its face rewritten with its own values
    /// (a strided face packed), so its lines are modified in this core's cache, and the
    /// ghosts (or staging) the neighbour writes read, so their lines are in this core's
    /// cache too; with `sweep`, the whole array rewritten first.
    fn prepare(&mut self, i: usize, sweep: bool) {
        let elem = self.elem();
        if sweep {
            self.touch(self.arr(self.secs.data), self.layout.elems() * elem, true);
        }
        let s = &self.sides[i];
        if s.contiguous {
            let (face, n) = s.face.as_slice()[0];
            self.touch(self.arr(self.secs.data + face * elem), n * elem, true);
        } else {
            self.pack_side(i);
        }
        let s = &self.sides[i];
        if s.staged_in {
            let at = self.ptr(self.secs.staging[s.dir.index()]);
            self.touch(at, s.ghosts.elems() * self.per_cell(), false);
        } else {
            let (ghost, n) = s.ghosts.as_slice()[0];
            self.touch(self.arr(self.secs.data + ghost * elem), n * elem, false);
        }
    }

    /// Reads (`write`: rewrites with its own value) one byte of every cache line of `len`
    /// bytes from `at`, in this rank's array or region.
    fn touch(&self, at: *mut u8, len: usize, write: bool) {
        for line in (0..len).step_by(64) {
            // SAFETY: the caller's range lies inside the array or the region.
            let p = unsafe { at.add(line) };
            // SAFETY: during the probe's preparation the neighbour waits for a signal, so
            // nothing else reads or writes this rank's memory, and a write stores the value
            // just read.
            unsafe {
                let v = std::ptr::read_volatile(p);
                if write {
                    std::ptr::write_volatile(p, v);
                }
            }
        }
    }

    /// One round of the messages path's probe: the packed face sent, the neighbour's
    /// received, in the pair's order.
    fn probe_messages(&mut self, i: usize, initiator: bool) -> Result<Duration> {
        let t = Instant::now();
        if initiator {
            self.probe_send(i)?;
            self.probe_recv(i)?;
        } else {
            self.probe_recv(i)?;
            self.probe_send(i)?;
        }
        Ok(t.elapsed())
    }

    fn probe_send(&self, i: usize) -> Result<()> {
        let s = &self.sides[i];
        let p = &self.peers[s.peer.expect("a side with another rank")];
        p.ep.send(&s.send_buf)
            .map_err(|e| self.peer_err(s.rank, &s.dir.to_string(), e))
    }

    fn probe_recv(&mut self, i: usize) -> Result<()> {
        let s = &self.sides[i];
        let p = &self.peers[s.peer.expect("a side with another rank")];
        let mut buf = std::mem::take(&mut self.scratch);
        let r = p.ep.recv_timeout(&mut buf, Some(self.opts.timeout));
        self.scratch = buf;
        r.map(|_| ())
            .map_err(|e| self.peer_err(s.rank, &s.dir.to_string(), e))
    }

    pub(super) fn unpack_staging(&mut self, i: usize) {
        let elem = self.elem();
        let s = &self.sides[i];
        let n = s.ghosts.elems();
        let staging = self.secs.staging[s.dir.index()];
        // SAFETY: the staging area of side `dir` holds `n` elements then `n` tags, filled
        // by the neighbour before it signalled; the ghost runs lie inside the sections.
        unsafe {
            let src = std::slice::from_raw_parts(self.ptr(staging), n * elem);
            unpack(self.arr(self.secs.data), &s.ghosts, elem, src);
            if self.opts.checked {
                let src = std::slice::from_raw_parts(self.ptr(staging + n * elem), n * TAG);
                unpack(self.arr(self.secs.tags), &s.ghosts, TAG, src);
            }
        }
    }
}
