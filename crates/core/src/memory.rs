//! Registered memory: the mapped [`Region`] behind a window, byte views of it, and the
//! [`Window`] / [`RemoteMap`] handles the endpoint API hands out.
//!
//! Window memory is shared with a peer (another thread, another process, or a remote
//! progress engine) that may read or write it at any time. The safe accessors here copy
//! bytes in and out and use atomics for 8-byte signal words; handing out plain slices is
//! `unsafe` because Rust's aliasing rules cannot see the peer.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use memmap2::{Mmap, MmapMut, MmapOptions};

use crate::copy::copy_bytes;
use crate::error::{Error, Result, WindowDesc};
use crate::types::Access;

/// Page size assumed for window alignment. Windows start on page boundaries so that copies
/// between windows do not suffer 4 KiB aliasing (see `MACHINE_NOTES.md`).
pub const PAGE: usize = 4096;

/// A transparent huge page: regions from this size up ask for them
/// ([`Region::shareable`]).
const HUGE_PAGE: usize = 2 << 20;

/// A page-aligned mapping that backs one window. Private anonymous memory for backends whose
/// peer is reached through a progress engine, a shared file mapping (memfd) for `shm`.
///
/// A region is writable unless it maps a peer's read-only window
/// ([`Region::shared_read_only`]): then the kernel refuses stores into it, and the safe
/// accessors of [`MemView`] refuse them with an error before they fault.
pub struct Region {
    // Keeps the mapping alive; never borrowed mutably after construction.
    _map: Mapping,
    ptr: *mut u8,
    len: usize,
    writable: bool,
    /// The memory object of a [`Region::shareable`] region, which a backend may hand to a
    /// peer process.
    file: Option<File>,
}

// SAFETY: `Region` is a plain mapping; all access goes through raw pointers whose
// concurrent use is the documented contract of window memory (see module docs).
unsafe impl Send for Region {}
// SAFETY: as above; `Region` itself has no interior state besides the mapping.
unsafe impl Sync for Region {}

/// What keeps a region's mapping alive.
enum Mapping {
    ReadWrite(#[allow(dead_code)] MmapMut),
    ReadOnly(#[allow(dead_code)] Mmap),
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ro = if self.writable { "" } else { ", read-only" };
        write!(f, "Region({:p}, {} bytes{ro})", self.ptr, self.len)
    }
}

impl Region {
    /// Maps `len` bytes of zeroed private memory, pre-faulted so that the first transfer does
    /// not pay for page faults.
    pub fn anonymous(len: usize) -> Result<Region> {
        let map = MmapOptions::new()
            .len(len.max(1))
            .populate()
            .map_anon()
            .map_err(|e| Error::io("mmap", format!("{len} bytes of anonymous memory"), e))?;
        Ok(Region::from_map(map, len))
    }

    /// Maps `len` bytes of zeroed private memory for computing on, not for sharing: from
    /// 2 MiB up it asks for transparent huge pages before any page is faulted in (where
    /// `/sys/kernel/mm/transparent_hugepage/enabled` is `madvise` or `always`), then faults
    /// it in. See [`huge_pages`] for when this memory gets them and shareable memory not.
    pub fn anonymous_huge(len: usize) -> Result<Region> {
        let map = MmapOptions::new()
            .len(len.max(1))
            .map_anon()
            .map_err(|e| Error::io("mmap", format!("{len} bytes of anonymous memory"), e))?;
        let mut region = Region::from_map(map, len);
        if len >= HUGE_PAGE {
            region.ask_for_huge_pages(true);
        } else {
            region.populate_by_writes();
        }
        Ok(region)
    }

