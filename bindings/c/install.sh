#!/usr/bin/env bash
# Builds the accio C library in release and installs it:
#   PREFIX/lib/libaccio.so (.so.0, .so.0.X.Y), PREFIX/lib/libaccio.a,
#   PREFIX/include/accio.h, PREFIX/include/accio.hpp, PREFIX/lib/pkgconfig/accio.pc
# then runs ldconfig when installing into the system as root.
#
#   bindings/c/install.sh [--prefix DIR]      (default /usr/local)
#
# Afterwards: cc prog.c $(pkg-config --cflags --libs accio)
# (for a prefix pkg-config does not search, export PKG_CONFIG_PATH=DIR/lib/pkgconfig).
set -euo pipefail

prefix=/usr/local
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix="$2"; shift 2 ;;
        --prefix=*) prefix="${1#--prefix=}"; shift ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$prefix" in /*) ;; *) prefix="$(pwd)/$prefix" ;; esac

root="$(cd "$(dirname "$0")/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)"
major="${version%%.*}"

echo "== building libaccio $version (release)"
cargo build --release -p accio-capi --manifest-path "$root/Cargo.toml"

libdir="$prefix/lib"
echo "== installing into $prefix"
install -d "$libdir/pkgconfig" "$prefix/include"
# Debug info stays in the build tree; the installed library is what programs load.
install -m 755 "$target/release/libaccio.so" "$libdir/libaccio.so.$version"
strip --strip-debug "$libdir/libaccio.so.$version" 2>/dev/null || true
ln -sf "libaccio.so.$version" "$libdir/libaccio.so.$major"
ln -sf "libaccio.so.$major" "$libdir/libaccio.so"
install -m 644 "$target/release/libaccio.a" "$libdir/libaccio.a"
strip --strip-debug "$libdir/libaccio.a" 2>/dev/null || true
install -m 644 "$root/crates/capi/include/accio.h" "$root/bindings/c/include/accio.hpp" "$prefix/include/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" "$root/bindings/c/accio.pc.in" \
    > "$libdir/pkgconfig/accio.pc"

if [ "$(id -u)" = 0 ] && command -v ldconfig >/dev/null 2>&1; then
    ldconfig "$libdir" 2>/dev/null || ldconfig || true
fi
echo "installed: $libdir/libaccio.so, $libdir/libaccio.a, $prefix/include/accio.h, accio.hpp, $libdir/pkgconfig/accio.pc"
