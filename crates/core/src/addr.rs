//! Endpoint addresses: `shm://NAME`, `tcp://HOST:PORT` and `mpi://RANK[:PORT]`.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// Where an endpoint listens or connects. The scheme picks the backend.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Addr {
    /// Same-node shared memory: `shm://NAME`, NAME of 1..=64 characters from
    /// `[A-Za-z0-9._-]`. Names are per user: two users' `shm://x` never meet.
    Shm(String),
    /// TCP: `tcp://HOST:PORT`; HOST a name, an IPv4 address or `[IPv6]`; port 0 lets the
    /// listener pick an ephemeral port (the bound address is reported).
    Tcp {
        /// Host name or literal address (IPv6 without brackets).
        host: String,
        /// Port number.
        port: u16,
    },
    /// MPI: `mpi://RANK` or `mpi://RANK:PORT`, a rank of `MPI_COMM_WORLD` and one of its
    /// listening ports (default 0), served by the `mpi` backend when it is built in.
    Mpi {
        /// The rank in `MPI_COMM_WORLD`.
        rank: u32,
        /// The port at that rank (several listeners per rank).
        port: u32,
    },
}

impl Addr {
    /// The backend name for this address's scheme (`"shm"`, `"tcp"`).
    pub fn scheme(&self) -> &'static str {
        match self {
            Addr::Shm(_) => "shm",
            Addr::Tcp { .. } => "tcp",
            Addr::Mpi { .. } => "mpi",
        }
    }
}

fn bad(addr: &str, reason: impl Into<String>) -> Error {
    Error::BadAddress {
        addr: addr.to_string(),
        reason: reason.into(),
    }
}

impl FromStr for Addr {
    type Err = Error;

    fn from_str(s: &str) -> Result<Addr, Error> {
        let (scheme, rest) = s.split_once("://").ok_or_else(|| {
            bad(
                s,
                "expected SCHEME://..., e.g. shm://name or tcp://127.0.0.1:0",
            )
        })?;
        match scheme {
            "shm" => {
                if rest.is_empty() || rest.len() > 64 {
                    return Err(bad(s, "shm name must have 1 to 64 characters"));
                }
                if let Some(c) = rest
                    .chars()
                    .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
                {
                    return Err(bad(
                        s,
                        format!("shm name may not contain {c:?} (allowed: A-Z a-z 0-9 . _ -)"),
                    ));
                }
                Ok(Addr::Shm(rest.to_string()))
            }
            "tcp" => {
                let (host, port) = rest
                    .rsplit_once(':')
                    .ok_or_else(|| bad(s, "expected tcp://HOST:PORT"))?;
                let port: u16 = port
                    .parse()
                    .map_err(|_| bad(s, format!("port {port:?} is not a number in 0..=65535")))?;
                let host = match host.strip_prefix('[') {
                    Some(h) => h
                        .strip_suffix(']')
                        .ok_or_else(|| bad(s, "unclosed '[' in IPv6 host"))?,
                    None if host.contains(':') => {
                        return Err(bad(
                            s,
                            "IPv6 hosts must be written in brackets, e.g. tcp://[::1]:0",
                        ))
                    }
                    None => host,
                };
                if host.is_empty() {
                    return Err(bad(s, "empty host"));
                }
                Ok(Addr::Tcp {
                    host: host.to_string(),
                    port,
                })
            }
            "mpi" => {
                let (rank, port) = rest.split_once(':').unwrap_or((rest, "0"));
                let num = |v: &str, what: &str| {
                    v.parse::<u32>().map_err(|_| {
                        bad(
                            s,
                            format!("{what} {v:?} is not a number (expected mpi://RANK[:PORT])"),
                        )
                    })
                };
                Ok(Addr::Mpi {
                    rank: num(rank, "rank")?,
                    port: num(port, "port")?,
                })
            }
            other => Err(bad(
                s,
                format!("unknown scheme {other:?} (known: shm, tcp, mpi)"),
            )),
        }
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::Shm(name) => write!(f, "shm://{name}"),
            Addr::Tcp { host, port } if host.contains(':') => write!(f, "tcp://[{host}]:{port}"),
            Addr::Tcp { host, port } => write!(f, "tcp://{host}:{port}"),
            Addr::Mpi { rank, port: 0 } => write!(f, "mpi://{rank}"),
            Addr::Mpi { rank, port } => write!(f, "mpi://{rank}:{port}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn parses_and_prints_round_trip() {
        for s in [
            "shm://bench-1.a_b",
            "tcp://127.0.0.1:0",
            "tcp://[::1]:5000",
            "tcp://localhost:80",
            "mpi://3",
            "mpi://0:17",
        ] {
            assert_eq!(s.parse::<Addr>().unwrap().to_string(), s);
        }
        assert_eq!(
            "tcp://[::1]:7".parse::<Addr>().unwrap(),
            Addr::Tcp {
                host: "::1".into(),
                port: 7
            }
        );
    }

    #[test]
    fn rejects_bad_addresses_with_reason() {
        for (s, why) in [
            ("udp://x:1", "unknown scheme"),
            ("shm://", "1 to 64"),
            ("shm://a/b", "may not contain '/'"),
            ("tcp://host", "HOST:PORT"),
            ("tcp://host:99999", "not a number"),
            ("tcp://:80", "empty host"),
            ("tcp://::1:80", "brackets"),
            ("localhost:80", "SCHEME://"),
            ("mpi://x", "rank \"x\" is not a number"),
            ("mpi://1:-2", "port \"-2\" is not a number"),
        ] {
            let e = s.parse::<Addr>().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::BadAddress);
            assert!(e.to_string().contains(why), "{s}: {e}");
        }
    }
}
