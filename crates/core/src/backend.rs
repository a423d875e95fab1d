//! The seam between the facade and the backends: what a backend registers (its scheme and
//! its listen/connect functions) and how options reach it.
//!
//! Each backend crate exports one [`Backend`] value and implements [`BackendOptions`] for
//! its own options type; the facade (`accio`) keeps the list of registered backends and
//! picks one by the address's scheme. Upper layers pass options through [`Options`], a set
//! of at most one options value per backend, so they configure a backend (ring sizes, spin
//! time, credit windows) without depending on its crate, and options for a backend the
//! address does not select are ignored: one `Options` serves a program that may connect
//! over any backend.
//!
//! ```
//! use accio_core::{BackendOptions, Options};
//!
//! #[derive(Clone, Debug, Default, PartialEq)]
//! struct LoopOptions { depth: usize }
//! impl BackendOptions for LoopOptions { const SCHEME: &'static str = "loop"; }
//!
//! let opts = Options::new().with(LoopOptions { depth: 4 });
//! assert_eq!(opts.get::<LoopOptions>(), Some(&LoopOptions { depth: 4 }));
//! assert_eq!(opts.schemes().collect::<Vec<_>>(), ["loop"]);
//! ```

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::addr::Addr;
use crate::endpoint::{Endpoint, Listener};
use crate::error::Result;

/// A backend's own options type, found in an [`Options`] set by its scheme.
pub trait BackendOptions: Any + Clone + fmt::Debug + Send + Sync {
    /// The scheme of the backend these options configure (`shm`, `tcp`).
    const SCHEME: &'static str;
}

/// Options for `listen`/`connect`, for any backend: at most one value of each backend's
/// [`BackendOptions`] type. A backend without a value in the set uses its defaults (with
/// its environment overrides, e.g. `ACCIO_SHM_*`). Cheap to clone.
#[derive(Clone, Default)]
pub struct Options {
    sets: Vec<(&'static str, Arc<dyn Any + Send + Sync>)>,
}

impl Options {
    /// No options: every backend's defaults.
    pub fn new() -> Options {
        Options::default()
    }

    /// Sets the options of backend `T::SCHEME`, replacing any given before.
    pub fn with<T: BackendOptions>(mut self, opts: T) -> Options {
        self.sets.retain(|(s, _)| *s != T::SCHEME);
        self.sets.push((T::SCHEME, Arc::new(opts)));
        self
    }

    /// The options of backend `T::SCHEME`, if set.
    pub fn get<T: BackendOptions>(&self) -> Option<&T> {
        self.sets
            .iter()
            .find(|(s, _)| *s == T::SCHEME)
            .and_then(|(_, v)| v.downcast_ref::<T>())
    }

    /// The schemes that have options in this set, in the order set.
    pub fn schemes(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.sets.iter().map(|(s, _)| *s)
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("schemes", &self.schemes().collect::<Vec<_>>())
            .finish()
    }
}

/// Binds a listener at an address of the backend's scheme.
pub type ListenFn = fn(&Addr, &Options) -> Result<Box<dyn Listener>>;
/// Connects to a listener at an address of the backend's scheme, within a timeout.
pub type ConnectFn = fn(&Addr, Duration, &Options) -> Result<Box<dyn Endpoint>>;

/// One backend as the facade knows it: registered once, chosen by the address's scheme.
#[derive(Clone, Copy)]
pub struct Backend {
    /// The address scheme it serves (`shm` for `shm://NAME`).
    pub scheme: &'static str,
    /// One line on what it is, for `--help` texts and errors.
    pub summary: &'static str,
    /// Its listen function.
    pub listen: ListenFn,
    /// Its connect function.
    pub connect: ConnectFn,
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backend")
            .field("scheme", &self.scheme)
            .field("summary", &self.summary)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct A(u32);
    impl BackendOptions for A {
        const SCHEME: &'static str = "a";
    }
    #[derive(Clone, Debug, PartialEq)]
    struct B(&'static str);
    impl BackendOptions for B {
        const SCHEME: &'static str = "b";
    }

    #[test]
    fn each_backend_finds_its_own_options_and_a_later_value_replaces() {
        let o = Options::new().with(A(1)).with(B("x")).with(A(2));
        assert_eq!(o.get::<A>(), Some(&A(2)));
        assert_eq!(o.get::<B>(), Some(&B("x")));
        assert_eq!(o.schemes().collect::<Vec<_>>(), ["b", "a"]);
        assert_eq!(Options::new().get::<A>(), None);
        assert_eq!(format!("{o:?}"), "Options { schemes: [\"b\", \"a\"] }");
    }
}
