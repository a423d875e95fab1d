//! Which backend serves a pair of ranks, and why.
//!
//! The rule, in order (the first that applies decides):
//!
//! 1. **A per-pair line in the config file** (`ACCIO_WORLD_CONFIG`, see [`PairRules`]).
//! 2. **`ACCIO_TRANSPORT=SCHEME`** for every pair.
//! 3. **Same node** ([`crate::NodeId`]: host, boot id and network namespace equal) → `shm`.
//! 4. **Different nodes** → `mpi` when this build has it and MPI launched the world (MPI
//!    picks the fastest fabric it knows), else `tcp`. The reason says why shm was refused.
//!
//! Both ends of a pair must agree, so the rules used by every rank are rank 0's (its
//! environment and config file travel in the bootstrap table) and a pair is unordered.
//! An override that cannot serve the pair (shm between nodes, mpi without MPI) is an error
//! naming the pair, never a silent fallback.

use serde::{Deserialize, Serialize};

use crate::error::{Result, WorldError};
use crate::node::NodeId;

/// The backend chosen for a pair and the reason, as logged and printed by `bench matrix`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Choice {
    /// The scheme (`shm`, `tcp`, `mpi`).
    pub scheme: String,
    /// Why, in one line.
    pub reason: String,
}

/// Per-pair overrides: lines `A B SCHEME`, ranks or `*`, `#` starts a comment. A pair is
/// unordered (`0 1 tcp` also serves 1 → 0); the last matching line wins, so a file can
/// start with `* * tcp` and make exceptions below.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairRules {
    lines: Vec<(Option<usize>, Option<usize>, String, usize)>,
    file: String,
}

impl PairRules {
    /// Parses the text of a config file called `file` (for error messages).
    pub fn parse(file: &str, text: &str) -> Result<PairRules> {
        let mut lines = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = |cause: String| WorldError::Config {
                what: format!("{file}:{}", i + 1),
                cause,
            };
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() != 3 {
                return Err(bad(format!(
                    "expected `A B SCHEME` (ranks or *), found {line:?}"
                )));
            }
            let rank = |s: &str| -> Result<Option<usize>> {
                if s == "*" {
                    return Ok(None);
                }
                s.parse()
                    .map(Some)
                    .map_err(|_| bad(format!("{s:?} is neither a rank nor *")))
            };
            lines.push((rank(f[0])?, rank(f[1])?, f[2].to_string(), i + 1));
        }
        Ok(PairRules {
            lines,
            file: file.to_string(),
        })
    }

    /// The scheme the file sets for the pair and the line that sets it.
    pub fn lookup(&self, a: usize, b: usize) -> Option<(&str, usize)> {
        let m = |r: Option<usize>, x: usize| r.is_none_or(|r| r == x);
        self.lines
            .iter()
            .rev()
            .find(|(x, y, _, _)| (m(*x, a) && m(*y, b)) || (m(*x, b) && m(*y, a)))
            .map(|(_, _, s, l)| (s.as_str(), *l))
    }

    /// Ranks named in the file that are outside a world of `size`.
    pub fn check(&self, size: usize) -> Result<()> {
        for (x, y, _, l) in &self.lines {
            for r in [x, y].into_iter().flatten() {
                if *r >= size {
                    return Err(WorldError::Config {
                        what: format!("{}:{l}", self.file),
                        cause: format!("rank {r} is outside the world of {size} ranks"),
                    });
                }
            }
        }
        Ok(())
    }
}

/// The world-wide rules (rank 0's), shipped in the bootstrap table.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rules {
    /// `ACCIO_TRANSPORT`, if set.
    pub forced: Option<String>,
    /// The config file's lines, if any.
    pub pairs: PairRules,
    /// MPI launched the world and this build has the `mpi` backend.
    pub mpi: bool,
}

impl Rules {
    /// The rules from this process's environment (`ACCIO_TRANSPORT`, `ACCIO_WORLD_CONFIG`).
    pub fn from_env(mpi: bool) -> Result<Rules> {
        let forced = std::env::var("ACCIO_TRANSPORT")
            .ok()
            .filter(|s| !s.is_empty());
        let pairs = match std::env::var("ACCIO_WORLD_CONFIG") {
            Ok(path) if !path.is_empty() => {
                let text = std::fs::read_to_string(&path).map_err(|e| WorldError::Config {
                    what: format!("ACCIO_WORLD_CONFIG={path}"),
                    cause: e.to_string(),
                })?;
                PairRules::parse(&path, &text)?
            }
            _ => PairRules::default(),
        };
        Ok(Rules { forced, pairs, mpi })
    }

