//! Authentication of tcp peers: both sides prove that they hold one shared secret before
//! any endpoint traffic, so that another user's process can neither connect to a listener
//! nor pose as one (a squatter on the port).
//!
//! ## The exchange
//!
//! ```text
//! listener  -> connector   Hello_L  (magic, version, limits, 32-byte random nonce N_L)
//! connector -> listener    Hello_C  (the same, nonce N_C) + proof_C
//! listener  -> connector   "AUTH-OK\0" + proof_L        (or "AUTH-NO\0" + zeros, then close)
//!
//! proof_R = HMAC-SHA256(secret, "accio-tcp-auth v1" 0x00 R 0x00 Hello_L Hello_C)
//!           R = "client" for the connector, "server" for the listener
//! ```
//!
//! Each side checks the other's proof in constant time (`hmac`'s `verify_slice`) and
//! refuses the connection on a mismatch, with an error naming where its own secret came
//! from (never the secret). The connector checks the listener's proof before its
//! endpoint exists, so it sends no data to a listener without the secret. Both nonces are
//! fresh per connection and the role is part of the MAC, so no proof can be replayed
//! on another connection or reflected back to its sender. The listener speaks first so
//! that its accept loop never waits on a connector mid-exchange: it reads the connector's
//! whole answer at once, after it has arrived.
//!
//! ## What it does not do
//!
//! No encryption and no per-message integrity: after the greeting, frames travel as
//! before. Whoever can read or alter the traffic on the network path (or relay a
//! connection between two endpoints that both hold the secret) is outside what this
//! protects; use a network you trust, or a tunnel, there. The cost is one round trip more
//! per connection, nothing per message.
//!
//! ## Where the secret comes from
//!
//! In order: [`crate::TcpOptions::secret`]; the environment variable [`SECRET_ENV`]
//! (`accio run` sets a fresh one for each job's ranks); the file named by [`KEY_FILE_ENV`];
//! else the per-user key file [`default_key_file`] (`$XDG_CONFIG_HOME/accio/tcp.key` or
//! `~/.config/accio/tcp.key`), created on first use with 32 random bytes (hex), mode 0600,
//! in a directory of mode 0700. Every process of one user on one node, or on nodes that
//! share the home directory, so shares a key with no setup, and no other user does. A key
//! file readable or writable by group or others, or owned by another user, is refused.

use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use accio_core::{Error, Result};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::frame::{HELLO_LEN, NONCE_LEN, PROOF_LEN};

/// The environment variable holding a shared secret (its bytes, at least
/// [`MIN_SECRET_LEN`] of them).
pub const SECRET_ENV: &str = "ACCIO_TCP_SECRET";

/// The environment variable naming a key file to read the secret from.
pub const KEY_FILE_ENV: &str = "ACCIO_TCP_KEY_FILE";

/// The shortest secret accepted, in bytes: 16 bytes leave guessing hopeless only when they
/// are random, which the generated keys are (32 random bytes).
pub const MIN_SECRET_LEN: usize = 16;

/// The longest key file read.
const MAX_KEY_FILE: u64 = 4096;

/// The label that opens every proof's transcript (domain separation).
const LABEL: &[u8] = b"accio-tcp-auth v1";

/// The hint every authentication failure ends with.
const HINT: &str = "give both sides the same secret: set ACCIO_TCP_SECRET (or \
                    ACCIO_TCP_KEY_FILE) to the same value for both, or share the per-user key \
                    file ~/.config/accio/tcp.key";

/// Which side of the greeting a proof speaks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The connecting side.
    Client,
    /// The listening side.
    Server,
}

impl Role {
    fn label(self) -> &'static [u8] {
        match self {
            Role::Client => b"client",
            Role::Server => b"server",
        }
    }
}

/// A shared secret and where it came from. Its `Debug` shows only the origin.
#[derive(Clone)]
pub struct Secret {
    key: Vec<u8>,
    origin: String,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret(<{} bytes from {}>)", self.key.len(), self.origin)
    }
}

impl Secret {
    /// A secret given by the program ([`crate::TcpOptions::secret`]).
    pub(crate) fn explicit(key: Vec<u8>) -> Secret {
        Secret {
            key,
            origin: "TcpOptions::secret".into(),
        }
    }

