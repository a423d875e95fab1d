//! The grid communicator end to end: ranks as threads, each with its own endpoints over a
//! real backend (shm or tcp), exchanging halos of a Jacobi run; every decomposition's final
//! grid equals the 1-rank grid bit for bit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use accio::Endpoint;
use accio_grid::laplace::{self, LaplaceOptions};
use accio_grid::{
    ArrayMemory, Decomposition, Dir, ExchangeOptions, GridError, HaloExchange, Layout, Path,
};

/// Connected endpoints between every pair of `n` ranks: `mesh[i][j]` is rank i's end to j.
#[allow(clippy::needless_range_loop)] // fills both halves of a symmetric matrix
fn mesh(n: usize, scheme: &str) -> Vec<Vec<Option<Box<dyn Endpoint>>>> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut m: Vec<Vec<Option<Box<dyn Endpoint>>>> =
        (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
    for i in 0..n {
        for j in i + 1..n {
            let addr = match scheme {
                "shm" => format!(
                    "shm://grid-test-{}-{}",
                    std::process::id(),
                    NEXT.fetch_add(1, Ordering::Relaxed)
                ),
                _ => "tcp://127.0.0.1:0".to_string(),
            };
            let listener = accio::listen(&addr).unwrap();
            let bound = listener.local_addr().to_string();
            let t = std::thread::spawn(move || listener.accept(Some(Duration::from_secs(10))));
            let a = accio::connect(&bound, Duration::from_secs(10)).unwrap();
            let b = t.join().unwrap().unwrap();
            m[i][j] = Some(a);
            m[j][i] = Some(b);
        }
    }
    m
}

/// Runs `f` on every rank of `decomp` as a thread with its own exchange.
fn on_ranks<R: Send + 'static>(
    decomp: &Decomposition,
    scheme: &str,
    opts: ExchangeOptions,
    f: impl Fn(HaloExchange<f64>) -> R + Send + Sync + Clone + 'static,
) -> Vec<Result<R, GridError>> {
    on_ranks_in(decomp, scheme, opts, Memories::All(ArrayMemory::Auto), f)
}

/// Where the ranks' arrays live in a test: all alike, or private on the even ranks and
/// shared on the odd ones.
#[derive(Clone, Copy, Debug)]
enum Memories {
    All(ArrayMemory),
    Mixed,
}

/// The settings every test that moves data runs with (`Auto` is shared for test-sized
/// arrays).
const MEMORIES: [Memories; 3] = [
    Memories::All(ArrayMemory::Shared),
    Memories::All(ArrayMemory::Private),
    Memories::Mixed,
];

