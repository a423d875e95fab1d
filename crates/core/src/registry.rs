//! Bookkeeping of a registered address space: where the next window goes, and which window
//! (if any) covers an RMA range with the needed rights.
//!
//! Backends keep one [`WindowTable`] for their own windows and, where the peer's table is not
//! directly readable (tcp), a mirror of the peer's, so that a bad RMA fails at the caller
//! with a precise error before any byte moves.

use std::collections::BTreeMap;

use crate::error::{Error, Result, Side, WindowDesc};
use crate::memory::PAGE;
use crate::types::Access;

/// First offset handed out. Offset 0 is never valid, which catches uninitialized offsets.
pub const FIRST_OFFSET: u64 = 1 << 20;

/// Hands out window offsets: page aligned, increasing, never reused, with an unmapped guard
/// page between windows so an overrun of one window can never land in the next.
#[derive(Debug)]
pub struct OffsetAllocator {
    next: u64,
}

impl Default for OffsetAllocator {
    fn default() -> Self {
        OffsetAllocator { next: FIRST_OFFSET }
    }
}

impl OffsetAllocator {
    /// Reserves `len` bytes and returns the window's offset.
    pub fn allocate(&mut self, len: usize) -> u64 {
        let off = self.next;
        let pages = (len as u64).div_ceil(PAGE as u64).max(1);
        self.next += (pages + 1) * PAGE as u64;
        off
    }
}

/// Registered windows of one address space, keyed by offset.
#[derive(Debug)]
pub struct WindowTable<T> {
    windows: BTreeMap<u64, (WindowDesc, T)>,
}

impl<T> Default for WindowTable<T> {
    fn default() -> Self {
        WindowTable {
            windows: BTreeMap::new(),
        }
    }
}

impl<T> WindowTable<T> {
    /// Adds a window. Returns an error if it overlaps an existing one.
    pub fn insert(&mut self, desc: WindowDesc, value: T) -> Result<()> {
        let end = desc.offset.checked_add(desc.len).ok_or_else(|| {
            Error::invalid(
                "register",
                format!("window {desc} overflows the offset space"),
            )
        })?;
        let below = self.windows.range(..end).next_back();
        if let Some((_, (w, _))) = below {
            if w.offset + w.len > desc.offset {
                return Err(Error::invalid(
                    "register",
                    format!("window {desc} overlaps registered window {w}"),
                ));
            }
        }
        self.windows.insert(desc.offset, (desc, value));
        Ok(())
    }

    /// Removes the window that starts at `offset`.
    pub fn remove(&mut self, offset: u64) -> Option<(WindowDesc, T)> {
        self.windows.remove(&offset)
    }

    /// Number of windows.
    pub fn len(&self) -> usize {
        self.windows.len()
    }

    /// True if no window is registered.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// The window that starts at `offset`, if any: one exact lookup, for callers that
    /// remember which window they used last.
    pub fn get(&self, offset: u64) -> Option<(&WindowDesc, &T)> {
        self.windows.get(&offset).map(|(d, v)| (d, v))
    }

    /// All windows in offset order.
    pub fn iter(&self) -> impl Iterator<Item = (&WindowDesc, &T)> {
        self.windows.values().map(|(d, v)| (d, v))
    }

    /// The window covering `[offset, offset + len)` with rights `need`.
    ///
    /// Errors name `side` and `endpoint`: [`Error::OutOfWindow`] when no single window covers
    /// the range (with the nearest window below it), [`Error::AccessDenied`] when the
    /// covering window lacks `need`.
    pub fn find(
        &self,
        offset: u64,
        len: u64,
        need: Access,
        side: Side,
        endpoint: &dyn std::fmt::Display,
    ) -> Result<(&WindowDesc, &T)> {
        let nearest = self.windows.range(..=offset).next_back().map(|(_, v)| v);
        let covered = nearest.filter(|(w, _)| {
            offset
                .checked_add(len)
                .is_some_and(|end| end <= w.offset + w.len)
        });
        match covered {
            Some((w, v)) if w.access.contains(need) => Ok((w, v)),
            Some((w, _)) => Err(Error::AccessDenied {
                side,
                endpoint: endpoint.to_string(),
                window: *w,
                need,
                offset,
                len,
            }),
            None => Err(Error::OutOfWindow {
                side,
                endpoint: endpoint.to_string(),
                offset,
                len,
                nearest: nearest.map(|(w, _)| *w),
            }),
        }
    }
}

/// A window found by [`find_either`]: in its first table or in its second.
#[derive(Debug)]
pub enum EitherWindow<'a, A, B> {
    /// In the first table.
    First(&'a WindowDesc, &'a A),
    /// In the second table.
    Second(&'a WindowDesc, &'a B),
}