    /// Maps `len` bytes of zeroed memory that other processes can map too: a memfd named
    /// `name` (seen only in `/proc/*/maps`) whose size is sealed, so no one can shrink it
    /// under a mapping. Pre-faulted when `populate` is set. Backends that share memory with
    /// their peer (`shm`) register such regions; [`Region::file`] gives the memory object.
    ///
    /// The memory object is readable and writable by its owner only (mode 0600): a peer
    /// of another user that was handed a read-only descriptor of it cannot reopen it for
    /// writing through `/proc`.
    pub fn shareable(len: usize, name: &str, populate: bool) -> Result<Region> {
        Region::shareable_sealed(len, name, populate, false)
    }

    /// [`Region::shareable`] memory that no process, this one included, can ever map
    /// writable again once this call returned (`F_SEAL_FUTURE_WRITE`): the mapping made
    /// here stays writable, every descriptor of it handed out maps read-only whatever its
    /// open mode. Backs windows a peer may only read.
    pub fn shareable_read_only_for_peers(len: usize, name: &str, populate: bool) -> Result<Region> {
        Region::shareable_sealed(len, name, populate, true)
    }

    fn shareable_sealed(
        len: usize,
        name: &str,
        populate: bool,
        seal_writes: bool,
    ) -> Result<Region> {
        let what = || format!("{len} bytes of shared memory ({name})");
        let file = sealed_memfd(name, len).map_err(|e| Error::io("memfd_create", what(), e))?;
        let huge = len >= HUGE_PAGE;
        let mut region = Region::shared(&file, 0, len, populate && !huge, name)?;
        if huge {
            region.ask_for_huge_pages(populate);
        }
        let mut seals = libc::F_SEAL_SEAL;
        if seal_writes {
            seals |= libc::F_SEAL_FUTURE_WRITE;
        }
        add_seals(&file, seals).map_err(|e| Error::io("fcntl(F_ADD_SEALS)", what(), e))?;
        region.file = Some(file);
        Ok(region)
    }

    /// Maps `len` bytes of `file` from byte `offset` (a multiple of [`PAGE`]) shared
    /// (`MAP_SHARED`), pre-faulted when `populate` is set.
    pub fn shared(
        file: &File,
        offset: u64,
        len: usize,
        populate: bool,
        what: &str,
    ) -> Result<Region> {
        let mut opts = MmapOptions::new();
        opts.offset(offset).len(len.max(1));
        if populate {
            opts.populate();
        }
        // SAFETY: the file is a size-sealed memfd (or similar) owned by accio; nobody
        // truncates it while mapped, which is the requirement memmap2 states for file
        // mappings.
        let map =
            unsafe { opts.map_mut(file) }.map_err(|e| Error::io("mmap", what.to_string(), e))?;
        Ok(Region::from_map(map, len))
    }

    /// Maps `len` bytes of `file` from byte `offset` (a multiple of [`PAGE`]) shared and
    /// read-only (`PROT_READ`): a peer's window this process may only read. The kernel
    /// faults any store; [`MemView`]'s writing accessors refuse it with an
    /// [`Error::InvalidArgument`] instead.
    pub fn shared_read_only(file: &File, offset: u64, len: usize, what: &str) -> Result<Region> {
        let mut opts = MmapOptions::new();
        opts.offset(offset).len(len.max(1));
        // SAFETY: as in `shared`: a size-sealed memory object nobody truncates while mapped.
        let map = unsafe { opts.map(file) }.map_err(|e| Error::io("mmap", what.to_string(), e))?;
        let ptr = map.as_ptr() as *mut u8;
        Ok(Region {
            _map: Mapping::ReadOnly(map),
            ptr,
            len,
            writable: false,
            file: None,
        })
    }

