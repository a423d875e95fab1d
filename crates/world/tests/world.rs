//! Worlds of threads in one process, bootstrapped through an in-process launcher.

use std::thread;
use std::time::{Duration, Instant};

use accio::{Access, RmaFlags};
use accio_world::rendezvous::Rendezvous;
use accio_world::{Bootstrap, NodeId, Rules, World, WorldError};

fn boot(rank: usize, size: usize, rdv: &str, node: Option<NodeId>) -> Bootstrap {
    Bootstrap {
        rank,
        size,
        rendezvous: rdv.to_string(),
        timeout: Duration::from_secs(5),
        tcp_host: "127.0.0.1".into(),
        node,
        rules: Rules::default(),
    }
}

/// Rank r's node: ranks below `split` on this node, the rest on a made-up second one.
fn node_of(r: usize, split: usize) -> Option<NodeId> {
    let mut n = NodeId::current();
    if r >= split {
        n.net_ns = "net:[77]".into();
    }
    Some(n)
}

#[test]
fn four_ranks_on_two_nodes_connect_every_pair_and_explain_the_choice() {
    let size = 4;
    let rdv = Rendezvous::bind(&std::env::temp_dir(), size).unwrap();
    let addr = rdv.addr();
    let ranks: Vec<_> = (0..size)
        .map(|r| {
            let addr = addr.clone();
            thread::spawn(
                move || -> Result<Vec<(usize, String, String)>, WorldError> {
                    let w = World::bootstrap(boot(r, size, &addr, node_of(r, 2)))?;
                    assert_eq!((w.rank(), w.size()), (r, size));
                    assert_eq!(w.node_ranks(), if r < 2 { vec![0, 1] } else { vec![2, 3] });
                    let mut seen = Vec::new();
                    // Every pair, in an order both ends agree on.
                    for a in 0..size {
                        for b in a + 1..size {
                            if r != a && r != b {
                                continue;
                            }
                            let peer = if r == a { b } else { a };
                            let ep = w.endpoint(peer)?;
                            let c = w.choice(peer)?.clone();
                            assert_eq!(ep.backend(), c.scheme);
                            // A message each way and an RMA write the peer checks.
                            let win = ep.register(4096, Access::READ_WRITE).unwrap();
                            ep.send(&win.offset().to_le_bytes()).unwrap();
                            let mut m = Vec::new();
                            ep.recv(&mut m).unwrap();
                            let remote = u64::from_le_bytes(m[..8].try_into().unwrap());
                            let tag = (r * 100 + peer) as u64;
                            ep.vwrite_to(&tag.to_le_bytes(), remote + 8, RmaFlags::SYNC)
                                .unwrap();
                            ep.fence_signal(None, Some((remote, 1))).unwrap();
                            win.wait_u64(0, 1, Some(Duration::from_secs(5))).unwrap();
                            assert_eq!(win.load_u64(8).unwrap(), (peer * 100 + r) as u64);
                            ep.send(b"done").unwrap();
                            ep.recv(&mut m).unwrap();
                            seen.push((peer, c.scheme, c.reason));
                        }
                    }
                    Ok(seen)
                },
            )
        })
        .collect();
    let table = rdv.serve(Duration::from_secs(10), &mut || None).unwrap();
    assert_eq!(table.len(), 4);
    for (r, h) in ranks.into_iter().enumerate() {
        let seen = h.join().unwrap().unwrap();
        assert_eq!(seen.len(), 3);
        for (peer, scheme, reason) in seen {
            if (r < 2) == (peer < 2) {
                assert_eq!(scheme, "shm", "{r}-{peer}: {reason}");
                assert!(reason.starts_with("same node"), "{reason}");
            } else {
                assert_eq!(scheme, "tcp", "{r}-{peer}: {reason}");
                assert!(
                    reason.contains("shm refused (network namespaces differ"),
                    "{reason}"
                );
            }
        }
    }
}

