//! PCIe line codes, link bandwidth and generations (see the module docs of `node`).

use serde::{Deserialize, Serialize};

/// A PCIe line code and its efficiency (payload bits per transferred bit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Encoding {
    /// 8b/10b: PCIe 1.x and 2.x (2.5 and 5 GT/s).
    #[serde(rename = "8b/10b")]
    B8B10,
    /// 128b/130b: PCIe 3.0 to 5.0 (8, 16, 32 GT/s).
    #[serde(rename = "128b/130b")]
    B128B130,
    /// FLIT mode, 242 data bytes per 256-byte FLIT: PCIe 6.0 and later (64 GT/s and up).
    #[serde(rename = "flit 242/256")]
    Flit,
}

impl Encoding {
    /// The encoding a link running at `gts` GT/s uses.
    pub fn for_rate(gts: f64) -> Encoding {
        if gts <= 5.0 {
            Encoding::B8B10
        } else if gts < 64.0 {
            Encoding::B128B130
        } else {
            Encoding::Flit
        }
    }

    /// Payload bits per transferred bit.
    pub fn efficiency(self) -> f64 {
        match self {
            Encoding::B8B10 => 8.0 / 10.0,
            Encoding::B128B130 => 128.0 / 130.0,
            Encoding::Flit => 242.0 / 256.0,
        }
    }

    /// The name in tables (`8b/10b`).
    pub fn name(self) -> &'static str {
        match self {
            Encoding::B8B10 => "8b/10b",
            Encoding::B128B130 => "128b/130b",
            Encoding::Flit => "flit 242/256",
        }
    }
}

/// Theoretical bandwidth of a PCIe link per direction, in GB/s (10^9 B/s): lanes × GT/s ×
/// encoding efficiency / 8 (see the module docs).
pub fn pcie_gbps(gts: f64, lanes: u32) -> f64 {
    f64::from(lanes) * gts * Encoding::for_rate(gts).efficiency() / 8.0
}

/// PCIe generation of a transfer rate (1 for 2.5 GT/s ... 6 for 64 GT/s).
pub fn pcie_generation(gts: f64) -> Option<u8> {
    const RATES: [(f64, u8); 7] = [
        (2.5, 1),
        (5.0, 2),
        (8.0, 3),
        (16.0, 4),
        (32.0, 5),
        (64.0, 6),
        (128.0, 7),
    ];
    RATES
        .iter()
        .find(|(r, _)| (gts - r).abs() < 0.01)
        .map(|&(_, g)| g)
}
