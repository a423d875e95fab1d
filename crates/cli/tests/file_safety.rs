//! Issue 29 through the `accio` binary: `recover` refuses a file being written, naming the
//! writer's pid, and leaves it as it was; `inspect`/`verify` say who writes it instead of
//! suggesting `recover`; a cut inside padding recovers to a file `verify` accepts; crafted
//! files are read in bounded memory (the child's peak resident set, from `wait4`).

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use accio_bench::merge::service::container::{
    BlockKind, ContainerOptions, ContainerWriter, FileHeader, Trailer, VERSION,
};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("accio-cli-safety-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn accio(args: &[&str], file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_accio"))
        .args(args)
        .arg(file)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn recover_refuses_a_file_being_written_and_inspect_and_verify_name_its_writer() {
    let d = dir("live");
    let path = d.join("out.accio");
    let w = ContainerWriter::create(&path, ContainerOptions::default()).unwrap();
    for seq in 0..10 {
        w.append(1, seq, BlockKind::Raw, &vec![seq as u8; 5000])
            .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let pid = std::process::id();
    let o = accio(&["recover"], &path);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            "is being written by pid {pid}, which holds its lock: refusing to recover it"
        )),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let o = accio(&["verify"], &path);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("being written by pid {pid}")),
        "{}",
        text(&o)
    );
    assert!(!text(&o).contains("accio recover"), "{}", text(&o));
    let o = accio(&["inspect"], &path);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("being written by pid {pid}"))
            && text(&o).contains("10 block(s)"),
        "{}",
        text(&o)
    );
    assert!(!text(&o).contains("accio recover"), "{}", text(&o));
    w.finish(false).unwrap();
    let o = accio(&["verify"], &path);
    assert!(o.status.success(), "{}", text(&o));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_cut_inside_padding_recovers_to_a_file_verify_accepts() {
    // The example: the first block holds 15610 bytes at 0x1000 (align 4096); a
    // cut at 23902 falls in its padding. `recover` said 0, `verify` then 1.
    let d = dir("padding");
    let path = d.join("f.accio");
    let w = ContainerWriter::create(&path, ContainerOptions::default()).unwrap();
    let e = w.append(0, 0, BlockKind::Raw, &[7u8; 15610]).unwrap();
    assert_eq!(e.offset, 0x1000);
    w.append(0, 1, BlockKind::Raw, &[8u8; 3000]).unwrap();
    w.finish(false).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(23902)
        .unwrap();
    let o = accio(&["recover"], &path);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("recovered 1 block(s)"), "{}", text(&o));
    let o = accio(&["verify"], &path);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("whole: 1 producer(s), 1 block(s)"),
        "{}",
        text(&o)
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// Runs `accio ARGS FILE` and returns its exit code and peak resident set in bytes.
fn run_measured(args: &[&str], file: &Path) -> (i32, u64) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_accio"));
    cmd.args(args);
    if !file.as_os_str().is_empty() {
        cmd.arg(file);
    }
    // Reaped by `wait4` below, which also gives its resource use.
    #[allow(clippy::zombie_processes)]
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child and writes into the two locals above; the child is
    // not waited for again (`Child` does not wait when dropped).
    let r = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut ru) };
    assert_eq!(r, child.id() as libc::pid_t);
    assert!(libc::WIFEXITED(status), "accio {args:?} died: {status:#x}");
    (libc::WEXITSTATUS(status), ru.ru_maxrss as u64 * 1024)
}

#[test]
fn crafted_files_are_read_in_bounded_memory() {
    let d = dir("crafted");
    let header = |align| {
        FileHeader {
            flags: 0,
            version: VERSION,
            align,
            created_unix_ns: 0,
        }
        .encode()
    };
    // A sparse 4 GiB file whose trailer claims a 3 GiB index (3.15 GB resident before).
    let sparse = d.join("sparse.accio");
    let f = std::fs::File::create(&sparse).unwrap();
    f.write_all_at(&header(4096), 0).unwrap();
    let size = 4u64 << 30;
    let index_offset = 1u64 << 30;
    let index_len = size - 64 - index_offset;
    let t = Trailer {
        index_offset,
        index_len,
        blocks: (index_len - 32) / 48,
        index_crc: 0,
        flags: 1,
    };
    f.write_all_at(&t.encode(), size - 64).unwrap();
    drop(f);
    // 64 MiB with a block magic in every 64-byte slot (58 s to verify before), written a
    // MiB at a time: a child's peak resident set counts this process's, inherited at the
    // spawn, so this process stays small.
    let magic = d.join("magic.accio");
    let f = std::fs::File::create(&magic).unwrap();
    f.write_all_at(&header(64), 0).unwrap();
    let mut mib = Vec::with_capacity(1 << 20);
    while mib.len() < 1 << 20 {
        mib.extend_from_slice(b"ACCIOBLK");
        mib.resize(mib.len() + 56, 0x5A);
    }
    for i in 0..64u64 {
        f.write_all_at(&mib, 64 + (i << 20)).unwrap();
    }
    drop(f);
    let (_, baseline) = run_measured(&["--version"], Path::new(""));
    eprintln!("accio --version: peak RSS {baseline} bytes (with what the spawn inherits)");
    for file in [&sparse, &magic] {
        for (cmd, code) in [("inspect", 0), ("verify", 1), ("recover", 0)] {
            let (rc, rss) = run_measured(&[cmd], file);
            eprintln!(
                "accio {cmd} {}: exit {rc}, peak RSS {rss} bytes",
                file.display()
            );
            assert_eq!(rc, code, "accio {cmd} {}", file.display());
            assert!(
                rss < 100 << 20,
                "accio {cmd} {}: {rss} bytes resident",
                file.display()
            );
        }
        // Recovered: an index of no blocks, which verify accepts.
        assert_eq!(run_measured(&["verify"], file).0, 0, "{}", file.display());
    }
    std::fs::remove_dir_all(&d).unwrap();
}
