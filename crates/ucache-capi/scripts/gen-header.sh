#!/usr/bin/env bash
# Regenerates crates/ucache-capi/include/ucache.h from the crate's sources with cbindgen
# (the same generation tests/header.rs checks against).
set -euo pipefail
cd "$(dirname "$0")/../../.."
UCACHE_BLESS_HEADER=1 cargo test -p ucache-capi --test header --quiet
echo "wrote crates/ucache-capi/include/ucache.h"
