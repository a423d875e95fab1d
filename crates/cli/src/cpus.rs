//! The CPUs a process may run on, and pinning to one of them (`accio run --bind-to`,
//! `accio demo laplace --bind`).

/// The CPUs the calling thread may run on, ascending.
pub fn allowed() -> std::io::Result<Vec<usize>> {
    // SAFETY: `cpu_set_t` is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a cpu_set_t of the size passed; 0 is the calling thread.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: CPU_ISSET reads the set filled above, below CPU_SETSIZE.
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Pins the calling thread (and what it starts or execs) to `cpu`. Async-signal-safe: one
/// system call on a set built on the stack, so a forked child may call it before exec.
pub fn pin(cpu: usize) -> std::io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: as in `allowed`.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes bit `cpu` (< CPU_SETSIZE) of `one`.
    unsafe { libc::CPU_SET(cpu, &mut one) };
    // SAFETY: a valid cpu_set_t for the calling thread.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&one), &one) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The one CPU a `Cpus_allowed_list` names (`"3"`), or `None` for a list of several
/// (`"0-3"`, `"0,2"`).
pub fn single(list: &str) -> Option<usize> {
    list.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_of_one_cpu_is_that_cpu() {
        assert_eq!(single("3"), Some(3));
        assert_eq!(single(" 12\n"), Some(12));
        assert_eq!(single("0-3"), None);
        assert_eq!(single("0,2"), None);
        assert_eq!(single(""), None);
    }

    #[test]
    fn a_thread_pinned_runs_on_its_cpu_only() {
        std::thread::spawn(|| {
            let cpus = allowed().unwrap();
            assert!(!cpus.is_empty());
            let last = *cpus.last().unwrap();
            pin(last).unwrap();
            assert_eq!(allowed().unwrap(), vec![last]);
            // SAFETY: no arguments.
            assert_eq!(unsafe { libc::sched_getcpu() } as usize, last);
            assert!(pin(libc::CPU_SETSIZE as usize).is_err());
        })
        .join()
        .unwrap();
    }
}
