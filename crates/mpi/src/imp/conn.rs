//! Listening and connecting: a connection request names a port and brings the
//! connecting end's window table; the listener answers on the connection's setup tag.

use super::endpoint::MpiEndpoint;
use super::*;
use accio_core::ListenerWait;

// ---- listener -------------------------------------------------------------------------

#[derive(Debug)]
struct MpiListener {
    addr: Addr,
    port: u32,
    queue: Arc<Mutex<VecDeque<Request>>>,
}

pub(crate) fn listen(addr: &Addr) -> Result<Box<dyn Listener>> {
    let Addr::Mpi { rank, port } = *addr else {
        return Err(Error::BadAddress {
            addr: addr.to_string(),
            reason: "not an mpi:// address".into(),
        });
    };
    let m = mpi().map_err(|e| rename(e, addr))?;
    if rank != m.rank as u32 {
        return Err(Error::BadAddress {
            addr: addr.to_string(),
            reason: format!(
                "this process is rank {}: it can listen only on mpi://{}[:PORT]",
                m.rank, m.rank
            ),
        });
    }
    if port >= EPHEMERAL {
        return Err(Error::BadAddress {
            addr: addr.to_string(),
            reason: format!("ports from {EPHEMERAL} up name connecting ends"),
        });
    }
    let mut l = lock(&m.listeners);
    if l.contains_key(&port) {
        return Err(Error::AddrInUse {
            addr: addr.to_string(),
        });
    }
    let queue = Arc::new(Mutex::new(VecDeque::new()));
    l.insert(port, Arc::clone(&queue));
    Ok(Box::new(MpiListener {
        addr: addr.clone(),
        port,
        queue,
    }))
}

fn rename(e: Error, addr: &Addr) -> Error {
    match e {
        Error::BadAddress { reason, .. } => Error::BadAddress {
            addr: addr.to_string(),
            reason,
        },
        e => e,
    }
}

impl Listener for MpiListener {
    fn local_addr(&self) -> &Addr {
        &self.addr
    }

    fn accept(&self, timeout: Option<Duration>) -> Result<Box<dyn Endpoint>> {
        let m = mpi()?;
        let t0 = Instant::now();
        let mut b = Backoff::new(Backoff::SPIN);
        // While application threads poll MPI they route requests (`pump_soon`): an acceptor
        // entering MPI beside them stalls them (see `app_polled`). Whether they do is asked
        // once a millisecond.
        let mut seen = POLLS.load(Ordering::Relaxed);
        let mut asked = t0;
        let mut busy = false;
        loop {
            if asked.elapsed() >= CLOSE_PROBE_EVERY {
                busy = app_polled(&mut seen);
                asked = Instant::now();
            }
            if !busy {
                m.pump()?;
            }
            let req = lock(&self.queue).pop_front();
            if let Some(r) = req {
                let ep = MpiEndpoint::new(
                    m,
                    r.src,
                    self.addr.clone(),
                    Addr::Mpi {
                        rank: r.src as u32,
                        port: EPHEMERAL | r.conn,
                    },
                    tag(r.conn, 1, 0),
                    tag(r.conn, 0, 0),
                    r.table,
                )?;
                let mut reply = [0u8; 16];
                reply[0..4].copy_from_slice(&1u32.to_le_bytes());
                reply[8..16].copy_from_slice(&ep.table.addr.to_le_bytes());
                send_blocking(&reply, r.src, tag(r.conn, 1, KIND_SETUP))?;
                return Ok(Box::new(ep));
            }
            if let Some(t) = timeout {
                if t0.elapsed() >= t {
                    return Err(Error::Timeout {
                        op: "accept",
                        resource: self.addr.to_string(),
                        after: t,
                    });
                }
            }
            b.wait_idle();
        }
    }
}

impl Drop for MpiListener {
    fn drop(&mut self) {
        let Ok(m) = mpi() else { return };
        lock(&m.listeners).remove(&self.port);
        for r in lock(&self.queue).drain(..) {
            let _ = refuse(r.src, r.conn);
        }
    }
}

// ---- connect --------------------------------------------------------------------------

pub(crate) fn connect(addr: &Addr, timeout: Duration) -> Result<Box<dyn Endpoint>> {
    let Addr::Mpi { rank, port } = *addr else {
        return Err(Error::BadAddress {
            addr: addr.to_string(),
            reason: "not an mpi:// address".into(),
        });
    };
    let m = mpi().map_err(|e| rename(e, addr))?;
    if rank >= m.size as u32 {
        return Err(Error::BadAddress {
            addr: addr.to_string(),
            reason: format!("rank {rank} is outside the MPI world of {} ranks", m.size),
        });
    }
    let conn = m.next_conn.fetch_add(1, Ordering::Relaxed);
    if conn >= m.max_conn {
        return Err(Error::invalid(
            "connect",
            format!(
                "{addr}: this process used all {} connection tags MPI offers",
                m.max_conn
            ),
        ));
    }
    let peer = rank as c_int;
    let local = Addr::Mpi {
        rank: m.rank as u32,
        port: EPHEMERAL | conn,
    };
    let mut ep = MpiEndpoint::new(
        m,
        peer,
        local,
        addr.clone(),
        tag(conn, 0, 0),
        tag(conn, 1, 0),
        0,
    )?;
    let mut req = [0u8; 16];
    req[0..4].copy_from_slice(&port.to_le_bytes());
    req[4..8].copy_from_slice(&conn.to_le_bytes());
    req[8..16].copy_from_slice(&ep.table.addr.to_le_bytes());
    send_blocking(&req, peer, CONNECT_TAG)?;
    let t0 = Instant::now();
    let mut b = Backoff::new(Backoff::SPIN);
    let mut buf = Vec::new();
    // Nobody listening on that port yet: ask again (same connection tag: a refusal leaves
    // nothing behind on the other rank) until the timeout, pumping meanwhile so that this
    // rank keeps serving the others.
    let mut wait = ListenerWait::new(timeout);
    loop {
        m.pump()?;
        if try_take(peer, tag(conn, 1, KIND_SETUP), &mut buf)? == Some(16) {
            if u32::from_le_bytes(buf[0..4].try_into().expect("4")) != 1 {
                let Some(nap) = wait.next_pause() else {
                    ep.refused = true;
                    return Err(wait.gave_up(
                        &addr.to_string(),
                        &format!("nobody listened on port {port} of rank {rank}"),
                    ));
                };
                let until = Instant::now() + nap;
                while Instant::now() < until {
                    m.pump()?;
                    b.wait();
                }
                send_blocking(&req, peer, CONNECT_TAG)?;
                continue;
            }
            ep.peer_table = u64::from_le_bytes(buf[8..16].try_into().expect("8"));
            return Ok(Box::new(ep));
        }
        if t0.elapsed() >= timeout {
            // The request may still be served later; this side is gone then.
            ep.refused = true;
            return Err(Error::Timeout {
                op: "connect",
                resource: addr.to_string(),
                after: timeout,
            });
        }
        b.wait();
    }
}
