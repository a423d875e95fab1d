//! One rank's subgrid in memory: its owned block with ghost layers around it, and the faces
//! a halo exchange moves, as runs of contiguous elements.
//!
//! The local array is the owned block plus `halo` ghost cells on both sides of every axis
//! that can be split (the unused axis of a 2D grid has none), row-major, last axis
//! contiguous. A face (the owned cells next to a side, sent to the neighbour there) and a
//! ghost slab (the cells on a side, filled from the neighbour) span only the owned extent of
//! the other axes: a 5- or 7-point stencil never reads corners.
//!
//! Faces normal to the slowest split axis are one contiguous run when the halo is 1 in 2D;
//! faces normal to the contiguous axis are one element per row (the seed's section 6.3 case:
//! one float per cache line). [`Runs`] records which, and the exchange picks direct
//! transfers or packing from it.

use crate::decomp::{Block, Decomposition, Dir};

/// Where a rank's cells sit in its local array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The owned block (global position and extent).
    pub block: Block,
    /// Ghost layer thickness per axis.
    pub halo: [usize; 3],
    /// Allocated extent per axis: owned + 2 × halo.
    pub alloc: [usize; 3],
}

/// A set of elements of the local array as (first element, count) runs, in row-major order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Runs {
    runs: Vec<(usize, usize)>,
    elems: usize,
}

impl Runs {
    /// The runs, in row-major order of the box they cover.
    pub fn as_slice(&self) -> &[(usize, usize)] {
        &self.runs
    }

    /// Number of elements.
    pub fn elems(&self) -> usize {
        self.elems
    }

    /// One run: the elements are contiguous in memory.
    pub fn is_contiguous(&self) -> bool {
        self.runs.len() == 1
    }

    /// The same runs moved by `delta` elements (fault injection for checked-mode tests).
    pub(crate) fn shifted(&self, delta: isize) -> Runs {
        Runs {
            runs: self
                .runs
                .iter()
                .map(|&(s, n)| (s.wrapping_add_signed(delta), n))
                .collect(),
            elems: self.elems,
        }
    }
}

impl Layout {
    /// The layout of `rank`'s subgrid.
    pub fn of(decomp: &Decomposition, rank: usize) -> Layout {
        let block = decomp.block(rank);
        let halo = [0, 1, 2].map(|a| decomp.halo_on(a));
        let alloc = [0, 1, 2].map(|a| block.len[a] + 2 * halo[a]);
        Layout { block, halo, alloc }
    }

    /// Elements in the local array, ghosts included.
    pub fn elems(&self) -> usize {
        self.alloc.iter().product()
    }

    /// Index of local cell `(z, y, x)` (allocated coordinates, ghosts at 0..halo).
    pub fn index(&self, c: [usize; 3]) -> usize {
        (c[0] * self.alloc[1] + c[1]) * self.alloc[2] + c[2]
    }

    /// Allocated coordinates of the owned cell at global coordinates `g`.
    pub fn local_of(&self, g: [usize; 3]) -> [usize; 3] {
        [0, 1, 2].map(|a| g[a] + self.halo[a] - self.block.start[a])
    }

    /// The owned cells next to side `dir`, `halo` thick: what the neighbour there receives.
    pub fn face(&self, dir: Dir) -> Runs {
        let (lo, hi) = self.slab(dir, false);
        self.runs(lo, hi)
    }

    /// The ghost cells on side `dir`, `halo` thick: what the neighbour there sends.
    pub fn ghosts(&self, dir: Dir) -> Runs {
        let (lo, hi) = self.slab(dir, true);
        self.runs(lo, hi)
    }

    /// The allocated coordinates of the box of the face (`ghost = false`) or ghost slab on
    /// side `dir`.
    pub fn slab(&self, dir: Dir, ghost: bool) -> ([usize; 3], [usize; 3]) {
        let mut lo = [0; 3];
        let mut hi = [0; 3];
        for a in 0..3 {
            lo[a] = self.halo[a];
            hi[a] = self.halo[a] + self.block.len[a];
        }
        let (a, h, n) = (dir.axis, self.halo[dir.axis], self.block.len[dir.axis]);
        (lo[a], hi[a]) = match (dir.up, ghost) {
            (false, false) => (h, 2 * h),
            (true, false) => (n, n + h),
            (false, true) => (0, h),
            (true, true) => (n + h, n + 2 * h),
        };
        (lo, hi)
    }

