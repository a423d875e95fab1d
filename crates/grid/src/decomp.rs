//! Cartesian decomposition of a 2D or 3D grid over ranks.
//!
//! Grids are stored row-major, the last axis contiguous: a 2D grid `NYxNX` is `NY` rows of
//! `NX` elements, a 3D grid `NZxNYxNX` is `NZ` planes. Internally every grid is 3D; a 2D grid
//! has one plane (`NZ = 1`) that is never split and has no halo, so one code path serves
//! both.
//!
//! Ranks are laid out row-major over the process grid `dims` (as `MPI_Cart_create` does
//! with `reorder = false`): rank `r` sits at coordinates `(r / (dy·dx), r / dx % dy, r % dx)`.
//! An axis of `n` cells split over `d` ranks gives the first `n % d` ranks one cell more,
//! so splits may be uneven.

use std::fmt;

use crate::error::{GridError, Result};

/// A side of a subgrid: an axis (0 = z, 1 = y, 2 = x, the contiguous one) and a sign.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dir {
    /// The axis, 0 (slowest) to 2 (contiguous).
    pub axis: usize,
    /// `true` for the side of higher coordinates.
    pub up: bool,
}

impl Dir {
    /// The side facing this one across a boundary.
    pub fn opposite(self) -> Dir {
        Dir {
            axis: self.axis,
            up: !self.up,
        }
    }

    /// A dense index, `0..6`, for tables indexed by side.
    pub fn index(self) -> usize {
        self.axis * 2 + usize::from(self.up)
    }

    /// Every side of a grid with `ndim` axes, in a fixed order (slow axis first, low side
    /// first): the order every rank sends in.
    pub fn all(ndim: usize) -> impl Iterator<Item = Dir> {
        (3 - ndim..3).flat_map(|axis| [false, true].map(|up| Dir { axis, up }))
    }
}

impl fmt::Display for Dir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.up { '+' } else { '-' };
        write!(f, "{sign}{}", ["z", "y", "x"][self.axis])
    }
}

/// A grid decomposed over `size` ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decomposition {
    ndim: usize,
    shape: [usize; 3],
    dims: [usize; 3],
    periodic: [bool; 3],
    halo: usize,
}

impl Decomposition {
    /// Decomposes a grid of `shape` (2 or 3 extents, the last contiguous) over `size`
    /// ranks with ghost layers `halo` cells thick. `dims` gives the number of ranks along
    /// each axis (`None`: chosen by [`auto_dims`]); `periodic` says which axes wrap
    /// (empty: none).
    ///
    /// Errors name the grid and the cause: dims that do not multiply to `size`, a rank's
    /// share of an axis thinner than the halo, a halo of 0.
    pub fn new(
        shape: &[usize],
        size: usize,
        dims: Option<&[usize]>,
        periodic: &[bool],
        halo: usize,
    ) -> Result<Decomposition> {
        let grid = shape_name(shape);
        let fail = |reason: String| GridError::Decomposition {
            grid: grid.clone(),
            reason,
        };
        if !(2..=3).contains(&shape.len()) {
            return Err(fail(format!("a grid has 2 or 3 axes, not {}", shape.len())));
        }
        if shape.contains(&0) {
            return Err(fail("an axis of 0 cells".into()));
        }
        if size == 0 {
            return Err(fail("no ranks".into()));
        }
        if halo == 0 {
            return Err(fail("the halo must be at least 1 cell thick".into()));
        }
        let ndim = shape.len();
        let shape3 = pad(shape, 1);
        let dims3 = match dims {
            None => auto_dims(&shape3[3 - ndim..], size),
            Some(d) => {
                if d.len() != ndim {
                    return Err(fail(format!(
                        "dims {} have {} axes, the grid has {ndim}",
                        shape_name(d),
                        d.len()
                    )));
                }
                let product: usize = d.iter().product();
                if product != size {
                    return Err(fail(format!(
                        "dims {} make {product} ranks, the world has {size}",
                        shape_name(d)
                    )));
                }
                pad(d, 1)
            }
        };
        if !periodic.is_empty() && periodic.len() != ndim {
            return Err(fail(format!(
                "{} periodicity flags for {ndim} axes",
                periodic.len()
            )));
        }
        let mut periodic3 = [false; 3];
        for (i, &p) in periodic.iter().enumerate() {
            periodic3[3 - ndim + i] = p;
        }
        for axis in (3 - ndim..3).filter(|&a| halo_on(ndim, &dims3, &periodic3, halo, a) > 0) {
            let thinnest = shape3[axis] / dims3[axis];
            if thinnest < halo {
                return Err(fail(format!(
                    "axis {} of {} cells over {} ranks gives a rank {thinnest} cells, fewer \
                     than the halo of {halo} (the grid must be at least ranks x halo along \
                     every axis)",
                    ["z", "y", "x"][axis],
                    shape3[axis],
                    dims3[axis]
                )));
            }
        }
        Ok(Decomposition {
            ndim,
            shape: shape3,
            dims: dims3,
            periodic: periodic3,
            halo,
        })
    }

