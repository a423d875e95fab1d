//! The terminal's width, in one place for every line `accio` prints: tables stack their
//! rows, warnings, progress and errors wrap at spaces, and `--help` wraps (clap), all to the
//! same number of columns. Off a terminal the width is unlimited and the output is what it
//! always was, so files, pipes and the tests that read them see whole lines.

use accio_report::text::wrap;

/// Columns of the terminal on stdout: `COLUMNS` when set (a script or a test can ask for a
/// width), else the terminal's own width (TIOCGWINSZ); `usize::MAX` when stdout is not a
/// terminal.
pub(crate) fn stdout_width() -> usize {
    width(libc::STDOUT_FILENO)
}

/// Like [`stdout_width`], for stderr: progress, warnings and errors.
pub(crate) fn stderr_width() -> usize {
    width(libc::STDERR_FILENO)
}

fn width(fd: libc::c_int) -> usize {
    if let Some(c) = std::env::var("COLUMNS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&c| c > 0)
    {
        return c;
    }
    // SAFETY: an all-zero winsize is a valid value for the kernel to overwrite.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one winsize into the valid, exclusively borrowed `ws`;
    // on a descriptor that is not a terminal it fails and writes nothing.
    let rc = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
    if rc == 0 && ws.ws_col > 0 {
        usize::from(ws.ws_col)
    } else {
        usize::MAX
    }
}

/// The width `--help` wraps to: the terminal's, at most 100 columns (clap's own cap, for
/// lines that stay readable on a wide screen); 0 (clap: no wrapping) off a terminal.
pub(crate) fn help_width() -> usize {
    match stdout_width() {
        usize::MAX => 0,
        w => w.min(100),
    }
}

/// Prints `text` on stderr as one paragraph within the terminal, its continuation lines
/// indented by `indent`.
pub(crate) fn eprint_para(text: &str, indent: &str) {
    eprint!("{}", wrap(text, stderr_width(), indent));
}

/// Prints `text` on stdout as one paragraph within the terminal, its continuation lines
/// indented by `indent`.
pub(crate) fn print_para(text: &str, indent: &str) {
    print!("{}", wrap(text, stdout_width(), indent));
}
