//! # accio-testkit
//!
//! One conformance suite for the endpoint contract of `accio-core`
//! (`crates/core/src/endpoint.rs`), run unchanged against every backend, as UCX's gtest
//! runs `test_p2p_rma.cc` on every transport. Each test is a `pub fn(&Backend)`; the
//! [`conformance_suite!`] macro turns the whole list into `#[test]`s for one backend, so a
//! backend's test file is one line:
//!
//! ```ignore
//! accio_testkit::conformance_suite!(shm, accio_testkit::Backend::shm());
//! ```
//!
//! What the suite checks, by module:
//!
//! - [`messages`]: order and integrity of messages of 0 B..16 MiB in both directions at
//!   once, of one 1 GiB message, and with several sending and receiving threads on one
//!   endpoint; `try_send`/`try_recv`/`recv_timeout` statuses and limits; a closed peer.
//! - [`rma`]: `write_to`/`read_from`/`vwrite_to`/`vread_from` at odd offsets and lengths,
//!   sync and async, transfers of 64 MiB, fences (a mark never issued is refused) and
//!   `fence_signal` ordering.
//! - [`rejection`]: out-of-window and wrong-access RMA fail with precise errors and leave
//!   every byte of the target untouched.
//! - [`caps`]: advertised capabilities are honest (`map_remote`, `cpu_free_rma`).
//! - [`registration`]: page-aligned, guarded, zeroed, never-reused windows; views of the
//!   caller's memory registered on one endpoint after another.
//! - [`connection`]: address and connection errors, 64 concurrent endpoints.
//! - [`gone`]: after the peer closed, or its process exited, calls that need not wait
//!   (`send`, `try_send`, `write_to`, `fence_signal`) fail with `PeerGone` too.
//! - [`process`]: endpoints in two OS processes (the `accio-conformance-peer` binary), and
//!   peer death by `SIGKILL`: the survivor fails with `PeerGone` within one second and no
//!   shared-memory object outlives the two sides.
//!
//! Every test runs its body under [`harness::guarded`]: a hung backend fails the test after
//! a deadline instead of hanging CI, and tests that inspect process-wide state (leaked
//! mappings) run alone.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use accio::{Endpoint, Listener};

pub mod caps;
pub mod connection;
pub mod device;
pub mod gone;
pub mod harness;
pub mod messages;
pub mod pattern;
pub mod peer;
pub mod process;
pub mod registration;
pub mod rejection;
pub mod rma;

pub use caps::{capabilities_are_honest, cpu_free_rma_needs_no_peer_cpu, map_remote};
pub use connection::{
    accept_times_out, bad_addresses_are_rejected, connect_to_nobody_waits_for_its_timeout,
    connect_waits_for_a_late_listener, listen_twice_is_addr_in_use, local_and_peer_addrs,
    sixty_four_concurrent_endpoints,
};
pub use device::{
    device_copy_failure, device_window_rejection, device_window_rma, DeviceMaker, HostBackedDevice,
};
pub use gone::{calls_after_peer_close_fail, calls_after_peer_exit_fail};
pub use messages::{
    concurrent_senders_and_receivers, message_order_and_integrity,
    messages_sent_before_a_close_arrive, nonblocking_calls, one_gib_message,
    peer_close_is_peer_gone, recv_into_lands_in_the_callers_buffer,
};
pub use process::{
    cpu_free_rma_with_stopped_peer_process, peer_death_during_recv, peer_death_during_rma,
    peer_death_during_send, peer_death_seen_by_polling, two_processes_echo, two_processes_rma,
};
pub use registration::{registered_views, registration_layout, unregister_rules};
pub use rejection::{access_is_enforced, fence_signal_arguments, out_of_window_is_rejected};
pub use rma::{
    big_rma, fence_ordering, fence_signal_local_and_remote, fence_wait_of_an_unissued_mark,
    rma_content,
};

/// How long a test waits for a connection to be set up.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A backend under test: its name and how to make a fresh address to listen on.
#[derive(Clone, Debug)]
pub struct Backend {
    name: &'static str,
    fresh_addr: fn() -> String,
    peer_exe: Option<PathBuf>,
}

static SHM_COUNTER: AtomicU64 = AtomicU64::new(0);