    /// 2 or 3.
    pub fn ndim(&self) -> usize {
        self.ndim
    }

    /// The global grid, 3 extents (`[1, NY, NX]` for a 2D grid).
    pub fn shape(&self) -> [usize; 3] {
        self.shape
    }

    /// Ranks along each axis, 3 extents.
    pub fn dims(&self) -> [usize; 3] {
        self.dims
    }

    /// Which axes wrap around.
    pub fn periodic(&self) -> [bool; 3] {
        self.periodic
    }

    /// Ghost layer thickness on every split-able axis.
    pub fn halo(&self) -> usize {
        self.halo
    }

    /// Ghost layer thickness on `axis`: the halo where the axis has neighbours (it is
    /// split, or it wraps), 0 elsewhere (the unused axis of a 2D grid, an axis one rank
    /// holds whole with fixed borders). Leaving ghosts off such axes keeps the faces of the
    /// split axes contiguous: a 2D grid split by rows, or a 3D grid split by planes, moves
    /// each face as one run.
    pub fn halo_on(&self, axis: usize) -> usize {
        halo_on(self.ndim, &self.dims, &self.periodic, self.halo, axis)
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.dims.iter().product()
    }

    /// The grid in the `NZxNYxNX` (or `NYxNX`) notation.
    pub fn grid_name(&self) -> String {
        shape_name(&self.shape[3 - self.ndim..])
    }

    /// The process-grid coordinates of `rank`.
    pub fn coords(&self, rank: usize) -> [usize; 3] {
        let [_, dy, dx] = self.dims;
        [rank / (dy * dx), rank / dx % dy, rank % dx]
    }

    /// The rank at process-grid coordinates `c`.
    pub fn rank_at(&self, c: [usize; 3]) -> usize {
        (c[0] * self.dims[1] + c[1]) * self.dims[2] + c[2]
    }

    /// The rank across side `dir` of `rank`'s subgrid, or `None` at a border of a
    /// non-periodic axis. On a periodic axis with one rank it is `rank` itself.
    pub fn neighbour(&self, rank: usize, dir: Dir) -> Option<usize> {
        let mut c = self.coords(rank);
        let (d, a) = (self.dims[dir.axis], dir.axis);
        if dir.up {
            if c[a] + 1 == d {
                if !self.periodic[a] {
                    return None;
                }
                c[a] = 0;
            } else {
                c[a] += 1;
            }
        } else if c[a] == 0 {
            if !self.periodic[a] {
                return None;
            }
            c[a] = d - 1;
        } else {
            c[a] -= 1;
        }
        Some(self.rank_at(c))
    }

    /// The cells `rank` owns: the global index of its first cell and its extent, per axis.
    pub fn block(&self, rank: usize) -> Block {
        let c = self.coords(rank);
        let mut start = [0; 3];
        let mut len = [0; 3];
        for a in 0..3 {
            let (n, d) = (self.shape[a], self.dims[a]);
            let (base, extra) = (n / d, n % d);
            start[a] = c[a] * base + c[a].min(extra);
            len[a] = base + usize::from(c[a] < extra);
        }
        Block { start, len }
    }

    /// Global coordinates of a cell in the notation of errors: `(y, x)` in 2D, `(z, y, x)`.
    pub fn cell_name(&self, g: [usize; 3]) -> String {
        let parts: Vec<String> = g[3 - self.ndim..].iter().map(|v| v.to_string()).collect();
        format!("({})", parts.join(", "))
    }
}

/// The cells one rank owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Global index of the first owned cell, per axis.
    pub start: [usize; 3],
    /// Owned cells per axis.
    pub len: [usize; 3],
}

impl Block {
    /// Number of owned cells.
    pub fn cells(&self) -> usize {
        self.len.iter().product()
    }
}

/// Ranks per axis for `size` ranks over a grid of `shape` (2 or 3 extents): the
/// factorization whose faces move the fewest halo cells, ties going to splitting the slower
/// axes (their faces are contiguous in memory; section 6.3 of the seed: a face of one
/// element per cache line copied 16x slower). Returned padded to 3 axes.
pub fn auto_dims(shape: &[usize], size: usize) -> [usize; 3] {
    let ndim = shape.len();
    let mut best: Option<(u128, [usize; 3])> = None;
    for_each_factorization(size, ndim, &mut |f| {
        let dims = pad(f, 1);
        let shape3 = pad(shape, 1);
        if (0..3).any(|a| dims[a] > shape3[a]) {
            return;
        }
        // Halo cells moved per step: for each split axis, (d - 1) cuts of the other axes'
        // full extent, both ways.
        let surface: u128 = (0..3)
            .map(|a| {
                let cross: usize = (0..3).filter(|&b| b != a).map(|b| shape3[b]).product();
                (dims[a] as u128 - 1) * cross as u128
            })
            .sum();
        // Ties: prefer the larger dims on slower axes, compared lexicographically.
        let better = match &best {
            None => true,
            Some((s, d)) => surface < *s || (surface == *s && dims > *d),
        };
        if better {
            best = Some((surface, dims));
        }
    });
    best.map(|(_, d)| d).unwrap_or_else(|| {
        // More ranks than cells on some axis in every factorization: all along the longest.
        let mut d = [1; 3];
        d[2] = size;
        d
    })
}

