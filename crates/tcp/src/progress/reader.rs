//! The reader side: applies every frame from the peer in stream order, and queues what
//! it owes the peer for the responder.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use accio_core::{
    find_either, Access, DeviceMemory, EitherWindow, ErrorKind, MemView, Side, WindowDesc,
};

use super::{
    credit_cost, lock, may_send, read, sub_view, wait, write, Fault, Gone, ReadState, Reply,
    Shared, MAX_REPLIES,
};
use crate::frame::{FaultCode, FrameReader, Header, Kind, FLAG_ACK};
use crate::sys::FdSource;

/// Local window bytes the peer addresses: host memory, or bytes of a device window.
enum Target {
    Host(MemView),
    Device(Arc<dyn DeviceMemory>, usize),
}

impl Shared {
    /// The local window memory `offset + len` with right `need`, as the peer addresses
    /// it; a refusal as the fault code to report.
    fn find_local(&self, offset: u64, len: u64, need: Access) -> Result<Target, FaultCode> {
        let space = read(&self.windows);
        let code = |e: accio_core::Error| match e.kind() {
            ErrorKind::AccessDenied => FaultCode::AccessDenied,
            _ => FaultCode::OutOfWindow,
        };
        let side = Side::Local;
        match find_either(
            &space.table,
            &space.devices,
            offset,
            len,
            need,
            side,
            &self.local,
        ) {
            Ok(EitherWindow::First(d, w)) => sub_view(w, offset - d.offset, len as usize)
                .map(Target::Host)
                .ok_or(FaultCode::OutOfWindow),
            Ok(EitherWindow::Second(d, w)) => Ok(Target::Device(
                w.memory().clone(),
                (offset - d.offset) as usize,
            )),
            Err(e) => Err(code(e)),
        }
    }

    /// Reads a write's `len`-byte payload into device memory `m` at `at`, the network
    /// filling one pinned chunk while the driver copies the other to the device. A failed
    /// device copy consumes the rest of the payload and answers a fault.
    fn write_device(
        &self,
        rx: &mut FrameReader<FdSource>,
        h: &Header,
        m: &dyn DeviceMemory,
        at: usize,
    ) -> Result<(), Gone> {
        let len = h.len as usize;
        let mut got = 0usize;
        let mut read_error = None;
        let r = m.fill(at, len, &mut |chunk| {
            // SAFETY: `chunk` is the driver's pinned memory, writable for its length
            // during the call.
            let r = unsafe { rx.read_payload_raw(chunk.as_mut_ptr(), chunk.len(), Kind::Write) };
            match r {
                Ok(()) => {
                    got += chunk.len();
                    Ok(())
                }
                Err(e) => {
                    read_error = Some(e);
                    Err(accio_core::Error::invalid("rma", "the connection failed"))
                }
            }
        });
        if let Some(e) = read_error {
            return Err(Gone::from_read(e));
        }
        if r.is_err() {
            rx.skip_payload((len - got) as u64, Kind::Write)
                .map_err(Gone::from_read)?;
            self.reply(Reply::Fault(Header::fault(
                h.seq,
                FaultCode::Device,
                h.offset,
                h.len,
                Access::WRITE,
            )));
        }
        Ok(())
    }

    /// Queues a reply for the responder. Waits while the queue is full (only a peer
    /// flooding requests it never waits for can fill it).
    fn reply(&self, r: Reply) {
        let mut q = lock(&self.replies);
        while q.queue.len() >= MAX_REPLIES && !q.stop {
            q.reader_blocked = true;
            q = wait(&self.replies_cv, q);
        }
        q.reader_blocked = false;
        if q.stop {
            return;
        }
        if let (Reply::Ack(new), Some(Reply::Ack(old))) = (&r, q.queue.back_mut()) {
            *old = (*old).max(*new);
            return;
        }
        q.queue.push_back(r);
        if q.responder_idle {
            self.replies_cv.notify_all();
        }
    }

