//! `accio inspect`, `accio verify`, `accio recover`: tools for accio container files (the
//! merging file service's output; format in `docs/FORMAT.md`).

use std::path::PathBuf;

use anyhow::Context as _;

use accio_bench::merge::service::container::{
    recover, ContainerReader, Layout, ProducerStats, Verification,
};
use accio_report::text::table;
use accio_results::size::human_bytes;

/// Arguments of `accio inspect`.
#[derive(clap::Args, Debug)]
pub struct InspectArgs {
    /// The container file.
    pub file: PathBuf,
    /// Also list every block (offset, producer, sequence, kind, length).
    #[arg(long)]
    pub blocks: bool,
    /// Follow a file being written: print each block as soon as it is committed (its
    /// checksum checked), until the writer closes the file.
    #[arg(long)]
    pub follow: bool,
    /// With --follow: give up after this many seconds without a new block [default: wait
    /// until the file is closed].
    #[arg(long, value_name = "SECS", requires = "follow")]
    pub idle_exit: Option<f64>,
}

/// Arguments of `accio verify`.
#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// The container file.
    pub file: PathBuf,
}

/// Arguments of `accio recover`.
#[derive(clap::Args, Debug)]
pub struct RecoverArgs {
    /// The container file (rewritten in place).
    pub file: PathBuf,
}

fn producer_table(producers: &std::collections::BTreeMap<u32, ProducerStats>) -> String {
    let rows: Vec<Vec<String>> = producers
        .iter()
        .map(|(p, s)| {
            vec![
                p.to_string(),
                s.blocks.to_string(),
                s.bytes.to_string(),
                format!("{}..={}", s.first_seq, s.last_seq),
            ]
        })
        .collect();
    table::render(&["producer", "blocks", "bytes", "seq"], &rows)
}

/// `accio inspect --follow`: one line per block as it is committed, then a summary.
fn run_follow(args: &InspectArgs) -> anyhow::Result<()> {
    use accio_bench::merge::service::container::Follower;
    use std::time::{Duration, Instant};
    let file = args.file.display().to_string();
    let mut f = Follower::open(&args.file, Duration::from_secs(10))
        .with_context(|| format!("following {file}"))?;
    let idle = args.idle_exit.map(Duration::from_secs_f64);
    let (mut blocks, mut bytes) = (0u64, 0u64);
    let mut last = Instant::now();
    println!("offset\tproducer\tseq\tkind\tbytes\tcrc32c");
    loop {
        match f
            .next_within(Duration::from_millis(200))
            .with_context(|| format!("following {file}"))?
        {
            Some((b, _)) => {
                println!(
                    "{:#x}\t{}\t{}\t{}\t{}\t{:08x}",
                    b.offset,
                    b.header.producer,
                    b.header.seq,
                    b.header.kind.name(),
                    b.header.len,
                    b.header.payload_crc
                );
                blocks += 1;
                bytes += b.header.len;
                last = Instant::now();
            }
            None if f.is_closed() => break,
            None => {
                if idle.is_some_and(|d| last.elapsed() >= d) {
                    println!(
                        "{file}: no new block for {:.1} s; stopped following ({blocks} block(s), {bytes} bytes so far, {} room(s) still being written)",
                        last.elapsed().as_secs_f64(),
                        f.pending()
                    );
                    return Ok(());
                }
            }
        }
    }
    for d in f.damage() {
        println!("damaged: {d}");
    }
    println!("{file}: closed; {blocks} block(s), {bytes} bytes followed");
    Ok(())
}