fn for_each_factorization(n: usize, parts: usize, f: &mut dyn FnMut(&[usize])) {
    fn go(n: usize, parts: usize, acc: &mut Vec<usize>, f: &mut dyn FnMut(&[usize])) {
        if parts == 1 {
            acc.push(n);
            f(acc);
            acc.pop();
            return;
        }
        for d in (1..=n).filter(|d| n.is_multiple_of(*d)) {
            acc.push(d);
            go(n / d, parts - 1, acc, f);
            acc.pop();
        }
    }
    go(n, parts, &mut Vec::new(), f);
}

fn halo_on(
    ndim: usize,
    dims: &[usize; 3],
    periodic: &[bool; 3],
    halo: usize,
    axis: usize,
) -> usize {
    if axis >= 3 - ndim && (dims[axis] > 1 || periodic[axis]) {
        halo
    } else {
        0
    }
}

fn pad(v: &[usize], fill: usize) -> [usize; 3] {
    let mut out = [fill; 3];
    out[3 - v.len()..].copy_from_slice(v);
    out
}

/// `[4096, 4096]` as `4096x4096`.
pub fn shape_name(shape: &[usize]) -> String {
    let parts: Vec<String> = shape.iter().map(|v| v.to_string()).collect();
    parts.join("x")
}

/// Parses `NYxNX` or `NZxNYxNX` (also `N^2`/`N^3` as `NxN`, `NxNxN` spelled out).
pub fn parse_shape(s: &str) -> std::result::Result<Vec<usize>, String> {
    let parts: std::result::Result<Vec<usize>, _> = s
        .split(['x', 'X'])
        .map(|p| p.trim().parse::<usize>())
        .collect();
    match parts {
        Ok(v) if (2..=3).contains(&v.len()) && !v.contains(&0) => Ok(v),
        _ => Err(format!(
            "{s:?} is not a grid: write NYxNX or NZxNYxNX with positive extents, e.g. 4096x4096"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_tile_the_grid_with_uneven_splits() {
        let d = Decomposition::new(&[10, 7], 6, Some(&[3, 2]), &[], 1).unwrap();
        let mut owned = vec![0u8; 70];
        for r in 0..6 {
            let b = d.block(r);
            for y in b.start[1]..b.start[1] + b.len[1] {
                for x in b.start[2]..b.start[2] + b.len[2] {
                    owned[y * 7 + x] += 1;
                }
            }
        }
        assert!(owned.iter().all(|&c| c == 1), "{owned:?}");
        assert_eq!(d.block(0).len, [1, 4, 4]);
        assert_eq!(d.block(5).start, [0, 7, 4]);
        assert_eq!(d.block(5).len, [1, 3, 3]);
    }

    #[test]
    fn neighbours_wrap_only_on_periodic_axes() {
        let d = Decomposition::new(&[8, 8], 4, Some(&[2, 2]), &[false, true], 1).unwrap();
        let up_y = Dir { axis: 1, up: true };
        let up_x = Dir { axis: 2, up: true };
        assert_eq!(d.neighbour(0, up_y), Some(2));
        assert_eq!(d.neighbour(2, up_y), None);
        assert_eq!(d.neighbour(1, up_x), Some(0));
        assert_eq!(d.neighbour(0, up_x.opposite()), Some(1));
    }

    #[test]
    fn auto_dims_minimize_the_surface_and_prefer_contiguous_faces() {
        assert_eq!(auto_dims(&[4096, 4096], 2), [1, 2, 1]);
        assert_eq!(auto_dims(&[4096, 4096], 4), [1, 2, 2]);
        assert_eq!(auto_dims(&[64, 64, 64], 8), [2, 2, 2]);
        assert_eq!(auto_dims(&[1000, 10], 4), [1, 4, 1]);
        assert_eq!(auto_dims(&[64, 64, 64], 3), [3, 1, 1]);
    }

    #[test]
    fn bad_decompositions_name_the_cause() {
        let e = Decomposition::new(&[8, 8], 4, Some(&[3, 1]), &[], 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "grid 8x8: dims 3x1 make 3 ranks, the world has 4"
        );
        let e = Decomposition::new(&[8, 3], 4, Some(&[1, 4]), &[], 1).unwrap_err();
        assert!(e.to_string().contains("fewer than the halo of 1"), "{e}");
        let e = Decomposition::new(&[8, 8], 2, Some(&[2, 1]), &[], 5).unwrap_err();
        assert!(
            e.to_string().contains("axis y of 8 cells over 2 ranks"),
            "{e}"
        );
    }

    #[test]
    fn shapes_parse_and_print() {
        assert_eq!(parse_shape("4096x4096").unwrap(), vec![4096, 4096]);
        assert_eq!(parse_shape("8x9x10").unwrap(), vec![8, 9, 10]);
        assert!(parse_shape("4096").is_err());
        assert!(parse_shape("0x5").is_err());
        assert_eq!(shape_name(&[8, 9, 10]), "8x9x10");
    }
}
