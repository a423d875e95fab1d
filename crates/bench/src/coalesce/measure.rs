//! The measurements: the large-message ceiling, direct RMA, the cache, and messages plain
//! or aggregated.

use std::time::Instant;

use accio::{Access, RmaFlags};
use accio_coalesce::{AggConfig, Aggregator, CacheConfig, CacheStats, CommCache};

use accio_results::model::{Figure, Unit};
use accio_results::size::format_size;

use super::pair::{Cmd, Pair, COUNTED};
use super::{
    metric, Error, GeometrySpec, Options, Placement, Transfer, BENCH, LARGE_MSG, RECEIVER_ID,
    SENDER_ID, WAIT,
};

/// Payloads of items: 64 different item-sized patterns, used in turn.
struct Payloads {
    bytes: Vec<u8>,
    item: usize,
}

impl Payloads {
    fn new(item: usize) -> Payloads {
        Payloads {
            bytes: (0..item * 64).map(|i| (i * 31 + i / 7) as u8).collect(),
            item,
        }
    }

    #[inline]
    fn get(&self, i: usize) -> &[u8] {
        let at = (i & 63) * self.item;
        &self.bytes[at..at + self.item]
    }
}

/// One cache measurement's setting.
#[derive(Clone, Copy, Debug)]
pub(super) struct CacheRun {
    pub(super) geometry: GeometrySpec,
    pub(super) placement: Placement,
    pub(super) transfer: Transfer,
    pub(super) checked: bool,
}

/// The samples of one figure and what the transfers looked like.
pub(super) struct Outcome {
    /// Million items per second, one per measured sample.
    pub(super) mops: Vec<f64>,
    /// Items per sample (for `direct`: the median sample's).
    pub(super) items: usize,
    /// Transfers per sample.
    pub(super) transfers: f64,
    /// Bytes handed to the endpoint per transfer.
    pub(super) avg_transfer: f64,
    /// Items per line sent.
    pub(super) dedup: f64,
}

/// The backend's large-message RMA bandwidth: `write_to` of [`LARGE_MSG`] from a
/// registered, pre-faulted local window over the whole peer window, back to back. The
/// first pass (dropped) also faults in the peer window.
pub(super) fn large_msg_bw(pair: &Pair, opts: &Options) -> Result<Figure, Error> {
    let ep = pair.ep();
    let local = ep
        .register(LARGE_MSG, Access::READ)
        .map_err(|e| pair.ep_err("registering the ceiling's source window", e))?;
    local
        .fill(0x5a)
        .map_err(|e| pair.ep_err("filling the ceiling's source window", e))?;
    let chunks = (pair.remote.len / LARGE_MSG as u64).max(1);
    // At least 32 MiB per sample, so one sample is not one transfer.
    let per_sample = chunks.max(16);
    // Cheap (a few ms each) and every ratio of the backend is read against its median:
    // at least 9 samples, so one disturbed sample cannot move it.
    let reps = opts.repetitions.max(9);
    let mut samples = Vec::new();
    for rep in 0..=reps {
        let t = Instant::now();
        for i in 0..per_sample {
            let to = pair.remote.offset + (i % chunks) * LARGE_MSG as u64;
            ep.write_to(local.offset(), LARGE_MSG, to, RmaFlags::ASYNC)
                .map_err(|e| pair.ep_err("large-message write_to", e))?;
        }
        let mark = ep.fence_mark().map_err(|e| pair.ep_err("fence_mark", e))?;
        ep.fence_wait(mark)
            .map_err(|e| pair.ep_err("fence_wait", e))?;
        let dt = t.elapsed().as_secs_f64();
        if rep > 0 {
            samples.push((per_sample * LARGE_MSG as u64) as f64 / dt / 1e9);
        }
    }
    let _ = ep.unregister(local.offset());
    Ok(
        Figure::new(BENCH, metric::LARGE_MSG_BW, Unit::GBps, samples)
            .expect("measured samples")
            .param("backend", pair.backend.as_str())
            .param("size", LARGE_MSG as u64)
            .method(format!(
                "write_to of {} from a registered local window over the {} peer window, \
                 back to back, closed by fence_mark + fence_wait",
                format_size(LARGE_MSG as u64),
                format_size(pair.remote.len)
            )),
    )
}

/// One `vwrite_to` per item, in pattern order, until the items or the time budget run out.
pub(super) fn direct_rma(
    pair: &Pair,
    opts: &Options,
    offs: &[u64],
    item: usize,
) -> Result<Outcome, Error> {
    let ep = pair.ep();
    let payloads = Payloads::new(item);
    let mut mops = Vec::new();
    let mut counts = Vec::new();
    for rep in 0..=opts.repetitions {
        let t = Instant::now();
        let mut done = 0usize;
        for chunk in offs.chunks(1024) {
            for &off in chunk {
                ep.vwrite_to(
                    payloads.get(done),
                    pair.remote.offset + off,
                    RmaFlags::ASYNC,
                )
                .map_err(|e| pair.ep_err(format!("vwrite_to of a {item}-byte item"), e))?;
                done += 1;
            }
            if t.elapsed() >= opts.direct_budget {
                break;
            }
        }
        let mark = ep.fence_mark().map_err(|e| pair.ep_err("fence_mark", e))?;
        ep.fence_wait(mark)
            .map_err(|e| pair.ep_err("fence_wait", e))?;
        let dt = t.elapsed().as_secs_f64();
        if rep > 0 {
            mops.push(done as f64 / dt / 1e6);
            counts.push(done);
        }
    }
    counts.sort_unstable();
    let items = counts[counts.len() / 2];
    Ok(Outcome {
        mops,
        items,
        transfers: items as f64,
        avg_transfer: item as f64,
        dedup: 1.0,
    })
}