/// Runs `accio inspect`: what the file holds, per producer.
pub fn run_inspect(args: InspectArgs) -> anyhow::Result<()> {
    if args.follow {
        return run_follow(&args);
    }
    let r = ContainerReader::open(&args.file)
        .with_context(|| format!("inspecting {}", args.file.display()))?;
    let producers = r.producers();
    let bytes: u64 = r.blocks().iter().map(|b| b.header.len).sum();
    let state = match r.layout() {
        Layout::Indexed { clean: true, .. } => "closed".to_string(),
        Layout::Indexed { clean: false, .. } => "recovered (index rebuilt by accio recover)".into(),
        Layout::Scanned { damage, .. } if r.writer().is_some() => format!(
            "being written by {} (it holds the file's lock; not closed yet); blocks found so far by scanning{}",
            r.writer().expect("matched above"),
            if damage.is_empty() {
                String::new()
            } else {
                format!(", {} range(s) not readable yet", damage.len())
            }
        ),
        Layout::Scanned { why, damage, .. } => format!(
            "NOT closed ({why}; `accio recover` gives it an index); blocks found by scanning{}",
            if damage.is_empty() {
                String::new()
            } else {
                format!(", {} damaged range(s)", damage.len())
            }
        ),
    };
    println!(
        "{}: accio container v{}, {} ({} bytes), block alignment {}, {state}",
        args.file.display(),
        r.header().version,
        human_bytes(r.size()),
        r.size(),
        r.header().align
    );
    println!(
        "{} producer(s), {} block(s), {} payload ({bytes} bytes)",
        producers.len(),
        r.blocks().len(),
        human_bytes(bytes)
    );
    if !producers.is_empty() {
        print!("{}", producer_table(&producers));
    }
    if let Layout::Scanned { damage, .. } = r.layout() {
        // While a writer holds the file, its end is a block being written, not damage.
        let label = if r.writer().is_some() {
            "not readable yet"
        } else {
            "damaged"
        };
        for d in damage {
            println!("{label}: {d}");
        }
    }
    if args.blocks {
        let rows: Vec<Vec<String>> = r
            .blocks()
            .iter()
            .map(|b| {
                vec![
                    format!("{:#x}", b.offset),
                    b.header.producer.to_string(),
                    b.header.seq.to_string(),
                    b.header.kind.name(),
                    b.header.len.to_string(),
                    format!("{:08x}", b.header.payload_crc),
                ]
            })
            .collect();
        print!(
            "{}",
            table::render(
                &["offset", "producer", "seq", "kind", "bytes", "crc32c"],
                &rows
            )
        );
    }
    Ok(())
}

fn summary(v: &Verification) -> String {
    let holes = if v.holes.is_empty() {
        String::new()
    } else {
        // Room reserved for producers that did not fill it: not data, not damage.
        format!(
            ", {} hole(s) of {} (room a producer that died or was cut off never filled, or a file not closed)",
            v.holes.len(),
            human_bytes(v.holes.iter().map(|h| h.len).sum())
        )
    };
    format!(
        "{} producer(s), {} block(s), {} ({} bytes){holes}",
        v.producers.len(),
        v.blocks,
        human_bytes(v.bytes),
        v.bytes
    )
}

/// Runs `accio verify`: reads every block and checks checksums, the index and sequences.
/// Succeeds (exit 0) only when the file is whole.
pub fn run_verify(args: VerifyArgs) -> anyhow::Result<()> {
    let file = args.file.display().to_string();
    let v = ContainerReader::open(&args.file)
        .and_then(|r| r.verify())
        .with_context(|| format!("verifying {file}"))?;
    if v.is_whole() {
        println!(
            "{file}: whole: {}; every checksum, the index and every sequence check out",
            summary(&v)
        );
        return Ok(());
    }
    println!("{file}: {}", summary(&v));
    for p in &v.problems {
        println!("problem: {p}");
    }
    anyhow::bail!(
        "{file} is not whole: {} problem(s), the first: {}",
        v.problems.len(),
        v.problems[0]
    )
}

/// Runs `accio recover`: cuts a crashed file back to its last whole block and writes an
/// index for the blocks it holds.
pub fn run_recover(args: RecoverArgs) -> anyhow::Result<()> {
    let file = args.file.display().to_string();
    let r = recover(&args.file).with_context(|| format!("recovering {file}"))?;
    if r.already_whole {
        println!(
            "{file}: already whole ({} blocks, {} bytes); left untouched",
            r.blocks, r.bytes
        );
        return Ok(());
    }
    println!(
        "{file}: recovered {} block(s), {} ({} bytes); cut {} bytes off the end; index written and synced",
        r.blocks,
        human_bytes(r.bytes),
        r.bytes,
        r.truncated_bytes
    );
    for d in &r.damage {
        println!("damaged (kept out of the index): {d}");
    }
    Ok(())
}