    /// The global coordinates of the cell at allocated coordinates `c`, wrapped on periodic
    /// axes; `None` for a ghost beyond a non-periodic border.
    pub fn global_of(&self, decomp: &Decomposition, c: [usize; 3]) -> Option<[usize; 3]> {
        let shape = decomp.shape();
        let periodic = decomp.periodic();
        let mut g = [0; 3];
        for a in 0..3 {
            let v = (self.block.start[a] + c[a]) as isize - self.halo[a] as isize;
            g[a] = if (0..shape[a] as isize).contains(&v) {
                v as usize
            } else if periodic[a] {
                v.rem_euclid(shape[a] as isize) as usize
            } else {
                return None;
            };
        }
        Some(g)
    }

    /// Calls `f` with the allocated coordinates of every cell of the box, row-major.
    pub fn for_each_cell(lo: [usize; 3], hi: [usize; 3], mut f: impl FnMut([usize; 3])) {
        for z in lo[0]..hi[0] {
            for y in lo[1]..hi[1] {
                for x in lo[2]..hi[2] {
                    f([z, y, x]);
                }
            }
        }
    }

    fn runs(&self, lo: [usize; 3], hi: [usize; 3]) -> Runs {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        let width = hi[2] - lo[2];
        for z in lo[0]..hi[0] {
            for y in lo[1]..hi[1] {
                let start = self.index([z, y, lo[2]]);
                match runs.last_mut() {
                    Some((s, n)) if *s + *n == start => *n += width,
                    _ => runs.push((start, width)),
                }
            }
        }
        let elems = runs.iter().map(|r| r.1).sum();
        Runs { runs, elems }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(axis: usize, up: bool) -> Dir {
        Dir { axis, up }
    }

    #[test]
    fn faces_of_a_2d_split_by_rows_are_contiguous_and_by_columns_strided() {
        // Split by rows only: no ghost columns, so a face is whole rows, one run.
        let d = Decomposition::new(&[8, 6], 2, Some(&[2, 1]), &[], 2).unwrap();
        let l = Layout::of(&d, 0);
        assert_eq!(l.alloc, [1, 8, 6]);
        let f = l.face(dir(1, true));
        assert!(f.is_contiguous());
        assert_eq!(f.as_slice(), &[(l.index([0, 4, 0]), 12)]);
        let g = l.ghosts(dir(1, true));
        assert_eq!(g.as_slice(), &[(l.index([0, 6, 0]), 12)]);
        // Split both ways: a face normal to x is one element per row.
        let d = Decomposition::new(&[8, 6], 4, Some(&[2, 2]), &[], 1).unwrap();
        let l = Layout::of(&d, 0);
        assert_eq!(l.alloc, [1, 6, 5]);
        let side = l.face(dir(2, true));
        assert_eq!(side.as_slice().len(), 4);
        assert!(side.as_slice().iter().all(|r| r.1 == 1));
        assert!(l.face(dir(1, true)).is_contiguous());
    }

    #[test]
    fn a_face_matches_the_neighbours_ghosts_in_size_and_order() {
        let d = Decomposition::new(&[7, 9, 11], 8, Some(&[2, 2, 2]), &[true; 3], 2).unwrap();
        for r in 0..8 {
            let l = Layout::of(&d, r);
            for dir in Dir::all(3) {
                let peer = d.neighbour(r, dir).unwrap();
                let pl = Layout::of(&d, peer);
                let (face, ghosts) = (l.face(dir), pl.ghosts(dir.opposite()));
                assert_eq!(face.elems(), ghosts.elems(), "rank {r} {dir}");
                // The cells carry the same global coordinates, in the same order.
                let (flo, fhi) = l.slab(dir, false);
                let (glo, ghi) = pl.slab(dir.opposite(), true);
                let mut a = Vec::new();
                Layout::for_each_cell(flo, fhi, |c| a.push(l.global_of(&d, c).unwrap()));
                let mut b = Vec::new();
                Layout::for_each_cell(glo, ghi, |c| b.push(pl.global_of(&d, c).unwrap()));
                assert_eq!(a, b, "rank {r} side {dir}");
            }
        }
    }
}