    /// Where this side's secret came from, for error messages.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// This side's proof for `role` over the two greetings.
    pub(crate) fn prove(
        &self,
        role: Role,
        server_hello: &[u8; HELLO_LEN],
        client_hello: &[u8; HELLO_LEN],
    ) -> [u8; PROOF_LEN] {
        proof(&self.key, role, server_hello, client_hello)
    }

    /// Checks the peer's `tag` for `role` in constant time.
    pub(crate) fn check(
        &self,
        role: Role,
        server_hello: &[u8; HELLO_LEN],
        client_hello: &[u8; HELLO_LEN],
        tag: &[u8],
    ) -> bool {
        transcript(&self.key, role, server_hello, client_hello)
            .verify_slice(tag)
            .is_ok()
    }

    /// The error for a peer whose proof did not match (`what` says who failed, how).
    pub(crate) fn refused(&self, peer: impl fmt::Display, what: &str) -> Error {
        Error::Untrusted {
            peer: peer.to_string(),
            reason: format!(
                "it failed authentication: {what} (this side's secret is from {}); {HINT}",
                self.origin
            ),
        }
    }
}

fn transcript(
    key: &[u8],
    role: Role,
    server_hello: &[u8; HELLO_LEN],
    client_hello: &[u8; HELLO_LEN],
) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
    m.update(LABEL);
    m.update(&[0]);
    m.update(role.label());
    m.update(&[0]);
    m.update(server_hello);
    m.update(client_hello);
    m
}

/// The proof a side in `role` sends: HMAC-SHA256 over the label, the role and both
/// greetings (see the [module docs](self)). Public so that a hand-driven peer (a test, a
/// reimplementation of the protocol) can speak the greeting.
pub fn proof(
    key: &[u8],
    role: Role,
    server_hello: &[u8; HELLO_LEN],
    client_hello: &[u8; HELLO_LEN],
) -> [u8; PROOF_LEN] {
    transcript(key, role, server_hello, client_hello)
        .finalize()
        .into_bytes()
        .into()
}

/// A fresh random nonce from the operating system.
pub(crate) fn nonce() -> Result<[u8; NONCE_LEN]> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::fill(&mut n).map_err(|e| {
        Error::io(
            "getrandom",
            "the tcp greeting's nonce",
            io::Error::other(e.to_string()),
        )
    })?;
    Ok(n)
}

/// This side's secret: the explicit one, else [`SECRET_ENV`], else [`KEY_FILE_ENV`],
/// else the per-user key file (created on first use).
pub(crate) fn resolve(explicit: Option<&Secret>) -> Result<Secret> {
    if let Some(s) = explicit {
        return checked(s.clone());
    }
    if let Some(v) = std::env::var_os(SECRET_ENV) {
        use std::os::unix::ffi::OsStringExt;
        return checked(Secret {
            key: v.into_vec(),
            origin: format!("the environment variable {SECRET_ENV}"),
        });
    }
    if let Some(p) = std::env::var_os(KEY_FILE_ENV) {
        let path = PathBuf::from(p);
        let key = read_key_file(&path, false)?;
        return checked(Secret {
            key,
            origin: format!("the key file {} ({KEY_FILE_ENV})", path.display()),
        });
    }
    let path = default_key_file().ok_or_else(|| {
        Error::invalid(
            "tcp authentication",
            format!(
                "no secret: neither {SECRET_ENV}, {KEY_FILE_ENV}, XDG_CONFIG_HOME nor HOME \
                 is set, so there is no per-user key file; set one of them"
            ),
        )
    })?;
    let key = read_key_file(&path, true)?;
    checked(Secret {
        key,
        origin: format!("the key file {}", path.display()),
    })
}

fn checked(s: Secret) -> Result<Secret> {
    if s.key.len() < MIN_SECRET_LEN {
        return Err(Error::invalid(
            "tcp authentication",
            format!(
                "the secret from {} has {} bytes, fewer than the {MIN_SECRET_LEN} required \
                 (generate one with `head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'`)",
                s.origin,
                s.key.len()
            ),
        ));
    }
    Ok(s)
}