/// [`on_ranks`] with each rank's array where `memories` puts it.
fn on_ranks_in<R: Send + 'static>(
    decomp: &Decomposition,
    scheme: &str,
    opts: ExchangeOptions,
    memories: Memories,
    f: impl Fn(HaloExchange<f64>) -> R + Send + Sync + Clone + 'static,
) -> Vec<Result<R, GridError>> {
    let n = decomp.size();
    let mut m = mesh(n, scheme);
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let mut row: Vec<Option<Box<dyn Endpoint>>> = std::mem::take(&mut m[r]);
            let (decomp, mut opts, f) = (decomp.clone(), opts.clone(), f.clone());
            opts.array = match memories {
                Memories::All(a) => a,
                Memories::Mixed if r % 2 == 0 => ArrayMemory::Private,
                Memories::Mixed => ArrayMemory::Shared,
            };
            std::thread::spawn(move || {
                let ex = HaloExchange::<f64>::new(&decomp, r, opts, &mut |p| {
                    Ok(row[p].take().expect("each peer is connected once"))
                })?;
                Ok(f(ex))
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// The final global grid of a Jacobi run, assembled from the ranks' owned cells: the
/// same bits with the arrays in every memory of [`MEMORIES`].
fn jacobi(
    shape: &[usize],
    dims: Option<&[usize]>,
    periodic: &[bool],
    scheme: &str,
    path: Path,
    checked: bool,
) -> Vec<f64> {
    let grids: Vec<_> = MEMORIES
        .iter()
        .map(|&m| jacobi_in(shape, dims, periodic, scheme, path, checked, m))
        .collect();
    for (g, m) in grids.iter().zip(MEMORIES).skip(1) {
        assert_same_bits(g, &grids[0], &format!("{shape:?} over {dims:?}, {m:?}"));
    }
    grids.into_iter().next().expect("a grid per memory")
}

fn jacobi_in(
    shape: &[usize],
    dims: Option<&[usize]>,
    periodic: &[bool],
    scheme: &str,
    path: Path,
    checked: bool,
    memories: Memories,
) -> Vec<f64> {
    let n: usize = dims.map_or(1, |d| d.iter().product());
    let decomp = Decomposition::new(shape, n, dims, periodic, 1).unwrap();
    let opts = ExchangeOptions {
        path,
        checked,
        ..Default::default()
    };
    let runs = on_ranks_in(&decomp, scheme, opts, memories, |mut ex| {
        let run = laplace::run(
            &mut ex,
            &LaplaceOptions {
                iters: 7,
                ..Default::default()
            },
        )
        .unwrap();
        let l = ex.layout().clone();
        let mut cells = Vec::new();
        let lo = l.halo;
        let hi = [0, 1, 2].map(|a| l.halo[a] + l.block.len[a]);
        Layout::for_each_cell(lo, hi, |c| {
            let g = [0, 1, 2].map(|a| c[a] + l.block.start[a] - l.halo[a]);
            cells.push((g, ex.field()[l.index(c)]));
        });
        (run, cells)
    });
    let s3 = decomp.shape();
    let mut grid = vec![f64::NAN; s3.iter().product()];
    let mut digest = 0u64;
    for r in runs {
        let (run, cells) = r.unwrap();
        assert_eq!(run.steps.len(), 7);
        digest = digest.wrapping_add(run.digest);
        for (g, v) in cells {
            grid[(g[0] * s3[1] + g[1]) * s3[2] + g[2]] = v;
        }
    }
    assert!(grid.iter().all(|v| v.is_finite()), "every cell owned once");
    // The digests sum to the same whole-grid digest whatever the split.
    let reference = DIGESTS.with(|d| {
        *d.borrow_mut()
            .entry(format!("{shape:?}{periodic:?}"))
            .or_insert(digest)
    });
    assert_eq!(digest, reference, "digest of {shape:?} over {dims:?}");
    grid
}

thread_local! {
    static DIGESTS: std::cell::RefCell<std::collections::HashMap<String, u64>> = Default::default();
}

fn assert_same_bits(a: &[f64], b: &[f64], what: &str) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.to_bits(), y.to_bits(), "{what}: cell {i}: {x} vs {y}");
    }
}

#[test]
fn two_d_runs_equal_the_one_rank_run_bit_for_bit() {
    let shape = [13, 11];
    let one = jacobi(&shape, None, &[], "shm", Path::Rma, false);
    for dims in [[2, 1], [1, 2], [3, 1], [2, 2], [1, 3], [1, 4]] {
        for path in [Path::Rma, Path::Messages] {
            let n = jacobi(&shape, Some(&dims), &[], "shm", path, false);
            assert_same_bits(&n, &one, &format!("2D dims {dims:?} {path:?}"));
        }
    }
}

#[test]
fn three_d_runs_equal_the_one_rank_run_bit_for_bit() {
    let shape = [7, 9, 10];
    let one = jacobi(&shape, None, &[], "shm", Path::Rma, false);
    for dims in [
        [2, 1, 1],
        [1, 1, 2],
        [3, 1, 1],
        [1, 3, 1],
        [2, 2, 1],
        [1, 2, 2],
        [4, 1, 1],
    ] {
        for path in [Path::Rma, Path::Messages] {
            let n = jacobi(&shape, Some(&dims), &[], "shm", path, false);
            assert_same_bits(&n, &one, &format!("3D dims {dims:?} {path:?}"));
        }
    }
}

#[test]
fn periodic_grids_wrap_and_agree_over_tcp_in_checked_mode() {
    let shape = [10, 12];
    let periodic = [true, true];
    let one = jacobi(&shape, None, &periodic, "shm", Path::Rma, true);
    for dims in [[2, 1], [1, 2], [2, 2], [3, 1]] {
        for path in [Path::Rma, Path::Messages] {
            let n = jacobi(&shape, Some(&dims), &periodic, "tcp", path, true);
            assert_same_bits(
                &n,
                &one,
                &format!("periodic dims {dims:?} {path:?} over tcp"),
            );
        }
    }
}