    /// Asks for transparent huge pages for the whole region before any page is faulted in,
    /// then faults them in when `populate`. Shared memory gets them where the system allows
    /// it (`/sys/kernel/mm/transparent_hugepage/shmem_enabled` at `advise` or `always`;
    /// elsewhere the advice changes nothing). A sweep over a 64 MiB grid array of 4 KiB
    /// pages misses the TLB on every page: NumPy's private arrays get huge pages by default
    /// and swept 4.4% faster than an accio grid's shared array of 4 KiB pages here.
    fn ask_for_huge_pages(&mut self, populate: bool) {
        // SAFETY: the range is this region's own mapping; the advice changes no contents.
        // An error (a kernel without THP) leaves the mapping as it was.
        unsafe { libc::madvise(self.ptr.cast(), self.len, libc::MADV_HUGEPAGE) };
        if !populate {
            return;
        }
        // SAFETY: as above; populating writes no data, it only faults the pages in.
        let rc = unsafe { libc::madvise(self.ptr.cast(), self.len, libc::MADV_POPULATE_WRITE) };
        if rc != 0 {
            // Kernels before 5.14.
            self.populate_by_writes();
        }
    }

    /// Faults each page of a fresh writable mapping in by a write of the zero it holds.
    fn populate_by_writes(&mut self) {
        for off in (0..self.len).step_by(PAGE) {
            // SAFETY: `off` is inside the writable mapping, which holds zeroes (fresh).
            unsafe { self.ptr.add(off).write_volatile(0) };
        }
    }

    fn from_map(mut map: MmapMut, len: usize) -> Region {
        let ptr = map.as_mut_ptr();
        Region {
            _map: Mapping::ReadWrite(map),
            ptr,
            len,
            writable: true,
            file: None,
        }
    }

    /// False for a mapping of a peer's read-only window ([`Region::shared_read_only`]).
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// The memory object of a [`Region::shareable`] region; `None` for other regions.
    pub fn file(&self) -> Option<&File> {
        self.file.as_ref()
    }

    /// Start of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A byte range of a [`Region`], kept alive by an `Arc`.
#[derive(Clone, Debug)]
pub struct MemView {
    region: Arc<Region>,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the view only holds a pointer into an `Arc<Region>` it keeps alive.
unsafe impl Send for MemView {}
// SAFETY: shared access to window memory is the documented contract (see module docs).
unsafe impl Sync for MemView {}

impl MemView {
    /// A view of the whole region.
    pub fn whole(region: Arc<Region>) -> MemView {
        let (ptr, len) = (region.as_ptr(), region.len());
        MemView { region, ptr, len }
    }

    /// A view of `len` bytes at `start` of the region; `None` if out of range.
    pub fn sub(region: Arc<Region>, start: usize, len: usize) -> Option<MemView> {
        let end = start.checked_add(len)?;
        if end > region.len() {
            return None;
        }
        // SAFETY: start + len <= region.len(), so the pointer stays inside the mapping.
        let ptr = unsafe { region.as_ptr().add(start) };
        Some(MemView { region, ptr, len })
    }

    /// The region this view belongs to.
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// Where the view starts in its region, in bytes.
    pub fn start(&self) -> usize {
        self.ptr as usize - self.region.as_ptr() as usize
    }

    /// First byte of the view.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty view.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, op: &'static str, at: usize, n: usize) -> Result<()> {
        match at.checked_add(n) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::invalid(
                op,
                format!("{at:#x} + {n} is outside the {}-byte view", self.len),
            )),
        }
    }

    /// Refuses a store into a read-only mapping ([`Region::shared_read_only`]), which
    /// would fault.
    fn check_writable(&self, op: &'static str, at: usize, n: usize) -> Result<()> {
        if self.region.writable {
            return Ok(());
        }
        Err(Error::invalid(
            op,
            format!(
                "{at:#x} + {n} of a {}-byte view of memory mapped read-only (a peer window \
                 without write access)",
                self.len
            ),
        ))
    }

    /// Copies `src` into the view at byte `at`.
    pub fn write_at(&self, at: usize, src: &[u8]) -> Result<()> {
        self.check("write_at", at, src.len())?;
        self.check_writable("write_at", at, src.len())?;
        // SAFETY: bounds checked above; `src` is a distinct Rust slice, so the ranges do not
        // overlap unless the caller obtained `src` from this very view through an unsafe
        // accessor, which those accessors forbid.
        unsafe { copy_bytes(self.ptr.add(at), src.as_ptr(), src.len()) };
        Ok(())
    }

