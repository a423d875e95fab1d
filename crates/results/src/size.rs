//! Byte sizes: the notation of the command line and of figure labels (`8`, `4K`, `2M`, `1G`;
//! binary, K = 1024, also `4KiB`), and the one human-readable form (`1.5 GiB`) used in
//! messages and tables alike.

/// Parses one size. Suffixes are binary (`K` = 1024, `M` = 1024², `G` = 1024³, optional
/// `iB`/`B`); case-insensitive.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(digits);
    if num.is_empty() {
        return Err(format!(
            "size {s:?} does not start with a number (e.g. 8, 4K, 2M)"
        ));
    }
    let n: u64 = num
        .parse()
        .map_err(|_| format!("size {s:?} is too large"))?;
    let mult: u64 = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => {
            return Err(format!(
                "size {s:?} has unknown suffix {suffix:?} (use K, M, G)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

/// Parses a comma-separated list of sizes, e.g. `8,4K,2M`.
pub fn parse_sizes(s: &str) -> Result<Vec<u64>, String> {
    let v: Vec<u64> = s
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(parse_size)
        .collect::<Result<_, _>>()?;
    if v.is_empty() {
        return Err(format!("size list {s:?} is empty"));
    }
    Ok(v)
}

/// Formats a size with the largest exact binary suffix: `4K`, `2M`, `1536`.
pub fn format_size(n: u64) -> String {
    for (shift, suffix) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{}{suffix}", n >> shift);
        }
    }
    n.to_string()
}

/// Bytes as `23.5 GiB`, `512 MiB`, `12 KiB`.
pub fn human_bytes(n: u64) -> String {
    let units = [
        (1u64 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for (scale, unit) in units {
        if n >= scale {
            let v = n as f64 / scale as f64;
            return if v >= 100.0 || v.fract() == 0.0 {
                format!("{v:.0} {unit}")
            } else {
                format!("{v:.1} {unit}")
            };
        }
    }
    format!("{n} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_binary_suffixes() {
        assert_eq!(
            parse_sizes("8,4K,2M,1g,3KiB").unwrap(),
            vec![8, 4096, 2 << 20, 1 << 30, 3072]
        );
    }

    #[test]
    fn rejects_malformed_sizes_clearly() {
        assert!(parse_size("4Q").unwrap_err().contains("unknown suffix"));
        assert!(parse_size("K4")
            .unwrap_err()
            .contains("does not start with a number"));
        assert!(parse_size("99999999999999999999")
            .unwrap_err()
            .contains("too large"));
        assert!(parse_size("20000000T").unwrap_err().contains("too large"));
        assert!(parse_sizes(",").unwrap_err().contains("empty"));
    }

    #[test]
    fn formats_round_trip() {
        for n in [0u64, 8, 1000, 4096, 2 << 20, 3 << 30, 1536] {
            assert_eq!(parse_size(&format_size(n)).unwrap(), n);
        }
        assert_eq!(format_size(2 << 20), "2M");
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(4 << 20), "4 MiB");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
    }
}