#[test]
fn ghosts_hold_the_neighbours_cells_with_a_wide_halo() {
    // Each owned cell holds its global linear index; after one exchange every ghost must hold
    // the index of the global cell it stands for.
    let d = Decomposition::new(&[6, 9, 8], 4, Some(&[2, 1, 2]), &[false, true, false], 2).unwrap();
    for (path, memories) in [Path::Rma, Path::Messages]
        .into_iter()
        .flat_map(|p| MEMORIES.map(|m| (p, m)))
    {
        let opts = ExchangeOptions {
            path,
            checked: true,
            ..Default::default()
        };
        let results = on_ranks_in(&d, "shm", opts, memories, |mut ex| {
            let (decomp, l) = (ex.decomposition().clone(), ex.layout().clone());
            let s = decomp.shape();
            let lin = |g: [usize; 3]| ((g[0] * s[1] + g[1]) * s[2] + g[2]) as f64;
            let lo = l.halo;
            let hi = [0, 1, 2].map(|a| l.halo[a] + l.block.len[a]);
            Layout::for_each_cell(lo, hi, |c| {
                let g = l.global_of(&decomp, c).unwrap();
                ex.field_mut()[l.index(c)] = lin(g);
            });
            ex.exchange().unwrap();
            let mut checked = 0;
            for side in ex.sides() {
                let (lo, hi) = l.slab(side.dir, true);
                Layout::for_each_cell(lo, hi, |c| {
                    let g = l.global_of(&decomp, c).unwrap();
                    assert_eq!(
                        ex.field()[l.index(c)],
                        lin(g),
                        "rank {} side {}",
                        ex.rank(),
                        side.dir
                    );
                    checked += 1;
                });
            }
            checked
        });
        for r in results {
            assert!(r.unwrap() > 0);
        }
    }
}

#[test]
fn checked_mode_catches_a_wrong_offset_and_names_ranks_side_and_cells() {
    let d = Decomposition::new(&[8, 8], 2, Some(&[2, 1]), &[], 1).unwrap();
    for (path, memories) in [Path::Rma, Path::Messages]
        .into_iter()
        .flat_map(|p| MEMORIES.map(|m| (p, m)))
    {
        let opts = ExchangeOptions {
            path,
            checked: true,
            ..Default::default()
        };
        let results = on_ranks_in(&d, "shm", opts, memories, |mut ex| {
            if ex.rank() == 0 {
                ex.inject_misplacement(Dir { axis: 1, up: true }, 1);
            }
            ex.exchange()
        });
        let e = results[1].as_ref().unwrap().as_ref().unwrap_err();
        let text = e.to_string();
        assert!(
            matches!(
                e,
                GridError::Misplaced {
                    rank: 1,
                    expected_rank: 0,
                    ..
                }
            ),
            "{text}"
        );
        assert!(
            text.starts_with("checked mode: rank 1's ghost cell on side -y at (3, "),
            "{path:?} {memories:?}: {text}"
        );
        assert!(text.contains("should hold rank 0's cell (3, "), "{text}");
        // Rank 0 may see the damage too: with direct RMA the misplaced row overwrote one of
        // rank 1's own boundary cells, which rank 1 may have sent back before noticing.
        if let Err(e) = results[0].as_ref().unwrap() {
            assert!(
                matches!(e, GridError::Misplaced { rank: 0, .. }),
                "{path:?}: {e}"
            );
        }
    }
}

#[test]
fn a_rank_that_dies_mid_run_is_named_within_seconds() {
    let d = Decomposition::new(&[16, 16], 2, None, &[], 1).unwrap();
    for path in [Path::Rma, Path::Messages] {
        let opts = ExchangeOptions {
            path,
            timeout: Duration::from_secs(30),
            ..Default::default()
        };
        let results = on_ranks(&d, "shm", opts, |mut ex| {
            if ex.rank() == 1 {
                ex.exchange().unwrap();
                drop(ex); // closes its endpoint: the rank is gone
                return Ok(Duration::ZERO);
            }
            ex.exchange().unwrap();
            let t = Instant::now();
            ex.exchange().map(|_| t.elapsed())
        });
        let e = results[0].as_ref().unwrap().as_ref().unwrap_err();
        assert!(
            e.to_string()
                .starts_with("rank 0: exchange with rank 1 (+y) failed: ")
                || e.to_string()
                    .starts_with("rank 0: exchange with rank 1 (synchronizing) failed: "),
            "{path:?}: {e}"
        );
        assert!(
            matches!(e, GridError::Peer { source, .. } if source.kind() == accio::ErrorKind::PeerGone),
            "{e}"
        );
    }
}