    /// Copies bytes at `at` out of the view into `dst`.
    pub fn read_at(&self, at: usize, dst: &mut [u8]) -> Result<()> {
        self.check("read_at", at, dst.len())?;
        // SAFETY: bounds checked above; `dst` is an exclusive Rust slice outside the view.
        unsafe { copy_bytes(dst.as_mut_ptr(), self.ptr.add(at), dst.len()) };
        Ok(())
    }

    /// Sets every byte of the view to `byte`.
    pub fn fill(&self, byte: u8) -> Result<()> {
        self.check_writable("fill", 0, self.len)?;
        // SAFETY: the whole view is mapped, writable memory of `len` bytes.
        unsafe { std::ptr::write_bytes(self.ptr, byte, self.len) };
        Ok(())
    }

    fn atomic_u64(&self, op: &'static str, at: usize) -> Result<&AtomicU64> {
        self.check(op, at, 8)?;
        if !(self.ptr as usize + at).is_multiple_of(8) {
            return Err(Error::invalid(
                op,
                format!("offset {at:#x} is not 8-byte aligned"),
            ));
        }
        // SAFETY: in bounds and 8-byte aligned; the mapping lives as long as `self`, and
        // mixed atomic/non-atomic access by a peer is the documented contract of windows.
        Ok(unsafe { AtomicU64::from_ptr(self.ptr.add(at) as *mut u64) })
    }

    /// Loads the 8-byte word at `at` with acquire ordering (reads a `fence_signal` value).
    pub fn load_u64(&self, at: usize) -> Result<u64> {
        Ok(self.atomic_u64("load_u64", at)?.load(Ordering::Acquire))
    }

    /// Stores the 8-byte word at `at` with release ordering.
    pub fn store_u64(&self, at: usize, value: u64) -> Result<()> {
        self.check_writable("store_u64", at, 8)?;
        self.atomic_u64("store_u64", at)?
            .store(value, Ordering::Release);
        Ok(())
    }

    /// Waits until the word at `at` equals `value` (e.g. a peer's `fence_signal`): spins
    /// briefly, then sleeps in growing steps up to 1 ms. `None` waits forever.
    pub fn wait_u64(&self, at: usize, value: u64, timeout: Option<Duration>) -> Result<()> {
        let word = self.atomic_u64("wait_u64", at)?;
        let start = Instant::now();
        let mut round = 0u32;
        while word.load(Ordering::Acquire) != value {
            round += 1;
            if round < 2000 {
                std::hint::spin_loop();
                continue;
            }
            if let Some(t) = timeout {
                if start.elapsed() >= t {
                    return Err(Error::Timeout {
                        op: "wait_u64",
                        resource: format!("window word {at:#x} (waiting for {value})"),
                        after: t,
                    });
                }
            }
            let step = (round - 2000).min(1000);
            std::thread::sleep(Duration::from_micros(u64::from(step)));
        }
        Ok(())
    }

    /// The view as a slice.
    ///
    /// # Safety
    /// No one — no other thread and no peer — may write the bytes while the slice lives.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the caller guarantees the absence of concurrent writers.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The view as a mutable slice.
    ///
    /// # Safety
    /// No one — no other thread and no peer — may read or write the bytes while the slice
    /// lives, and no other slice of the same bytes may exist. The region must be writable
    /// ([`Region::is_writable`]): a store into a read-only mapping faults.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> &mut [u8] {
        // SAFETY: the caller guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// A registered window of the local endpoint: memory the peer can reach with RMA.
///
/// Dereferences to [`MemView`] for local access. Cloning is cheap and shares the memory; the
/// memory stays mapped while any clone (or an in-flight transfer) holds it, even after
/// `unregister`.
#[derive(Clone, Debug)]
pub struct Window {
    view: MemView,
    offset: u64,
    access: Access,
}

impl Window {
    /// Wraps a view as the window at `offset` with the peer's `access` rights.
    pub fn new(view: MemView, offset: u64, access: Access) -> Window {
        Window {
            view,
            offset,
            access,
        }
    }

