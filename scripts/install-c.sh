#!/usr/bin/env bash
# Installs ucache's C library under PREFIX: lib/libucache.so, lib/libucache.a,
# include/ucache.h and lib/pkgconfig/ucache.pc. Afterwards, with
# PKG_CONFIG_PATH=PREFIX/lib/pkgconfig:
#   cc prog.c $(pkg-config --cflags --libs ucache)      # links libucache.so, with an rpath
#   cc prog.c PREFIX/lib/libucache.a $(pkg-config --cflags --libs-only-other --static ucache | \
#     sed 's/-Wl,-rpath[^ ]*//') -lgcc_s -lutil -lrt -lpthread -lm -ldl   # the static library
# Builds `cargo build --release -p ucache-capi` first, unless UCACHE_INSTALL_FROM names a
# directory that already holds libucache.so and libucache.a (the tests use their own build).
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 PREFIX" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$1"
prefix="$(cd "$1" && pwd)"
crate="$root/crates/ucache-capi"

if [ -n "${UCACHE_INSTALL_FROM:-}" ]; then
  libs="$UCACHE_INSTALL_FROM"
else
  (cd "$root" && cargo build --release -p ucache-capi)
  libs="${CARGO_TARGET_DIR:-$root/target}/release"
fi
version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$root/Cargo.toml")"

install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 755 "$libs/libucache.so" "$prefix/lib/libucache.so"
install -m 644 "$libs/libucache.a" "$prefix/lib/libucache.a"
install -m 644 "$crate/include/ucache.h" "$prefix/include/ucache.h"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" "$crate/ucache.pc.in" \
  >"$prefix/lib/pkgconfig/ucache.pc"
echo "installed ucache $version C library under $prefix"
