//! The `/proc` probes: this process's peak RSS and the merger thread's scheduler counters.

/// Resets this process's peak RSS (`VmHWM`) to its current RSS.
pub(super) fn reset_peak_rss() {
    // Best effort: without it the peak covers the whole process lifetime (an overestimate).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The merger progress thread's scheduler counters, `/proc/self/task/TID/schedstat`:
/// nanoseconds on a CPU and nanoseconds runnable but waiting for one.
pub(super) fn merger_sched() -> Option<(u64, u64)> {
    for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let dir = entry.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != "accio-merge" {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("schedstat")).ok()?;
        let mut v = stat.split_whitespace().map(|x| x.parse::<u64>().ok());
        return Some((v.next()??, v.next()??));
    }
    None
}

/// This process's peak RSS in bytes (`VmHWM`), 0 where unreadable.
pub(super) fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}