/// Every item through a [`CommCache`], flushed after every pass.
pub(super) fn cached(
    pair: &Pair,
    opts: &Options,
    run: CacheRun,
    offs: &[u64],
    pass: usize,
    item: usize,
) -> Result<Outcome, Error> {
    let geometry = run.geometry.for_item(item).expect("validated options");
    let mut config = CacheConfig::new()
        .geometry(geometry)
        .placement(run.placement)
        .transfer(run.transfer)
        .flush_timeout(Some(WAIT));
    if run.checked {
        config = config.checked(SENDER_ID, RECEIVER_ID);
    }
    pair.tell(Cmd::Apply(run.checked.then_some(RECEIVER_ID)));
    let what = format!("cache {} {} {}", run.geometry, run.placement, run.transfer);
    let mut cache = CommCache::new(pair.ep(), pair.remote, config)
        .map_err(|e| pair.co_err(format!("creating {what}"), e))?;
    let payloads = Payloads::new(item);
    let mut mops = Vec::new();
    let mut total = CacheStats::default();
    for rep in 0..=opts.repetitions {
        let before = cache.stats();
        let t = Instant::now();
        let mut epoch = 0;
        for p in offs.chunks(pass) {
            cache
                .insert_all(p.iter().enumerate().map(|(i, &off)| (off, payloads.get(i))))
                .map_err(|e| pair.co_err(format!("{what}: insert"), e))?;
            epoch = cache
                .flush_async()
                .map_err(|e| pair.co_err(format!("{what}: flush"), e))?;
        }
        cache
            .wait(epoch)
            .map_err(|e| pair.co_err(format!("{what}: waiting for flush {epoch}"), e))?;
        let dt = t.elapsed().as_secs_f64();
        if rep > 0 {
            mops.push(offs.len() as f64 / dt / 1e6);
            let s = cache.stats();
            total.lines_in += s.lines_in - before.lines_in;
            total.lines_sent += s.lines_sent - before.lines_sent;
            total.transfers += s.transfers - before.transfers;
            total.wire_bytes += s.wire_bytes - before.wire_bytes;
        }
    }
    cache
        .close()
        .map_err(|e| pair.co_err(format!("{what}: close"), e))?;
    let reps = opts.repetitions as f64;
    Ok(Outcome {
        mops,
        items: offs.len(),
        transfers: total.transfers as f64 / reps,
        avg_transfer: total.avg_transfer_bytes(),
        dedup: if total.lines_sent == 0 {
            0.0
        } else {
            total.lines_in as f64 / total.lines_sent as f64
        },
    })
}

/// Messages of `item` bytes to the receiver, each its own `send` or through an
/// [`Aggregator`] with its default batches; the receiver acknowledges once it has counted
/// them all.
pub(super) fn messages(
    pair: &Pair,
    opts: &Options,
    item: usize,
    aggregated: bool,
) -> Result<Figure, Error> {
    let ep = pair.ep();
    let payloads = Payloads::new(item);
    // Plain sends cost a system call each on tcp: fewer of them keep a sample short.
    let n = if aggregated {
        opts.items_per_sample
    } else {
        (opts.items_per_sample / 8).max(1)
    };
    let cfg = AggConfig::new(SENDER_ID);
    let mut agg =
        Aggregator::new(vec![ep], cfg).map_err(|e| pair.co_err("creating the aggregator", e))?;
    let mut ack = Vec::new();
    let mut mops = Vec::new();
    for rep in 0..=opts.repetitions {
        pair.tell(Cmd::Count {
            messages: n as u64,
            aggregated,
            fresh: rep == 0,
        });
        let t = Instant::now();
        for i in 0..n {
            if aggregated {
                agg.send(0, payloads.get(i))
                    .map_err(|e| pair.co_err("aggregator send", e))?;
            } else {
                ep.send(payloads.get(i))
                    .map_err(|e| pair.ep_err("send", e))?;
            }
        }
        if aggregated {
            agg.flush()
                .map_err(|e| pair.co_err("aggregator flush", e))?;
        }
        ep.recv_timeout(&mut ack, Some(WAIT))
            .map_err(|e| pair.ep_err("waiting for the receiver's count", e))?;
        let dt = t.elapsed().as_secs_f64();
        if ack != COUNTED {
            return Err(Error::Receiver {
                backend: pair.backend.clone(),
                reason: format!(
                    "expected the count acknowledgement, got {} bytes",
                    ack.len()
                ),
            });
        }
        if rep > 0 {
            mops.push(n as f64 / dt / 1e6);
        }
    }
    let s = agg.stats();
    let mode = if aggregated { "aggregate" } else { "send" };
    let mut f = Figure::new(BENCH, metric::MSG_RATE, Unit::MopsPerSec, mops)
        .expect("measured samples")
        .param("backend", pair.backend.as_str())
        .param("item", item as u64)
        .param("mode", mode)
        .param("items", n as u64);
    if aggregated && s.batches > 0 {
        f = f.param("avg_transfer_bytes", s.wire_bytes / s.batches);
        f = f.method(
            "Aggregator::send per message into 64 KiB per-destination batches, one flush per \
             sample; ends when the receiver counted every message",
        );
    } else {
        f = f
            .param("avg_transfer_bytes", item as u64)
            .method("one Endpoint::send per message; ends when the receiver counted every message");
    }
    Ok(f)
}