    /// The choice for ranks `a` and `b` on nodes `na` and `nb`.
    pub fn choose(&self, a: usize, b: usize, na: &NodeId, nb: &NodeId) -> Result<Choice> {
        let apart = na.differs_from(nb);
        let check = |scheme: &str, why: String| -> Result<Choice> {
            let refuse = |cause: String| WorldError::Rank {
                rank: b,
                cause: format!("{why} for ranks {a} and {b}, but {cause}"),
            };
            match scheme {
                "shm" => {
                    if let Some(d) = &apart {
                        return Err(refuse(format!("shm needs one node: {d}")));
                    }
                }
                "mpi" => {
                    if !self.mpi {
                        return Err(refuse(
                            "the world was not launched by MPI with the mpi backend built in"
                                .into(),
                        ));
                    }
                }
                "tcp" => {}
                other => {
                    return Err(refuse(format!(
                        "{other:?} is not a backend the world can use (shm, tcp, mpi)"
                    )))
                }
            }
            Ok(Choice {
                scheme: scheme.to_string(),
                reason: why,
            })
        };
        if let Some((s, line)) = self.pairs.lookup(a, b) {
            return check(s, format!("{}:{line} sets {s}", self.pairs.file));
        }
        if let Some(s) = &self.forced {
            return check(s, format!("ACCIO_TRANSPORT={s}"));
        }
        match apart {
            None => Ok(Choice {
                scheme: "shm".into(),
                reason: format!("same node {na}: shared memory"),
            }),
            Some(d) if self.mpi => Ok(Choice {
                scheme: "mpi".into(),
                reason: format!("shm refused ({d}); launched by MPI: mpi"),
            }),
            Some(d) => Ok(Choice {
                scheme: "tcp".into(),
                reason: format!("shm refused ({d}); no MPI launch: tcp"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> (NodeId, NodeId) {
        let a = NodeId::current();
        let mut b = a.clone();
        b.net_ns = "net:[42]".into();
        (a, b)
    }

    #[test]
    fn the_rule_in_order() {
        let (a, b) = nodes();
        let r = Rules::default();
        assert_eq!(r.choose(0, 1, &a, &a).unwrap().scheme, "shm");
        let c = r.choose(0, 1, &a, &b).unwrap();
        assert_eq!(c.scheme, "tcp");
        assert!(
            c.reason.contains("network namespaces differ"),
            "{}",
            c.reason
        );
        let m = Rules {
            mpi: true,
            ..Rules::default()
        };
        assert_eq!(m.choose(0, 1, &a, &b).unwrap().scheme, "mpi");
        assert_eq!(m.choose(0, 1, &a, &a).unwrap().scheme, "shm");
    }

    #[test]
    fn overrides_win_and_impossible_ones_are_errors() {
        let (a, b) = nodes();
        let f = Rules {
            forced: Some("tcp".into()),
            ..Rules::default()
        };
        let c = f.choose(0, 1, &a, &a).unwrap();
        assert_eq!(
            (c.scheme.as_str(), c.reason.as_str()),
            ("tcp", "ACCIO_TRANSPORT=tcp")
        );
        let shm = Rules {
            forced: Some("shm".into()),
            ..Rules::default()
        };
        let e = shm.choose(0, 3, &a, &b).unwrap_err().to_string();
        assert!(
            e.contains("rank 3") && e.contains("shm needs one node"),
            "{e}"
        );
        let mpi = Rules {
            forced: Some("mpi".into()),
            ..Rules::default()
        };
        assert!(mpi
            .choose(0, 1, &a, &a)
            .unwrap_err()
            .to_string()
            .contains("not launched by MPI"));
        let pairs = PairRules::parse("w.conf", "* * tcp\n1 0 shm # keep\n").unwrap();
        let p = Rules {
            forced: Some("tcp".into()),
            pairs,
            mpi: false,
        };
        let c = p.choose(0, 1, &a, &a).unwrap();
        assert_eq!(
            (c.scheme.as_str(), c.reason.as_str()),
            ("shm", "w.conf:2 sets shm")
        );
        assert_eq!(p.choose(2, 0, &a, &a).unwrap().reason, "w.conf:1 sets tcp");
    }

    #[test]
    fn config_errors_name_file_and_line() {
        let e = PairRules::parse("w.conf", "0 1 tcp\n0 x tcp\n").unwrap_err();
        assert_eq!(e.to_string(), "w.conf:2: \"x\" is neither a rank nor *");
        let e = PairRules::parse("w.conf", "0 1\n").unwrap_err();
        assert!(e.to_string().starts_with("w.conf:1: expected"));
        let p = PairRules::parse("w.conf", "\n0 7 tcp\n").unwrap();
        assert_eq!(
            p.check(4).unwrap_err().to_string(),
            "w.conf:2: rank 7 is outside the world of 4 ranks"
        );
    }
}
