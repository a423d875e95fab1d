//! Gives the shared library its soname, so programs record `libaccio.so.0` and a later
//! compatible release can replace the file under them.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libaccio.so.0");
    }
}