/// The window covering `[offset, offset + len)` with rights `need` in `first` or, failing
/// that, in `second`: two tables of one address space kept apart (host windows, which the
/// fast paths address directly, and device windows). The error is the one
/// [`WindowTable::find`] would give over both tables together: the nearest window of
/// either kind names the miss.
pub fn find_either<'a, A, B>(
    first: &'a WindowTable<A>,
    second: &'a WindowTable<B>,
    offset: u64,
    len: u64,
    need: Access,
    side: Side,
    endpoint: &dyn std::fmt::Display,
) -> Result<EitherWindow<'a, A, B>> {
    match first.find(offset, len, need, side, endpoint) {
        Ok((d, v)) => return Ok(EitherWindow::First(d, v)),
        Err(e) if second.is_empty() => return Err(e),
        Err(_) => {}
    }
    if let Ok((d, v)) = second.find(offset, len, need, side, endpoint) {
        return Ok(EitherWindow::Second(d, v));
    }
    let mut all = WindowTable::default();
    for d in first
        .iter()
        .map(|(d, _)| *d)
        .chain(second.iter().map(|(d, _)| *d))
    {
        // The tables share one offset allocator: their windows never overlap.
        let _ = all.insert(d, ());
    }
    Err(all
        .find(offset, len, need, side, endpoint)
        .expect_err("neither table covers the range"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn table() -> WindowTable<u32> {
        let mut t = WindowTable::default();
        let d = |offset, len, access| WindowDesc {
            offset,
            len,
            access,
        };
        t.insert(d(0x10000, 0x1000, Access::READ_WRITE), 1).unwrap();
        t.insert(d(0x20000, 0x2000, Access::READ), 2).unwrap();
        t
    }

    #[test]
    fn either_table_serves_and_a_miss_names_the_nearest_window_of_both() {
        let host = table();
        let mut dev: WindowTable<&str> = WindowTable::default();
        let d = WindowDesc {
            offset: 0x30000,
            len: 0x1000,
            access: Access::WRITE,
        };
        dev.insert(d, "gpu").unwrap();
        let f = find_either(&host, &dev, 0x10010, 8, Access::READ, Side::Remote, &"p").unwrap();
        assert!(matches!(f, EitherWindow::First(w, 1) if w.offset == 0x10000));
        let f = find_either(&host, &dev, 0x30010, 8, Access::WRITE, Side::Remote, &"p").unwrap();
        assert!(matches!(f, EitherWindow::Second(w, &"gpu") if w.offset == 0x30000));
        let e =
            find_either(&host, &dev, 0x30ff8, 16, Access::WRITE, Side::Remote, &"p").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OutOfWindow);
        assert!(e.to_string().contains("0x30000..0x31000"), "{e}");
        let e = find_either(&host, &dev, 0x30010, 8, Access::READ, Side::Remote, &"p").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AccessDenied);
    }

    #[test]
    fn finds_covering_window() {
        let t = table();
        let (w, v) = t
            .find(0x10800, 0x800, Access::WRITE, Side::Remote, &"p")
            .unwrap();
        assert_eq!((w.offset, *v), (0x10000, 1));
    }

    #[test]
    fn range_past_window_end_is_out_of_window_with_nearest() {
        let t = table();
        let e = t
            .find(0x10800, 0x801, Access::READ, Side::Remote, &"shm://m")
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OutOfWindow);
        assert_eq!(
            e.to_string(),
            "remote window 0x10000..0x11000 (rw) of shm://m does not cover 0x10800 + 2049"
        );
    }

    #[test]
    fn range_below_every_window_names_no_window() {
        let t = table();
        let e = t
            .find(0x100, 8, Access::READ, Side::Local, &"tcp://h:1")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "no local window of tcp://h:1 covers 0x100 + 8"
        );
    }

    #[test]
    fn wrong_right_is_access_denied() {
        let t = table();
        let e = t
            .find(0x20000, 8, Access::WRITE, Side::Remote, &"p")
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AccessDenied);
        assert!(e.to_string().contains("does not allow -w"), "{e}");
    }

    #[test]
    fn overflowing_range_is_rejected_not_wrapped() {
        let t = table();
        let e = t
            .find(0x10000, u64::MAX, Access::READ, Side::Remote, &"p")
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OutOfWindow);
    }

    #[test]
    fn overlapping_insert_is_rejected() {
        let mut t = table();
        let d = WindowDesc {
            offset: 0x10ff8,
            len: 16,
            access: Access::READ,
        };
        assert_eq!(
            t.insert(d, 3).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
    }

    #[test]
    fn allocator_leaves_guard_pages_and_never_reuses() {
        let mut a = OffsetAllocator::default();
        let x = a.allocate(1);
        let y = a.allocate(PAGE + 1);
        let z = a.allocate(0);
        assert_eq!(x, FIRST_OFFSET);
        assert_eq!(y, x + 2 * PAGE as u64);
        assert_eq!(z, y + 3 * PAGE as u64);
    }
}