    /// Offset of the window in its endpoint's registered address space.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Rights the peer has on the window.
    pub fn access(&self) -> Access {
        self.access
    }

    /// Offset, length and rights, as printed in errors.
    pub fn desc(&self) -> WindowDesc {
        WindowDesc {
            offset: self.offset,
            len: self.view.len() as u64,
            access: self.access,
        }
    }

    /// The memory view.
    pub fn view(&self) -> &MemView {
        &self.view
    }
}

impl std::ops::Deref for Window {
    type Target = MemView;
    fn deref(&self) -> &MemView {
        &self.view
    }
}

/// Direct load/store access to (part of) a peer's window, from
/// [`crate::Endpoint::map_remote`]. Keeps the mapping alive while it exists.
#[derive(Clone, Debug)]
pub struct RemoteMap {
    view: MemView,
    remote_offset: u64,
}

impl RemoteMap {
    /// Wraps a view of peer memory mapped at `remote_offset`.
    pub fn new(view: MemView, remote_offset: u64) -> RemoteMap {
        RemoteMap {
            view,
            remote_offset,
        }
    }

    /// The peer offset the mapping starts at.
    pub fn remote_offset(&self) -> u64 {
        self.remote_offset
    }
}

impl std::ops::Deref for RemoteMap {
    type Target = MemView;
    fn deref(&self) -> &MemView {
        &self.view
    }
}

/// Which memory this host backs with transparent huge pages when a mapping asks for them
/// (`MADV_HUGEPAGE`), read once from `/sys/kernel/mm/transparent_hugepage`. Debian's and
/// Ubuntu's defaults give them to private memory (`enabled` at `madvise`) and not to shared
/// memory (`shmem_enabled` at `never`), which every memfd is: there an array that a peer
/// maps is swept through 4 KiB pages, and NumPy's own arrays through 2 MiB ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HugePages {
    /// [`Region::anonymous_huge`] memory gets them.
    pub private: bool,
    /// [`Region::shareable`] memory gets them.
    pub shareable: bool,
}

/// This host's [`HugePages`] (none where the files cannot be read).
pub fn huge_pages() -> HugePages {
    static HOST: std::sync::OnceLock<HugePages> = std::sync::OnceLock::new();
    *HOST.get_or_init(|| {
        let setting = |file: &str| {
            let text =
                std::fs::read_to_string(format!("/sys/kernel/mm/transparent_hugepage/{file}"))
                    .unwrap_or_default();
            thp_setting(&text).unwrap_or("never").to_string()
        };
        HugePages {
            private: matches!(setting("enabled").as_str(), "always" | "madvise"),
            shareable: matches!(
                setting("shmem_enabled").as_str(),
                "always" | "within_size" | "advise" | "force"
            ),
        }
    })
}

/// The selected value of a sysfs choice such as `always [madvise] never`.
fn thp_setting(text: &str) -> Option<&str> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('[')?.strip_suffix(']'))
}