#[test]
fn ranks_that_disagree_about_the_grid_say_what_differs() {
    let mut m = mesh(2, "shm");
    let mut row1 = std::mem::take(&mut m[1]);
    let mut row0 = std::mem::take(&mut m[0]);
    let t = std::thread::spawn(move || {
        let d = Decomposition::new(&[8, 10], 2, Some(&[2, 1]), &[], 1).unwrap();
        HaloExchange::<f64>::new(&d, 1, Default::default(), &mut |p| {
            Ok(row1[p].take().unwrap())
        })
        .map(|_| ())
    });
    let d = Decomposition::new(&[8, 8], 2, Some(&[2, 1]), &[], 1).unwrap();
    let e = HaloExchange::<f64>::new(&d, 0, Default::default(), &mut |p| {
        Ok(row0[p].take().unwrap())
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "rank 0 and rank 1 disagree about the grid: nx: 8 here, 10 there"
    );
    assert!(t.join().unwrap().is_err());
}

#[test]
fn a_neighbour_probing_a_later_pair_does_not_end_an_earlier_wait() {
    // Pairs take turns in one global order; a rank whose pair comes later may start it
    // while its partner still answers an earlier pair. With one probe counter per rank
    // (not per side) that early write ended the earlier wait, and 2x2 runs hung or failed.
    for (shape, dims, periodic) in [
        (vec![16, 16], vec![2, 2], vec![false, false]),
        (vec![16, 16], vec![1, 4], vec![true, true]),
        (vec![8, 8, 8], vec![2, 2, 1], vec![false, true, false]),
    ] {
        let n = dims.iter().product();
        let d = Decomposition::new(&shape, n, Some(&dims), &periodic, 1).unwrap();
        for (path, memories) in [Path::Rma, Path::Messages]
            .into_iter()
            .flat_map(|p| MEMORIES.map(|m| (p, m)))
        {
            let opts = ExchangeOptions {
                path,
                checked: true,
                timeout: Duration::from_secs(20),
                ..Default::default()
            };
            let results = on_ranks_in(&d, "shm", opts, memories, |mut ex| {
                let timed = ex.probe(200)?;
                ex.probe_after_sweep(3)?;
                laplace::init(&mut ex, 3);
                ex.exchange()?;
                Ok::<_, GridError>(timed)
            });
            let timed: usize = results
                .into_iter()
                .map(|r| {
                    r.unwrap()
                        .unwrap_or_else(|e| panic!("{dims:?} {path:?} {memories:?}: {e}"))
                        .len()
                })
                .sum();
            // Every pair of distinct neighbours is timed once per direction it is listed in.
            assert!(timed > 0, "{dims:?} {path:?}");
        }
    }
}

#[test]
fn a_neighbour_that_finishes_first_and_leaves_is_no_failure() {
    // A rank's last exchange may end before its neighbour's: it leaves, closing its
    // endpoints. The neighbour that read its counter just before the last write and probed
    // the endpoint just after the close saw PeerGone and failed a finished run (seen under
    // load in the 3D test). Many short runs give that window its chances.
    let d = Decomposition::new(&[6, 5, 4], 2, Some(&[2, 1, 1]), &[], 1).unwrap();
    for path in [Path::Rma, Path::Messages] {
        for _ in 0..40 {
            let opts = ExchangeOptions {
                path,
                spin: Duration::ZERO,
                ..Default::default()
            };
            let results = on_ranks(&d, "shm", opts, |mut ex| {
                let lopts = LaplaceOptions {
                    iters: 2,
                    ..Default::default()
                };
                laplace::run(&mut ex, &lopts).map(|r| r.digest)
            });
            for r in results {
                r.unwrap().unwrap_or_else(|e| panic!("{path:?}: {e}"));
            }
        }
    }
}

/// Strided faces on the RMA path are packed, and their ghosts unpacked, by the kernel's
/// sweep (the grids above agree with one rank while it does): every such face is one the kernel can pack, so
/// `laplace::run` takes that path; contiguous faces, checked mode and messages do not.
#[test]
fn strided_faces_are_packed_in_the_sweep_on_the_rma_path_only() {
    for (shape, dims) in [
        (&[21usize, 19][..], &[1usize, 2][..]),
        (&[9, 8, 10], &[1, 1, 2]),
    ] {
        let d = Decomposition::new(shape, dims.iter().product(), Some(dims), &[], 1).unwrap();
        for (path, checked, want) in [
            (Path::Rma, false, true),
            (Path::Rma, true, false),
            (Path::Messages, false, false),
        ] {
            let opts = ExchangeOptions {
                path,
                checked,
                ..Default::default()
            };
            for r in on_ranks(&d, "shm", opts, |ex| {
                let faces = ex.packable_faces();
                let mut k = laplace::Kernel::new(ex.decomposition(), ex.layout());
                (faces.len(), k.pack_faces(&faces))
            }) {
                let (n, packs) = r.unwrap();
                assert_eq!(n > 0, want, "{dims:?} {path:?} checked {checked}");
                assert!(
                    packs,
                    "{dims:?} {path:?}: the kernel refused a strided face"
                );
            }
        }
    }
    // A face along a middle axis of a 3D grid is strided but not one column: the kernel
    // refuses, so that rank packs in the exchange as before.
    let d = Decomposition::new(&[9, 8, 10], 4, Some(&[1, 2, 2]), &[], 1).unwrap();
    for r in on_ranks(&d, "shm", ExchangeOptions::default(), |ex| {
        let mut k = laplace::Kernel::new(ex.decomposition(), ex.layout());
        k.pack_faces(&ex.packable_faces())
    }) {
        assert!(!r.unwrap());
    }
    // Split by rows only: every face is contiguous and goes by direct RMA.
    let d = Decomposition::new(&[21, 19], 2, Some(&[2, 1]), &[], 1).unwrap();
    for r in on_ranks(&d, "shm", ExchangeOptions::default(), |ex| {
        ex.packable_faces().len()
    }) {
        assert_eq!(r.unwrap(), 0);
    }
}

/// The faces a sweep brings into cache for the exchange (`Kernel::warm_faces`) are the
/// contiguous faces that go to another rank by the RMA path: a split by rows has one per
/// neighbour, each a whole owned row; a split by columns, or the messages path, none.
#[test]
fn direct_faces_are_the_contiguous_faces_put_by_rma() {
    let d = Decomposition::new(&[21, 19], 3, Some(&[3, 1]), &[], 1).unwrap();
    for (path, want) in [(Path::Rma, [1, 2, 1]), (Path::Messages, [0, 0, 0])] {
        let opts = ExchangeOptions {
            path,
            ..Default::default()
        };
        let got = on_ranks(&d, "shm", opts, |ex| {
            let l = ex.layout().clone();
            let faces = ex.direct_faces();
            for f in &faces {
                // One run: a whole owned row (19 cells; no ghost columns, as the
                // columns are not split).
                assert_eq!(f.as_slice().len(), 1);
                let (start, n) = f.as_slice()[0];
                assert_eq!((n, start % l.alloc[2], l.halo[2]), (19, 0, 0));
            }
            faces.len()
        });
        let got: Vec<usize> = got.into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(got, want, "{path:?}");
    }
    let d = Decomposition::new(&[21, 19], 2, Some(&[1, 2]), &[], 1).unwrap();
    for r in on_ranks(&d, "shm", ExchangeOptions::default(), |ex| {
        ex.direct_faces().len()
    }) {
        assert_eq!(r.unwrap(), 0);
    }
}

#[test]
fn periodic_grids_with_faces_packed_in_the_sweep_agree_with_one_rank() {
    let shape = [10, 12];
    let periodic = [true, true];
    let one = jacobi(&shape, None, &periodic, "shm", Path::Rma, false);
    for dims in [[1, 2], [2, 2], [1, 3]] {
        let n = jacobi(&shape, Some(&dims), &periodic, "shm", Path::Rma, false);
        assert_same_bits(&n, &one, &format!("periodic dims {dims:?} rma, unchecked"));
    }
}

#[test]
fn probes_run_again_and_after_a_sweep_on_a_line_of_ranks() {
    // Ranks in the middle of a line probe two pairs in turn, and every probe after the
    // first must not be satisfied by counter values the first left behind.
    let d = Decomposition::new(&[61, 47], 3, Some(&[3, 1]), &[], 1).unwrap();
    for (scheme, path) in [
        ("shm", Path::Rma),
        ("tcp", Path::Rma),
        ("shm", Path::Messages),
    ] {
        let opts = ExchangeOptions {
            path,
            ..Default::default()
        };
        let results = on_ranks(&d, scheme, opts, |mut ex| {
            let a = ex.probe(5).unwrap();
            let b = ex.probe_after_sweep(3).unwrap();
            let c = ex.probe(2).unwrap();
            ex.exchange().unwrap();
            [a, b, c].map(|p| {
                assert!(p.iter().all(|(s, t)| s.dir.up && *t > Duration::ZERO));
                p.len()
            })
        });
        let timed: Vec<_> = results.into_iter().map(|r| r.unwrap()).collect();
        // Ranks 0 and 1 each time the pair toward their upper neighbour; rank 2 none.
        assert_eq!(timed, vec![[1; 3], [1; 3], [0; 3]], "{scheme} {path:?}");
    }
}

#[test]
fn in_run_probes_leave_the_grid_unchanged_and_time_every_pair() {
    // 2x2 ranks: every rank has two neighbours, one contiguous face and one strided; the
    // probes alternate between one face alone and both at once, and write real faces into
    // the neighbours mid-run, so the grid must still equal the run without them.
    let shape = [23, 29];
    let d = Decomposition::new(&shape, 4, Some(&[2, 2]), &[], 1).unwrap();
    for (scheme, path, streaming, memories) in [
        ("shm", Path::Rma, Some(true), MEMORIES[0]),
        ("shm", Path::Rma, Some(false), MEMORIES[0]),
        ("shm", Path::Rma, Some(true), MEMORIES[1]),
        ("shm", Path::Rma, Some(false), MEMORIES[2]),
        ("tcp", Path::Rma, None, MEMORIES[2]),
        ("shm", Path::Messages, None, MEMORIES[1]),
    ] {
        let opts = ExchangeOptions {
            path,
            streaming,
            ..Default::default()
        };
        let digests = |probe_every: usize| {
            let runs = on_ranks_in(&d, scheme, opts.clone(), memories, move |mut ex| {
                let lopts = LaplaceOptions {
                    iters: 12,
                    probe_every,
                    ..Default::default()
                };
                laplace::run(&mut ex, &lopts).unwrap()
            });
            runs.into_iter().map(|r| r.unwrap()).collect::<Vec<_>>()
        };
        let plain = digests(0);
        let probed = digests(4);
        for (a, b) in plain.iter().zip(&probed) {
            assert_eq!(
                a.digest, b.digest,
                "rank {} {scheme} {path:?} {memories:?}",
                a.rank
            );
            assert_eq!(b.steps.len(), 12);
            // Iterations 2, 6 and 10 probed: one face alone, both at once, one alone.
            let probed_at: Vec<usize> = (0..12).filter(|&i| b.steps[i].probed).collect();
            assert_eq!(probed_at, [2, 6, 10]);
            assert!(a.probes.one_way.is_empty() && a.probes.both.is_empty());
            // Each rank times its upper pairs alone (twice), and puts to every neighbour
            // at once (once, on the RMA path).
            let ups = [Dir { axis: 1, up: true }, Dir { axis: 2, up: true }]
                .iter()
                .filter(|&&dir| d.neighbour(b.rank, dir).is_some())
                .count();
            assert_eq!(b.probes.one_way.len(), 2 * ups, "rank {} {scheme}", b.rank);
            let sides = if path == Path::Rma { 2 } else { 0 };
            assert_eq!(b.probes.both.len(), sides, "rank {} {scheme}", b.rank);
            assert!(b
                .probes
                .one_way
                .iter()
                .chain(&b.probes.both)
                .all(|(_, t)| *t > Duration::ZERO));
        }
    }
}
