//! Node identity: which ranks can share memory.
//!
//! Two processes share a node for accio's purposes when they could meet through `shm`: the
//! same kernel (host name and boot id) *and* the same network namespace, because the shm
//! rendezvous is an abstract Unix socket and those exist per network namespace. Containers
//! or namespaces that reuse a host name and a kernel are therefore still different nodes.

use std::fmt;
use std::fs;

use serde::{Deserialize, Serialize};

/// What identifies a node: host name, kernel boot id, network namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeId {
    /// The host name (UTS namespace).
    pub host: String,
    /// `/proc/sys/kernel/random/boot_id`: one running kernel.
    pub boot_id: String,
    /// The network namespace (`readlink /proc/self/ns/net`, e.g. `net:[4026531840]`).
    pub net_ns: String,
}

impl NodeId {
    /// This process's node. Parts the system does not show read as `?`, which never
    /// matches a real value, so an unknown part makes two processes different nodes
    /// rather than wrongly one.
    pub fn current() -> NodeId {
        let host = fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".to_string());
        let boot_id = fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".to_string());
        let net_ns = fs::read_link("/proc/self/ns/net")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "?".to_string());
        NodeId {
            host,
            boot_id,
            net_ns,
        }
    }

    /// Whether `self` and `other` can share memory; when not, why (for the choice log).
    pub fn differs_from(&self, other: &NodeId) -> Option<String> {
        let unknown = |s: &str| s == "?";
        if unknown(&self.boot_id) || unknown(&other.boot_id) {
            return Some("a boot id is unknown".to_string());
        }
        if self.host != other.host {
            return Some(format!("hosts differ ({} vs {})", self.host, other.host));
        }
        if self.boot_id != other.boot_id {
            return Some(format!(
                "kernels differ (boot id {} vs {})",
                short(&self.boot_id),
                short(&other.boot_id)
            ));
        }
        if unknown(&self.net_ns) || unknown(&other.net_ns) || self.net_ns != other.net_ns {
            return Some(format!(
                "network namespaces differ ({} vs {}): shm's rendezvous socket cannot cross them",
                self.net_ns, other.net_ns
            ));
        }
        None
    }
}

fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (boot {}, {})",
            self.host,
            short(&self.boot_id),
            self.net_ns
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_one_node_with_itself() {
        let a = NodeId::current();
        assert!(!a.boot_id.is_empty() && a.boot_id != "?");
        assert!(a.net_ns.starts_with("net:["), "{}", a.net_ns);
        assert_eq!(a.differs_from(&a.clone()), None);
    }

    #[test]
    fn each_part_separates_nodes_and_says_which() {
        let a = NodeId::current();
        let mut b = a.clone();
        b.host.push_str("-other");
        assert!(a.differs_from(&b).unwrap().contains("hosts differ"));
        let mut c = a.clone();
        c.boot_id = "00000000-different".into();
        assert!(a.differs_from(&c).unwrap().contains("kernels differ"));
        let mut d = a.clone();
        d.net_ns = "net:[1]".into();
        assert!(a
            .differs_from(&d)
            .unwrap()
            .contains("network namespaces differ"));
        let mut e = a.clone();
        e.boot_id = "?".into();
        assert!(a.differs_from(&e).is_some());
    }
}
