//! A real SIGINT stops `bench fs` between records and its test files are removed. In its own
//! test binary (its own process): the handler sets a process-wide flag, which would stop
//! any other bench running in the same process.

use std::path::Path;

use accio_bench::cancel;
use accio_bench::fs::{FsBench, FsError};
use accio_results::event::Event;
use accio_results::model::Recorder;

#[test]
fn sigint_interrupts_the_run_and_removes_test_files() {
    let parent = if Path::new("/dev/shm").is_dir() {
        Path::new("/dev/shm").to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = parent.join(format!("accio-fs-sigint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _guard = cancel::SigintGuard::install().unwrap();
    let bench = FsBench::new([&dir])
        .threads(&[1, 2])
        .file_size(4 << 20)
        .record_size(1 << 20)
        .repeats(1000)
        .ceilings(false);
    let mut rec = Recorder::new(None).unwrap();
    let mut raised = false;
    let mut repeats_done = 0;
    let out = bench.run(&mut rec, &mut |e| {
        if let Event::Advanced(_) = e {
            repeats_done += 1;
        }
        if !raised && repeats_done == 3 {
            raised = true;
            // SAFETY: raise(3) has no preconditions; the handler only sets an atomic flag.
            assert_eq!(unsafe { libc::raise(libc::SIGINT) }, 0);
        }
    });
    assert!(raised, "the run ended before the signal was sent");
    assert!(cancel::interrupted());
    assert!(matches!(out, Err(FsError::Interrupted)), "{out:?}");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(left.is_empty(), "left behind: {left:?}");
}