fn fresh_shm_addr() -> String {
    format!(
        "shm://accio-test-{}-{}",
        std::process::id(),
        SHM_COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn fresh_tcp_addr() -> String {
    "tcp://127.0.0.1:0".to_string()
}

impl Backend {
    /// The shared-memory backend; addresses `shm://accio-test-<pid>-<counter>`.
    pub fn shm() -> Backend {
        Backend::new("shm", fresh_shm_addr)
    }

    /// The TCP backend on loopback; addresses `tcp://127.0.0.1:0` (ephemeral port).
    pub fn tcp() -> Backend {
        Backend::new("tcp", fresh_tcp_addr)
    }

    /// A backend named `name` (the scheme of its addresses) whose listen addresses come
    /// from `fresh_addr`; each call must return an address no one else listens on.
    pub fn new(name: &'static str, fresh_addr: fn() -> String) -> Backend {
        Backend {
            name,
            fresh_addr,
            peer_exe: None,
        }
    }

    /// Sets the path of the `accio-conformance-peer` binary (the [`conformance_suite!`]
    /// macro passes Cargo's `CARGO_BIN_EXE_accio-conformance-peer`). Default: looked up
    /// next to the running test executable.
    pub fn with_peer_exe(mut self, path: impl Into<PathBuf>) -> Backend {
        self.peer_exe = Some(path.into());
        self
    }

    /// The backend's name, which is also its address scheme.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// A fresh address to listen on.
    pub fn fresh_addr(&self) -> String {
        (self.fresh_addr)()
    }

    /// Listens on a fresh address; returns the listener and the address to connect to
    /// (the bound one, with the real port for tcp).
    pub fn listen(&self) -> (Box<dyn Listener>, String) {
        let addr = self.fresh_addr();
        let listener =
            accio::listen(&addr).unwrap_or_else(|e| panic!("listen on {addr} failed: {e}"));
        let bound = listener.local_addr().to_string();
        (listener, bound)
    }

    /// A connected pair `(accepted, connected)`; the listener is dropped once the pair
    /// exists, which must not affect either endpoint.
    pub fn pair(&self) -> (Box<dyn Endpoint>, Box<dyn Endpoint>) {
        let (listener, addr) = self.listen();
        let acceptor = std::thread::Builder::new()
            .name("accept".into())
            .spawn(move || listener.accept(Some(CONNECT_TIMEOUT)))
            .expect("spawn acceptor thread");
        let connected = accio::connect(&addr, CONNECT_TIMEOUT)
            .unwrap_or_else(|e| panic!("connect to {addr} failed: {e}"));
        let accepted = acceptor
            .join()
            .expect("acceptor thread panicked")
            .unwrap_or_else(|e| panic!("accept on {addr} failed: {e}"));
        (accepted, connected)
    }

    /// The `accio-conformance-peer` binary.
    pub fn peer_exe(&self) -> PathBuf {
        if let Some(p) = &self.peer_exe {
            return p.clone();
        }
        // Integration tests live in target/<profile>/deps/; binaries one level up.
        let exe = std::env::current_exe().expect("current_exe");
        let mut dir = exe.parent().map(PathBuf::from).unwrap_or_default();
        for _ in 0..2 {
            let candidate = dir.join("accio-conformance-peer");
            if candidate.exists() {
                return candidate;
            }
            dir.pop();
        }
        panic!(
            "cannot find the accio-conformance-peer binary next to {}; build it with \
             `cargo build -p accio-testkit --bins` or pass it with Backend::with_peer_exe",
            exe.display()
        )
    }
}

/// A suite test: its name and its function.
pub type SuiteTest = (&'static str, fn(&Backend));

/// Calls `$callback!($($args)* ; test, test, ...)` with the name of every suite test: the
/// one list that both [`conformance_suite!`] and [`TESTS`] are made from.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_suite_list {
    ($callback:path; $($args:tt)*) => {
        $callback!($($args)*;
            message_order_and_integrity,
            recv_into_lands_in_the_callers_buffer,
            concurrent_senders_and_receivers,
            nonblocking_calls,
            one_gib_message,
            peer_close_is_peer_gone,
            messages_sent_before_a_close_arrive,
            calls_after_peer_close_fail,
            calls_after_peer_exit_fail,
            rma_content,
            big_rma,
            fence_ordering,
            fence_wait_of_an_unissued_mark,
            fence_signal_local_and_remote,
            out_of_window_is_rejected,
            access_is_enforced,
            fence_signal_arguments,
            capabilities_are_honest,
            map_remote,
            cpu_free_rma_needs_no_peer_cpu,
            registration_layout,
            unregister_rules,
            registered_views,
            local_and_peer_addrs,
            connect_to_nobody_waits_for_its_timeout,
            connect_waits_for_a_late_listener,
            accept_times_out,
            listen_twice_is_addr_in_use,
            bad_addresses_are_rejected,
            sixty_four_concurrent_endpoints,
            two_processes_echo,
            two_processes_rma,
            cpu_free_rma_with_stopped_peer_process,
            peer_death_during_recv,
            peer_death_during_send,
            peer_death_during_rma,
            peer_death_seen_by_polling,
        );
    };
}

/// Expands the suite list into `#[test]` functions for one backend.
#[doc(hidden)]
#[macro_export]
macro_rules! __suite_tests {
    ($backend:ident; $($test:ident),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                $crate::$test(&$backend());
            }
        )*
    };
}

macro_rules! suite_table {
    (; $($test:ident),* $(,)?) => {
        /// Every suite test, in the order the suite lists them (for drivers other than
        /// `cargo test`, e.g. a command that checks a backend on a new machine).
        pub const TESTS: &[SuiteTest] = &[$((stringify!($test), $test as fn(&Backend))),*];
    };
}

__with_suite_list!(suite_table;);

/// Defines module `$module` with one `#[test]` per suite test, run against `$backend` (an
/// expression of type [`Backend`]).
///
/// ```ignore
/// accio_testkit::conformance_suite!(tcp, accio_testkit::Backend::tcp());
/// ```
#[macro_export]
macro_rules! conformance_suite {
    ($module:ident, $backend:expr) => {
        mod $module {
            fn backend() -> $crate::Backend {
                let backend: $crate::Backend = $backend;
                match option_env!("CARGO_BIN_EXE_accio-conformance-peer") {
                    Some(exe) => backend.with_peer_exe(exe),
                    None => backend,
                }
            }
            $crate::__with_suite_list!($crate::__suite_tests; backend);
        }
    };
}