#[test]
fn bad_worlds_fail_fast_naming_the_rank() {
    // A rank outside the world is refused before it reaches anyone.
    let e = World::bootstrap(boot(5, 4, "unix:/nonexistent", None)).unwrap_err();
    assert_eq!(e.to_string(), "rank 5: outside the world of 4 ranks");

    // Ranks disagreeing with the launcher on the size: every rank hears which one.
    let rdv = Rendezvous::bind(&std::env::temp_dir(), 2).unwrap();
    let addr = rdv.addr();
    let a = {
        let addr = addr.clone();
        thread::spawn(move || World::bootstrap(boot(0, 2, &addr, None)).unwrap_err())
    };
    thread::sleep(Duration::from_millis(100));
    let b = thread::spawn(move || World::bootstrap(boot(1, 3, &addr, None)).unwrap_err());
    let served = rdv.serve(Duration::from_secs(5), &mut || None).unwrap_err();
    assert!(
        served
            .to_string()
            .contains("rank 1: believes the world has 3 ranks"),
        "{served}"
    );
    for e in [a.join().unwrap(), b.join().unwrap()] {
        assert!(
            e.to_string()
                .contains("rank 1: believes the world has 3 ranks, the launcher started 2"),
            "{e}"
        );
    }

    // A rank that dies in bootstrap: the launcher learns it and tells the others at once.
    let rdv = Rendezvous::bind(&std::env::temp_dir(), 3).unwrap();
    let addr = rdv.addr();
    let t0 = Instant::now();
    let a = thread::spawn(move || World::bootstrap(boot(0, 3, &addr, None)).unwrap_err());
    let mut polls = 0;
    let e = rdv
        .serve(Duration::from_secs(30), &mut || {
            polls += 1;
            (polls > 20).then(|| "rank 2 exited with status 1 before joining the world".into())
        })
        .unwrap_err();
    assert!(e.to_string().starts_with("rank 2: rank 2 exited"), "{e}");
    let e = a.join().unwrap();
    assert!(e.to_string().contains("rank 2 exited with status 1"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(5));

    // No launcher at all: an error within the timeout, not a hang.
    let mut b = boot(0, 2, "unix:/nonexistent/accio.sock", None);
    b.timeout = Duration::from_millis(300);
    let t0 = Instant::now();
    let e = World::bootstrap(b).unwrap_err();
    assert!(e.to_string().contains("cannot reach the launcher"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_peer_that_never_calls_times_out_naming_it() {
    let rdv = Rendezvous::bind(&std::env::temp_dir(), 2).unwrap();
    let addr = rdv.addr();
    let h: Vec<_> = (0..2)
        .map(|r| {
            let addr = addr.clone();
            thread::spawn(move || {
                let mut b = boot(r, 2, &addr, None);
                b.timeout = Duration::from_millis(500);
                let w = World::bootstrap(b).unwrap();
                // Rank 1 waits for rank 0, which never asks.
                if r == 1 {
                    let e = w.endpoint(0).unwrap_err().to_string();
                    assert_eq!(e, "rank 1: no endpoint from rank 0 over shm within 500ms");
                    assert_eq!(
                        w.endpoint(9).unwrap_err().to_string(),
                        "rank 9: outside the world of 2 ranks"
                    );
                }
                thread::sleep(Duration::from_millis(700));
            })
        })
        .collect();
    rdv.serve(Duration::from_secs(5), &mut || None).unwrap();
    for t in h {
        t.join().unwrap();
    }
}

/// Runs `body(world)` on each of `size` ranks (threads) of one world, two made-up nodes so
/// that both shm and tcp pairs take part; returns what each rank returned, in rank order.
fn world_of<T: Send + 'static>(
    size: usize,
    body: impl Fn(World) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let rdv = Rendezvous::bind(&std::env::temp_dir(), size).unwrap();
    let addr = rdv.addr();
    let h: Vec<_> = (0..size)
        .map(|r| {
            let (addr, body) = (addr.clone(), body.clone());
            thread::spawn(move || {
                body(World::bootstrap(boot(r, size, &addr, node_of(r, 2))).unwrap())
            })
        })
        .collect();
    rdv.serve(Duration::from_secs(10), &mut || None).unwrap();
    h.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn no_rank_leaves_a_barrier_before_the_last_one_enters_it() {
    for size in [1, 2, 3, 5] {
        let t0 = Instant::now();
        // Each rank enters barrier k at about (k * size + rank) * 10 ms: the latest entry of
        // barrier k is rank size - 1's, and nobody may leave before it.
        let times = world_of(size, move |w| {
            let me = w.rank();
            // A program endpoint to a neighbour carries a message across every barrier:
            // the barrier's own connections must not take it or mix theirs into it.
            let next = (me + 1) % w.size();
            let prev = (me + w.size() - 1) % w.size();
            let eps = (w.size() > 1).then(|| {
                let (a, b) = if me < next {
                    (next, prev)
                } else {
                    (prev, next)
                };
                let ea = w.endpoint(a).unwrap();
                let eb = if a == b {
                    None
                } else {
                    Some(w.endpoint(b).unwrap())
                };
                let (to_next, from_prev) = match eb {
                    None => (None, ea),
                    Some(eb) if a == next => (Some(ea), eb),
                    Some(eb) => (Some(eb), ea),
                };
                (to_next, from_prev)
            });
            let mut out = Vec::new();
            for k in 0..4u64 {
                let enter = Duration::from_millis((k * size as u64 + me as u64) * 10);
                thread::sleep(enter.saturating_sub(t0.elapsed()));
                if let Some((to_next, from_prev)) = &eps {
                    let to = to_next.as_ref().unwrap_or(from_prev);
                    to.send(&[k as u8, me as u8]).unwrap();
                }
                let entered = t0.elapsed();
                w.barrier(None).unwrap();
                out.push((entered, t0.elapsed()));
                if let Some((_, from_prev)) = &eps {
                    let mut m = Vec::new();
                    from_prev.recv(&mut m).unwrap();
                    assert_eq!(m, [k as u8, prev as u8], "rank {me}, barrier {k}");
                }
            }
            out
        });
        for k in 0..4 {
            let last_in = times.iter().map(|t| t[k].0).max().unwrap();
            for (r, t) in times.iter().enumerate() {
                assert!(
                    t[k].1 >= last_in,
                    "size {size}: rank {r} left barrier {k} at {:?}, before the last rank entered at {last_in:?}",
                    t[k].1
                );
            }
        }
    }
}

#[test]
fn a_barrier_that_times_out_resumes_where_it_stopped() {
    let out = world_of(3, |w| {
        let mut timeouts = 0;
        let mut first = None;
        if w.rank() == 2 {
            thread::sleep(Duration::from_millis(300));
        }
        // Ranks 0 and 1 wait in 20 ms slices, as the Python binding does between checks
        // for Ctrl-C; rank 2 arrives late and waits in one call.
        loop {
            let slice = (w.rank() != 2).then_some(Duration::from_millis(20));
            match w.barrier(slice) {
                Ok(()) => break,
                Err(e @ WorldError::Timeout { .. }) => {
                    timeouts += 1;
                    first.get_or_insert(e.to_string());
                }
                Err(e) => panic!("rank {}: {e}", w.rank()),
            }
        }
        // The next barrier starts afresh, in step on every rank.
        w.barrier(Some(Duration::from_secs(5))).unwrap();
        (timeouts, first)
    });
    for (r, (timeouts, first)) in out.iter().enumerate().take(2) {
        assert!(*timeouts >= 5, "rank {r} timed out {timeouts} times");
        let e = first.as_deref().unwrap();
        assert!(
            e.starts_with(&format!("rank {r}: no barrier message from rank ")),
            "{e}"
        );
    }
    assert_eq!(out[2].0, 0);
}

#[test]
fn a_node_is_oversubscribed_when_its_ranks_outnumber_their_cpus() {
    // Every thread rank may run on the CPUs this process may: ranks 0 and 1 share a node
    // (`world_of`), the others another one of their own.
    // SAFETY: a zeroed cpu_set_t is the empty set; sched_getaffinity fills it.
    let cpus = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set),
            0
        );
        libc::CPU_COUNT(&set) as usize
    };
    for w in world_of(3, |w| (w.rank(), w.oversubscribed())) {
        let on_node = if w.0 < 2 { 2 } else { 1 };
        assert_eq!(w.1, on_node > cpus, "rank {} of 3 on {cpus} CPU(s)", w.0);
    }
}
