//! The producer side: a producer process's command and configuration, its main, and what
//! producer threads share with it (the source buffer, the CPU priority).

use std::ffi::OsString;
use std::io::{BufRead, Write as _};
use std::path::PathBuf;
use std::time::Duration;

use accio_merge::{Producer, ProducerOptions};

/// How to start a producer process: a program and the arguments before the producer's own
/// (`accio __merge-producer`).
#[derive(Clone, Debug)]
pub struct ProducerCommand {
    /// The executable.
    pub program: PathBuf,
    /// Leading arguments (the hidden subcommand).
    pub args: Vec<OsString>,
}

/// What one producer process does (its command-line arguments, see [`ProducerConfig::to_args`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerConfig {
    /// The merger's address.
    pub addr: String,
    /// Producer id.
    pub id: u32,
    /// Blocks to write.
    pub buffers: u64,
    /// Bytes per block.
    pub size: usize,
    /// CPU priority (`nice`) to run at.
    pub nice: i32,
    /// The GPU whose memory the blocks come from ([`Producer::write_device`]); `None`:
    /// host memory.
    pub device: Option<u32>,
}

impl ProducerConfig {
    /// The arguments `accio __merge-producer` parses back.
    pub fn to_args(&self) -> Vec<String> {
        vec![
            "--addr".into(),
            self.addr.clone(),
            "--id".into(),
            self.id.to_string(),
            "--buffers".into(),
            self.buffers.to_string(),
            "--size".into(),
            self.size.to_string(),
            "--nice".into(),
            self.nice.to_string(),
        ]
        .into_iter()
        .chain(
            self.device
                .iter()
                .flat_map(|g| ["--device".into(), g.to_string()]),
        )
        .collect()
    }
}

/// An S-byte buffer with a pattern, every page touched (fresh memory is slow to touch):
/// the bytes of every block producer `seed` writes.
pub(super) fn source_buffer(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Sets the calling thread's CPU priority (on Linux `setpriority` on a thread id applies to
/// that thread only); 0 leaves it alone.
pub(super) fn set_nice(nice: i32) -> std::io::Result<()> {
    if nice == 0 {
        return Ok(());
    }
    // SAFETY: plain system calls with no pointers.
    let rc = unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice)
    };
    if rc == 0 {
        Ok(())
    } else {
        let e = std::io::Error::last_os_error();
        Err(std::io::Error::new(
            e.kind(),
            format!("setting nice {nice}: {e}"),
        ))
    }
}

/// The body of a producer process: connect, prepare the buffer (in GPU memory with
/// [`ProducerConfig::device`], and the pinned staging), say `ready`, wait for a line on
/// stdin, write the blocks, finish, say `done BLOCKS BYTES INSERTED` (the blocks written
/// by inserting pages).
pub fn producer_main(cfg: &ProducerConfig) -> accio_merge::Result<()> {
    let mut p = Producer::connect_with(
        &cfg.addr,
        ProducerOptions {
            id: Some(cfg.id),
            timeout: Duration::from_secs(60),
        },
    )?;
    let src = source_buffer(cfg.size, cfg.id as u8);
    let device = match cfg.device {
        Some(gpu) => {
            let b = accio_device::DeviceBuffer::alloc(gpu, cfg.size)?;
            b.write(0, &src)?;
            p.prepare_device(gpu)?;
            Some(b)
        }
        None => None,
    };
    set_nice(cfg.nice).map_err(|e| accio_merge::MergeError::Config(e.to_string()))?;
    println!("ready");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    for _ in 0..cfg.buffers {
        match &device {
            Some(b) => p.write_device(&b.range())?,
            None => p.write_block(&src)?,
        };
    }
    let s = p.finish()?;
    println!("done {} {} {}", s.blocks, s.bytes, s.inserted_blocks);
    Ok(())
}