    pub(super) fn apply(&self, rx: &mut FrameReader<FdSource>, h: Header) -> Result<(), Gone> {
        match h.kind {
            Kind::Message => self.apply_message(rx, h.len as usize),
            Kind::Write => {
                match self.find_local(h.offset, h.len, Access::WRITE) {
                    Ok(Target::Device(m, at)) => self.write_device(rx, &h, &*m, at)?,
                    Ok(Target::Host(view)) => {
                        // SAFETY: the view keeps the window mapped for its `len` bytes
                        // while the read writes there; the peer writing a window at any
                        // time is the window contract, and no reference to the bytes is
                        // created.
                        let r =
                            unsafe { rx.read_payload_raw(view.as_ptr(), view.len(), Kind::Write) };
                        r.map_err(Gone::from_read)?
                    }
                    Err(code) => {
                        rx.skip_payload(h.len, Kind::Write)
                            .map_err(Gone::from_read)?;
                        self.reply(Reply::Fault(Header::fault(
                            h.seq,
                            code,
                            h.offset,
                            h.len,
                            Access::WRITE,
                        )));
                    }
                }
                if h.flags & FLAG_ACK != 0 {
                    self.reply(Reply::Ack(h.seq));
                }
                Ok(())
            }
            Kind::ReadRequest => {
                let r = match self.find_local(h.offset, h.len, Access::READ) {
                    Ok(Target::Host(view)) => Reply::Data { id: h.seq, view },
                    Ok(Target::Device(memory, at)) => Reply::DeviceData {
                        id: h.seq,
                        memory,
                        at,
                        len: h.len as usize,
                    },
                    Err(code) => {
                        Reply::Fault(Header::fault(h.seq, code, h.offset, h.len, Access::READ))
                    }
                };
                self.reply(r);
                Ok(())
            }
            Kind::ReadData => self.apply_read_data(rx, &h),
            Kind::Signal => {
                match self.find_local(h.offset, 8, Access::WRITE) {
                    Ok(Target::Host(word)) => {
                        // Cannot fail: the decoder checked the alignment and windows are
                        // page aligned.
                        let _ = word.store_u64(0, h.value);
                    }
                    Ok(Target::Device(m, at)) => {
                        if m.write(at, &h.value.to_le_bytes()).is_err() {
                            self.reply(Reply::Fault(Header::fault(
                                h.seq,
                                FaultCode::Device,
                                h.offset,
                                8,
                                Access::WRITE,
                            )));
                        }
                    }
                    Err(code) => self.reply(Reply::Fault(Header::fault(
                        h.seq,
                        code,
                        h.offset,
                        8,
                        Access::WRITE,
                    ))),
                }
                if h.flags & FLAG_ACK != 0 {
                    self.reply(Reply::Ack(h.seq));
                }
                Ok(())
            }
            Kind::FenceRequest => {
                self.reply(Reply::Ack(h.seq));
                Ok(())
            }
            Kind::Ack => self.apply_ack(h.seq),
            Kind::Register => {
                let desc = WindowDesc {
                    offset: h.offset,
                    len: h.len,
                    access: Access::from_bits(h.aux as u8).unwrap_or(Access::NONE),
                };
                write(&self.peer_windows).insert(desc, ()).map_err(|_| {
                    Gone::protocol(format!(
                        "the peer announced window {desc}, which overlaps one it announced before"
                    ))
                })
            }
            Kind::Unregister => match write(&self.peer_windows).remove(h.offset) {
                Some(_) => Ok(()),
                None => Err(Gone::protocol(format!(
                    "the peer withdrew a window at {:#x}, which it never announced",
                    h.offset
                ))),
            },
            Kind::Fault => self.apply_fault(&h),
            Kind::Credit => {
                let credit = self.credit.fetch_add(h.len as i64, Ordering::AcqRel) + h.len as i64;
                if credit > self.peer_window as i64 {
                    return Err(Gone::protocol(format!(
                        "the peer returned {} bytes of message credit, more than was spent",
                        h.len
                    )));
                }
                let st = lock(&self.state);
                self.notify_state(&st);
                Ok(())
            }
        }
    }