/// The per-user key file: `$XDG_CONFIG_HOME/accio/tcp.key` where `XDG_CONFIG_HOME` is an
/// absolute path, else `HOME/.config/accio/tcp.key` with `HOME` from the environment or,
/// where it is not set (a service, a cron job, a scrubbed environment), from the user's
/// account (`getpwuid_r`); `None` when neither names a home directory.
pub fn default_key_file() -> Option<PathBuf> {
    let abs = |v: Option<OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    let config = abs(std::env::var_os("XDG_CONFIG_HOME")).or_else(|| {
        abs(std::env::var_os("HOME"))
            .or_else(|| abs(account_home()))
            .map(|h| h.join(".config"))
    })?;
    Some(config.join("accio").join("tcp.key"))
}

/// The home directory of this process's user in the account database.
fn account_home() -> Option<OsString> {
    use std::os::unix::ffi::OsStringExt;
    // SAFETY: an all-zero passwd is a valid out-parameter for getpwuid_r.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: valid out-pointers; `buf` outlives every use of the strings `pw` points into.
    let rc = unsafe {
        libc::getpwuid_r(
            libc::geteuid(),
            &mut pw,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() || pw.pw_dir.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded, so pw_dir is a NUL-terminated string inside `buf`.
    let dir = unsafe { std::ffi::CStr::from_ptr(pw.pw_dir) };
    Some(OsString::from_vec(dir.to_bytes().to_vec()))
}

fn key_error(op: &'static str, path: &Path, kind: io::ErrorKind, cause: String) -> Error {
    Error::io(op, path.display().to_string(), io::Error::new(kind, cause))
}

/// What reading the key file is called in errors.
fn read_op(create: bool) -> &'static str {
    if create {
        "reading the tcp key file"
    } else {
        "reading the tcp key file named by ACCIO_TCP_KEY_FILE"
    }
}

/// Reads a key file, creating it first when `create` and it does not exist. Refuses one
/// that is not a regular file of this user's, or that group or others may read or write.
fn read_key_file(path: &Path, create: bool) -> Result<Vec<u8>> {
    let op = read_op(create);
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(if create { libc::O_NOFOLLOW } else { 0 })
            .open(path)
    };
    let file = match open() {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
            create_key_file(path)?;
            open().map_err(|e| Error::io(op, path.display().to_string(), e))?
        }
        Err(e) => {
            let hint = if e.kind() == io::ErrorKind::NotFound {
                format!("{e} (set {KEY_FILE_ENV} to an existing key file, or unset it)")
            } else if e.raw_os_error() == Some(libc::ELOOP) {
                "is a symbolic link; the per-user key file must be a regular file".to_string()
            } else {
                e.to_string()
            };
            return Err(key_error(op, path, e.kind(), hint));
        }
    };
    check_owner_only(&file, path, op)?;
    let mut key = Vec::new();
    file.take(MAX_KEY_FILE + 1)
        .read_to_end(&mut key)
        .map_err(|e| Error::io(op, path.display().to_string(), e))?;
    if key.len() as u64 > MAX_KEY_FILE {
        return Err(key_error(
            op,
            path,
            io::ErrorKind::InvalidData,
            format!("is larger than {MAX_KEY_FILE} bytes: not a key file"),
        ));
    }
    // A trailing newline (an editor's, or `echo`'s) is not part of the key.
    let end = key
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    key.truncate(end);
    Ok(key)
}

