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
