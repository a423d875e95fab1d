//! Where the parts of a rank's memory lie: its array and its tags (checked mode), then in
//! the region its neighbours write into, a staging area and an outbox per side that needs
//! them, and a page of counters. The array is the region's first part when it is shared
//! memory, memory of its own when private ([`ArrayMemory`](super::ArrayMemory)).

use accio_core::PAGE;

use super::TAG;
use crate::decomp::Dir;
use crate::layout::Layout;

/// Byte offsets of the parts of a rank's memory. Every rank computes its neighbours' from
/// their layouts and whether their arrays are private, so no offsets but the window's base
/// travel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Sections {
    /// In the array's memory: its elements and their tags.
    pub(super) data: usize,
    pub(super) tags: usize,
    /// Bytes of the array's memory (elements and tags).
    pub(super) array_len: usize,
    /// The array lives in memory of its own, not at the start of the region.
    pub(super) private: bool,
    /// In the region: where a neighbour writes the face that fills the ghosts of a side
    /// that are not one run, or all of them when the array is private.
    pub(super) staging: [usize; 6],
    /// Where a strided face is packed (data, then tags in checked mode), to be written into
    /// the neighbour's staging area from, in the region the endpoints registered.
    pub(super) outbox: [usize; 6],
    pub(super) flags: usize,
    /// Bytes of the region (the array included when it is not private).
    pub(super) len: usize,
}

impl Sections {
    pub(super) fn of(
        layout: &Layout,
        ndim: usize,
        elem: usize,
        checked: bool,
        private: bool,
    ) -> Sections {
        let round = |x: usize| x.div_ceil(PAGE) * PAGE;
        let per_cell = elem + if checked { TAG } else { 0 };
        let data = 0;
        let tags = round(layout.elems() * elem);
        let array_len = tags
            + if checked {
                round(layout.elems() * TAG)
            } else {
                0
            };
        let mut at = if private { 0 } else { array_len };
        let mut staging = [0; 6];
        let mut outbox = [0; 6];
        for d in Dir::all(ndim) {
            staging[d.index()] = at;
            let g = layout.ghosts(d);
            if layout.halo[d.axis] > 0 && (private || !g.is_contiguous()) {
                at += round(g.elems() * per_cell);
            }
        }
        for d in Dir::all(ndim) {
            outbox[d.index()] = at;
            let f = layout.face(d);
            if layout.halo[d.axis] > 0 && !f.is_contiguous() {
                at += round(f.elems() * per_cell);
            }
        }
        let flags = at;
        Sections {
            data,
            tags,
            array_len,
            private,
            staging,
            outbox,
            flags,
            len: at + PAGE,
        }
    }

    /// The "ghosts on side `d` are free" counter.
    pub(super) fn ready(&self, d: Dir) -> usize {
        self.flags + 64 * d.index()
    }

    /// The "ghosts on side `d` are filled" counter.
    pub(super) fn filled(&self, d: Dir) -> usize {
        self.flags + 64 * (6 + d.index())
    }

    /// The counter of [`HaloExchange::probe`]'s ping-pongs across side `d`: one per side,
    /// so that a neighbour already probing a later pair cannot satisfy a wait of an earlier
    /// one.
    pub(super) fn probe(&self, d: Dir) -> usize {
        self.flags + 64 * (12 + d.index())
    }
}
