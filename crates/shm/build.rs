//! Declares `cfg(loom)` (set by `ci/loom.sh` through `RUSTFLAGS="--cfg loom"`) so that normal
//! builds know the name and do not warn about it. A `[lints.rust]` table in Cargo.toml
//! cannot sit beside `[lints] workspace = true`, hence this script.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
}