/// Refuses a key file that is not a regular file owned by this user with mode 0600 or
/// stricter.
fn check_owner_only(file: &File, path: &Path, op: &'static str) -> Result<()> {
    let md = file
        .metadata()
        .map_err(|e| Error::io("fstat", path.display().to_string(), e))?;
    if !md.file_type().is_file() {
        return Err(key_error(
            op,
            path,
            io::ErrorKind::InvalidInput,
            "is not a regular file".into(),
        ));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if md.uid() != me {
        return Err(key_error(
            op,
            path,
            io::ErrorKind::PermissionDenied,
            format!(
                "is owned by uid {}, not by this user (uid {me}): another user could know \
                 the key; remove it (a fresh one is made) or point {KEY_FILE_ENV} at a key \
                 file of your own",
                md.uid()
            ),
        ));
    }
    let mode = md.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(key_error(
            op,
            path,
            io::ErrorKind::PermissionDenied,
            format!(
                "is readable or writable by group or others (mode {mode:04o}): run `chmod 600 {}`",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// Creates the per-user key file with 32 random bytes (hex), all at once: written to a
/// fresh private file beside it (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600), then linked to
/// its name, which fails if another process got there first (its key is then used), so
/// nobody ever reads a half-written key.
fn create_key_file(path: &Path) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    let derr = |op, e| Error::io(op, dir.display().to_string(), e);
    if let Some(up) = dir.parent() {
        std::fs::create_dir_all(up).map_err(|e| derr("creating the key file's directory", e))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(derr("creating the key file's directory", e)),
    }
    let md = std::fs::symlink_metadata(dir).map_err(|e| derr("stat", e))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !md.is_dir() || md.uid() != me || md.mode() & 0o022 != 0 {
        return Err(derr(
            "creating the tcp key file",
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "the directory is not a directory of this user's (uid {me}) that only it \
                     may write (owner uid {}, mode {:04o}): another user could replace the key",
                    md.uid(),
                    md.mode() & 0o7777
                ),
            ),
        ));
    }
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).map_err(|e| derr("getrandom", io::Error::other(e.to_string())))?;
    let mut hex: Vec<u8> = raw
        .iter()
        .flat_map(|b| format!("{b:02x}").into_bytes())
        .collect();
    hex.push(b'\n');
    let tmp = dir.join(format!(
        ".tcp.key.{}.{:016x}",
        std::process::id(),
        u64::from_le_bytes(raw[..8].try_into().expect("8 bytes")) ^ 0x5a5a_5a5a_5a5a_5a5a
    ));
    let terr = |op, e| Error::io(op, tmp.display().to_string(), e);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(|e| terr("creating the tcp key file", e))?;
    let written = f
        .write_all(&hex)
        .and_then(|_| f.sync_all())
        .map_err(|e| terr("writing the tcp key file", e));
    drop(f);
    let linked = written.and_then(|_| match std::fs::hard_link(&tmp, path) {
        Ok(()) => Ok(()),
        // Another process made it first: its key is the one.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io(
            "creating the tcp key file",
            path.display().to_string(),
            e,
        )),
    });
    let _ = std::fs::remove_file(&tmp);
    linked
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(fill: u8) -> [u8; HELLO_LEN] {
        [fill; HELLO_LEN]
    }

    #[test]
    fn proofs_depend_on_key_role_and_both_greetings() {
        let k = b"0123456789abcdef0123";
        let p = proof(k, Role::Client, &hello(1), &hello(2));
        assert_ne!(p, proof(k, Role::Server, &hello(1), &hello(2)));
        assert_ne!(
            p,
            proof(b"0123456789abcdef0124", Role::Client, &hello(1), &hello(2))
        );
        assert_ne!(p, proof(k, Role::Client, &hello(2), &hello(1)));
        assert_ne!(p, proof(k, Role::Client, &hello(1), &hello(3)));
        let s = Secret::explicit(k.to_vec());
        assert!(s.check(Role::Client, &hello(1), &hello(2), &p));
        assert!(!s.check(Role::Server, &hello(1), &hello(2), &p));
        assert!(!s.check(Role::Client, &hello(1), &hello(2), &p[..31]));
    }

    #[test]
    fn debug_and_errors_never_show_the_secret() {
        let s = Secret::explicit(b"very-secret-words-here".to_vec());
        let shown = format!("{s:?} {}", s.refused("tcp://127.0.0.1:1", "wrong proof"));
        assert!(!shown.contains("very-secret"), "{shown}");
        assert!(shown.contains("TcpOptions::secret"), "{shown}");
        let e = checked(Secret::explicit(b"short".to_vec())).unwrap_err();
        assert!(e.to_string().contains("5 bytes, fewer than the 16"), "{e}");
        assert!(!e.to_string().contains("short"), "{e}");
    }
}
