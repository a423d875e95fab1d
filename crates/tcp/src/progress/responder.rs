//! The responder: sends what the reader owes the peer, so that the reader never blocks
//! writing.

use std::sync::Arc;

use super::{lock, wait, Reply, Shared};
use crate::frame::Header;

/// Flags the responder as done when its thread exits, also by a panic.
struct ResponderExit<'a>(&'a Shared);

impl Drop for ResponderExit<'_> {
    fn drop(&mut self) {
        let mut st = lock(&self.0.state);
        st.responder_done = true;
        self.0.state_cv.notify_all();
    }
}

/// The responder thread: sends queued replies until the connection ends, or until the
/// endpoint closes and the queue is empty.
pub(crate) fn responder_main(shared: Arc<Shared>) {
    let _exit = ResponderExit(&shared);
    loop {
        let job = {
            let mut q = lock(&shared.replies);
            loop {
                if shared.gone.get().is_some() {
                    break None;
                }
                if q.credit > 0 {
                    break Some(Reply::Credit(std::mem::take(&mut q.credit)));
                }
                if let Some(j) = q.queue.pop_front() {
                    if q.reader_blocked {
                        shared.replies_cv.notify_all();
                    }
                    break Some(j);
                }
                if q.stop {
                    break None;
                }
                q.responder_idle = true;
                q = wait(&shared.replies_cv, q);
                q.responder_idle = false;
            }
        };
        let Some(job) = job else { break };
        let w = lock(&shared.writer);
        if shared.gone.get().is_some() {
            break;
        }
        let r = match &job {
            Reply::Ack(seq) => shared.send_header(&w, &Header::ack(*seq), "sending an ack"),
            Reply::Fault(h) => shared.send_header(&w, h, "reporting a refused rma"),
            Reply::Credit(n) => {
                shared.send_header(&w, &Header::credit(*n), "returning message credit")
            }
            Reply::DeviceData {
                id,
                memory,
                at,
                len,
            } => shared.send_device_data(&w, *id, &**memory, *at, *len),
            // SAFETY: the view keeps the window mapped for `view.len()` bytes.
            Reply::Data { id, view } => unsafe {
                shared.send_locked(
                    &w,
                    &Header::read_data(*id, view.len()),
                    view.as_ptr(),
                    view.len(),
                    "sending read data",
                )
            },
        };
        if r.is_err() {
            break;
        }
    }
}