/// A new open file description of the file behind `file` (through `/proc/self/fd`),
/// read-only or readable and writable: what a process hands a peer instead of its own
/// descriptor, so that the peer gets only the rights it should (a read-only window) or
/// shares nothing with the original's state (a writer's lock).
pub fn reopen(file: &File, write: bool) -> std::io::Result<File> {
    use std::os::fd::AsRawFd;
    std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// Creates a memfd of `len` bytes named `name` whose size can never change again, so a
/// peer that maps it can never see it shrink under the mapping (which would turn the next
/// access into SIGBUS). Its mode is 0600, so that only its owner may reopen it through
/// `/proc/PID/fd` (a peer of another user given a read-only descriptor cannot reopen it
/// for writing). The caller adds `F_SEAL_SEAL` once it has mapped it.
fn sealed_memfd(name: &str, len: usize) -> std::io::Result<File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let cname = std::ffi::CString::new(name).map_err(std::io::Error::other)?;
    // SAFETY: `cname` is a valid NUL-terminated string; flags are valid memfd flags.
    let fd =
        unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by memfd_create and is owned by nobody else.
    let file = unsafe { File::from_raw_fd(fd) };
    // SAFETY: fchmod on an fd we own.
    if unsafe { libc::fchmod(file.as_raw_fd(), 0o600) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    file.set_len(len as u64)?;
    add_seals(&file, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW)?;
    Ok(file)
}

fn add_seals(file: &File, seals: libc::c_int) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl on an fd the caller owns with a valid command and argument.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `ShmemPmdMapped` kB of the mapping of this process that starts at `ptr`.
    fn pmd_mapped_kb(ptr: *mut u8) -> u64 {
        smaps_kb(ptr, "ShmemPmdMapped:")
    }

    /// The kB of `field` (e.g. `AnonHugePages:`) of the mapping that starts at `ptr`.
    fn smaps_kb(ptr: *mut u8, field: &str) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let start = format!("{:x}-", ptr as usize);
        let block = smaps
            .split_inclusive('\n')
            .skip_while(|l| !l.starts_with(&start))
            .skip(1)
            .take_while(|l| !l.contains('-') || l.contains(':'))
            .collect::<String>();
        block
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    #[test]
    fn a_large_shareable_region_is_zeroed_and_on_huge_pages_where_the_system_allows() {
        let len = 8 << 20;
        let r = Region::shareable(len, "accio-test-huge", true).unwrap();
        // SAFETY: this test is the region's only user.
        let bytes = unsafe { std::slice::from_raw_parts_mut(r.as_ptr(), len) };
        assert!(bytes.iter().all(|&b| b == 0));
        bytes[len - 1] = 7;
        assert_eq!(bytes[len - 1], 7);
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
            .unwrap_or_default();
        let kb = pmd_mapped_kb(r.as_ptr());
        if mode.contains("[advise]") || mode.contains("[always]") {
            assert!(
                kb >= 2048,
                "shmem_enabled {mode:?}, yet {kb} kB on huge pages"
            );
        } else {
            eprintln!("huge pages not checked: shmem_enabled is {}", mode.trim());
        }
    }

    #[test]
    fn a_large_anonymous_huge_region_is_zeroed_and_on_huge_pages_where_the_system_allows() {
        let len = 8 << 20;
        let r = Region::anonymous_huge(len).unwrap();
        // SAFETY: this test is the region's only user.
        let bytes = unsafe { std::slice::from_raw_parts_mut(r.as_ptr(), len) };
        assert!(bytes.iter().all(|&b| b == 0));
        bytes[len - 1] = 7;
        let kb = smaps_kb(r.as_ptr(), "AnonHugePages:");
        if huge_pages().private {
            // The kernel may place the mapping off a 2 MiB boundary: all but its ends.
            assert!(
                kb >= 4096,
                "private huge pages allowed, yet {kb} kB on them"
            );
        } else {
            eprintln!("huge pages not checked: this host gives private memory none");
        }
        let small = Region::anonymous_huge(100).unwrap();
        // SAFETY: as above, 100 bytes.
        assert!(unsafe { std::slice::from_raw_parts(small.as_ptr(), 100) }
            .iter()
            .all(|&b| b == 0));
    }

    #[test]
    fn the_selected_value_of_a_sysfs_choice_is_read() {
        assert_eq!(thp_setting("always [madvise] never\n"), Some("madvise"));
        assert_eq!(
            thp_setting("always within_size advise [never] deny force"),
            Some("never")
        );
        assert_eq!(thp_setting(""), None);
        assert_eq!(thp_setting("[always"), None);
    }
}