    fn apply_message(&self, rx: &mut FrameReader<FdSource>, len: usize) -> Result<(), Gone> {
        let cost = credit_cost(len);
        let mut buf = {
            let mut ib = lock(&self.inbox);
            // Checked before anything is allocated for the message.
            if !may_send(ib.in_flight, cost, self.window) {
                return Err(Gone::protocol(format!(
                    "the peer sent a message of {len} bytes without credit for it \
                     ({} of the {}-byte window in flight)",
                    ib.in_flight, self.window
                )));
            }
            ib.in_flight += cost;
            take_spare(&mut ib.spare, len)
        };
        rx.read_payload_vec(&mut buf, len, Kind::Message)
            .map_err(Gone::from_read)?;
        let mut ib = lock(&self.inbox);
        ib.queue.push_back(buf);
        if ib.receivers > 0 {
            self.inbox_cv.notify_one();
        }
        Ok(())
    }

    fn apply_read_data(&self, rx: &mut FrameReader<FdSource>, h: &Header) -> Result<(), Gone> {
        let (dst, len) = {
            let mut st = lock(&self.state);
            match st.reads.get_mut(&h.seq) {
                Some(p) if matches!(p.state, ReadState::Waiting) && p.len as u64 == h.len => {
                    p.state = ReadState::Filling;
                    (p.dst, p.len)
                }
                _ => {
                    return Err(Gone::protocol(format!(
                        "read-data frame for read {} ({} bytes) matches no pending read",
                        h.seq, h.len
                    )))
                }
            }
        };
        // SAFETY: the entry is `Filling`: its owner (`TcpEndpoint::read_into`) does not
        // return, and so keeps `dst` valid for `len` bytes, until this thread sets `Done`
        // or `Failed` below, after its last write.
        let r = unsafe { rx.read_payload_raw(dst.0, len, Kind::ReadData) };
        let failed = r.err().map(Gone::from_read);
        if let Some(g) = &failed {
            // Set before the owner wakes, so that it reports this cause.
            self.set_gone(g.clone());
        }
        let mut st = lock(&self.state);
        if let Some(p) = st.reads.get_mut(&h.seq) {
            p.state = match failed {
                None => ReadState::Done,
                Some(_) => ReadState::Failed(None),
            };
        }
        self.notify_state(&st);
        drop(st);
        match failed {
            None => Ok(()),
            Some(g) => Err(g),
        }
    }

    fn apply_ack(&self, seq: u64) -> Result<(), Gone> {
        let last = self.last_seq.load(Ordering::Acquire);
        if seq > last {
            return Err(Gone::protocol(format!(
                "ack for sequence number {seq}, but only {last} were sent"
            )));
        }
        let mut st = lock(&self.state);
        st.acked = st.acked.max(seq);
        while st.signals.front().is_some_and(|s| s.seq <= seq) {
            if let Some(s) = st.signals.pop_front() {
                // Cannot fail: checked for bounds and alignment by `fence_signal`.
                let _ = s.word.store_u64(0, s.value);
            }
        }
        self.notify_state(&st);
        Ok(())
    }

    fn apply_fault(&self, h: &Header) -> Result<(), Gone> {
        let last = self.last_seq.load(Ordering::Acquire);
        if h.seq == 0 || h.seq > last {
            return Err(Gone::protocol(format!(
                "fault report for sequence number {}, but only {last} were sent",
                h.seq
            )));
        }
        let f = Fault {
            seq: h.seq,
            code: FaultCode::from_u32(h.aux).unwrap_or(FaultCode::OutOfWindow),
            offset: h.offset,
            len: h.len,
            need: Access::from_bits(h.value as u8).unwrap_or(Access::NONE),
        };
        let mut st = lock(&self.state);
        match st.reads.get_mut(&h.seq) {
            Some(p) if matches!(p.state, ReadState::Waiting) => {
                p.state = ReadState::Failed(Some(f));
            }
            Some(_) => {
                return Err(Gone::protocol(format!(
                    "fault report for read {}, which already completed",
                    h.seq
                )))
            }
            None => st.faults.push_back(f),
        }
        self.notify_state(&st);
        Ok(())
    }
}

/// The smallest spare buffer that holds `len` bytes, the most recently returned among
/// equals (its cache lines are the most likely to be warm), or an empty vector (the
/// reader then allocates exactly `len`).
fn take_spare(spare: &mut Vec<Vec<u8>>, len: usize) -> Vec<u8> {
    let best = spare
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, v)| v.capacity() >= len)
        .min_by_key(|(_, v)| v.capacity())
        .map(|(i, _)| i);
    match best {
        Some(i) => spare.remove(i),
        None => Vec::new(),
    }
}
