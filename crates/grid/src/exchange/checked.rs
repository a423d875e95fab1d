//! Checked mode (seed 001, section 6.2): every cell's [`Tag`] — its owner and its global
//! coordinates — stamped once, ghost tags cleared before each exchange and verified after.

use bytemuck::{Pod, Zeroable};

use super::HaloExchange;
use crate::error::{GridError, Result};
use crate::layout::Layout;

/// The metadata a cell carries in checked mode: who owns it and where it belongs.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct Tag {
    /// The owning rank (`u32::MAX`: no one wrote this ghost).
    pub rank: u32,
    /// Global coordinates `(z, y, x)` (z = 0 in 2D).
    pub coord: [u32; 3],
}

impl Tag {
    /// A ghost no exchange has filled.
    pub const EMPTY: Tag = Tag {
        rank: u32::MAX,
        coord: [u32::MAX; 3],
    };
}

pub(super) const TAG: usize = std::mem::size_of::<Tag>();

impl<T: Pod> HaloExchange<T> {
    pub(super) fn stamp_tags(&mut self) {
        let (rank, layout, decomp) = (self.rank as u32, self.layout.clone(), self.decomp.clone());
        // SAFETY: the tag section exists in checked mode; see `field`.
        let tags: &mut [Tag] = unsafe {
            std::slice::from_raw_parts_mut(self.arr(self.secs.tags).cast(), layout.elems())
        };
        tags.fill(Tag::EMPTY);
        let lo = layout.halo;
        let hi = [0, 1, 2].map(|a| layout.halo[a] + layout.block.len[a]);
        Layout::for_each_cell(lo, hi, |c| {
            let g = layout
                .global_of(&decomp, c)
                .expect("owned cells are inside the grid");
            tags[layout.index(c)] = Tag {
                rank,
                coord: g.map(|v| v as u32),
            };
        });
    }

    pub(super) fn clear_ghost_tags(&mut self) {
        // SAFETY: the tag section exists in checked mode; no neighbour writes before this
        // rank's ready signal, which follows.
        let tags: &mut [Tag] = unsafe {
            std::slice::from_raw_parts_mut(self.arr(self.secs.tags).cast(), self.layout.elems())
        };
        for s in &self.sides {
            for &(start, n) in s.ghosts.as_slice() {
                tags[start..start + n].fill(Tag::EMPTY);
            }
        }
    }

    pub(super) fn verify(&self) -> Result<()> {
        let tags = self.tags().expect("checked mode has tags");
        for s in &self.sides {
            let (lo, hi) = self.layout.slab(s.dir, true);
            let mut bad = None;
            Layout::for_each_cell(lo, hi, |c| {
                if bad.is_some() {
                    return;
                }
                let g = self
                    .layout
                    .global_of(&self.decomp, c)
                    .expect("a side with a neighbour has ghosts inside the grid");
                let want = Tag {
                    rank: s.rank as u32,
                    coord: g.map(|v| v as u32),
                };
                let got = tags[self.layout.index(c)];
                if got != want {
                    bad = Some((g, got));
                }
            });
            if let Some((g, got)) = bad {
                let found_at = if got == Tag::EMPTY {
                    "nothing (no one wrote it)".to_string()
                } else {
                    self.decomp.cell_name(got.coord.map(|v| v as usize))
                };
                return Err(GridError::Misplaced {
                    rank: self.rank,
                    dir: s.dir,
                    expected_rank: s.rank,
                    expected_at: self.decomp.cell_name(g),
                    found_rank: got.rank,
                    found_at,
                });
            }
        }
        Ok(())
    }
}
