//! The peer process of accio's two-process conformance tests; see
//! `accio_testkit::peer` for the scenarios and exit statuses.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(accio_testkit::peer::main_with_args(&args));
}
