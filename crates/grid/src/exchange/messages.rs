//! The two-sided path: an empty message per neighbour to synchronize, then packed faces
//! in chunks the endpoints accept without blocking, sent and received together.

use accio_core::{Error, Progress};
use bytemuck::Pod;

use super::{unpack, HaloExchange, Wait, TAG};
use crate::error::{GridError, Result};

impl<T: Pod> HaloExchange<T> {
    pub(super) fn sync_messages(&mut self) -> Result<()> {
        let mut wait = Wait::new();
        let mut sent = vec![false; self.peers.len()];
        let mut got = vec![false; self.peers.len()];

        while got.iter().any(|g| !g) || sent.iter().any(|s| !s) {
            let mut progressed = false;
            for i in 0..self.peers.len() {
                let p = &self.peers[i];
                if !sent[i] {
                    match p.ep.try_send(&[]) {
                        Ok(Progress::Ready(())) => (sent[i], progressed) = (true, true),
                        Ok(Progress::WouldBlock) => {}
                        Err(e) => return Err(self.peer_err(p.rank, "synchronizing", e)),
                    }
                }
                if !got[i] {
                    match p.ep.try_recv(&mut self.scratch) {
                        Ok(Progress::Ready(0)) => (got[i], progressed) = (true, true),
                        Ok(Progress::Ready(n)) => {
                            return Err(self.protocol(i, format!("a {n}-byte message")));
                        }
                        Ok(Progress::WouldBlock) => {}
                        Err(e) => return Err(self.peer_err(p.rank, "synchronizing", e)),
                    }
                }
            }
            if !progressed {
                self.backoff(&mut wait, None)?;
            }
        }
        Ok(())
    }

    pub(super) fn protocol(&self, peer: usize, what: String) -> GridError {
        let p = &self.peers[peer];
        self.peer_err(
            p.rank,
            "synchronizing",
            Error::Protocol {
                peer: p.ep.peer_addr().to_string(),
                reason: format!("expected an empty synchronization message, got {what}"),
            },
        )
    }

    /// Sends every packed face and receives every ghost slab, in chunks the endpoints
    /// accept without blocking, so that two neighbours sending large faces at each other
    /// cannot wait on each other.
    pub(super) fn progress_messages(&mut self) -> Result<()> {
        let per_cell = self.elem() + if self.opts.checked { TAG } else { 0 };
        let np = self.peers.len();
        let mut send_at = vec![(0usize, 0usize); np];
        let mut recv_at = vec![0usize; np];
        for s in &mut self.sides {
            s.recv_buf.clear();
        }
        let mut wait = Wait::new();

        loop {
            let mut progressed = false;
            let mut done = true;
            for i in 0..np {
                let p = &self.peers[i];
                while send_at[i].0 < p.sends.len() {
                    let s = &self.sides[p.sends[send_at[i].0]];
                    let off = send_at[i].1;
                    let end = (off + p.chunk).min(s.send_buf.len());
                    match p.ep.try_send(&s.send_buf[off..end]) {
                        Ok(Progress::Ready(())) => {
                            progressed = true;
                            send_at[i] = if end == s.send_buf.len() {
                                (send_at[i].0 + 1, 0)
                            } else {
                                (send_at[i].0, end)
                            };
                        }
                        Ok(Progress::WouldBlock) => break,
                        Err(e) => return Err(self.peer_err(p.rank, &s.dir.to_string(), e)),
                    }
                }
                while recv_at[i] < self.peers[i].recvs.len() {
                    let si = self.peers[i].recvs[recv_at[i]];
                    let expected = self.sides[si].ghosts.elems() * per_cell;
                    match self.peers[i].ep.try_recv(&mut self.scratch) {
                        Ok(Progress::Ready(n)) => {
                            progressed = true;
                            let s = &mut self.sides[si];
                            if s.recv_buf.is_empty() && n == expected {
                                std::mem::swap(&mut s.recv_buf, &mut self.scratch);
                            } else {
                                s.recv_buf.extend_from_slice(&self.scratch[..n]);
                            }
                            let got = s.recv_buf.len();
                            if got > expected {
                                let (rank, dir) = (s.rank, s.dir);
                                return Err(self.peer_err(
                                    rank,
                                    &dir.to_string(),
                                    Error::Protocol {
                                        peer: self.peers[i].ep.peer_addr().to_string(),
                                        reason: format!(
                                            "{got} bytes for a ghost slab of {expected}"
                                        ),
                                    },
                                ));
                            }
                            if got == expected {
                                self.unpack_received(si);
                                recv_at[i] += 1;
                            }
                        }
                        Ok(Progress::WouldBlock) => break,
                        Err(e) => {
                            let s = &self.sides[si];
                            return Err(self.peer_err(s.rank, &s.dir.to_string(), e));
                        }
                    }
                }
                let p = &self.peers[i];
                done &= send_at[i].0 == p.sends.len() && recv_at[i] == p.recvs.len();
            }
            if done {
                return Ok(());
            }
            if !progressed {
                self.backoff(&mut wait, None)?;
            }
        }
    }

    pub(super) fn unpack_received(&mut self, i: usize) {
        let elem = self.elem();
        let s = &self.sides[i];
        let n = s.ghosts.elems();
        // SAFETY: ghost runs lie inside the data and tag sections; `recv_buf` holds `n`
        // elements then (checked) `n` tags.
        unsafe {
            unpack(
                self.arr(self.secs.data),
                &s.ghosts,
                elem,
                &s.recv_buf[..n * elem],
            );
            if self.opts.checked {
                unpack(
                    self.arr(self.secs.tags),
                    &s.ghosts,
                    TAG,
                    &s.recv_buf[n * elem..],
                );
            }
        }
    }
}
