#!/usr/bin/env bash
# TPC-H on DuckDB through ucache against direct local reads, s3fs and DuckDB's httpfs, on a
# throwaway SeaweedFS server (scripts/s3-server.sh). Arguments go to
# crates/ucache-py/bench/tpch.py (see its docstring), e.g.
#
#   bash scripts/bench-tpch.sh --sf 0.1 --rounds 2 --out docs/results/2026-11-26-tpch
#
# Uses the venv of scripts/test-python.sh (run that first: it builds and installs ucache).
# Install a release build for figures: UCACHE_PY_PROFILE=release bash scripts/test-python.sh -k nothing
# The ucache-preload system runs DuckDB under target/release/libucache_preload.so, built here.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cargo build --release --quiet -p ucache-preload
py=$root/target/pyenv/bin/python
# DuckDB's httpfs extension cannot be fetched from DuckDB's repository here, and PyPI builds it
# (duckdb-extension-httpfs) only for DuckDB releases up to 1.5.5. UCACHE_TPCH_DUCKDB=1.5.5 runs
# the bench in a venv of that DuckDB with the extension and a release wheel of ucache
# (docs/results/2026-11-27-httpfs).
if [ -n "${UCACHE_TPCH_DUCKDB:-}" ]; then
  v=$UCACHE_TPCH_DUCKDB
  venv=$root/target/pyenv-duckdb-$v
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "duckdb==$v" \
    "duckdb-extension-httpfs==$v" "duckdb-extensions==$v" pyarrow numpy fsspec s3fs tpchgen-cli maturin
  rm -rf "$root/target/wheels-duckdb-$v"
  (cd crates/ucache-py && PATH="$venv/bin:$PATH" maturin build --release --quiet -o "$root/target/wheels-duckdb-$v")
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps \
    "$root"/target/wheels-duckdb-"$v"/ucache-*.whl
  py=$venv/bin/python
fi
work=$(mktemp -d /tmp/ucache-tpch.XXXXXX)
trap 'bash "$root/scripts/s3-server.sh" stop "$work/s3" >/dev/null 2>&1 || true; rm -rf "$work/s3"' EXIT
# Room for several uploads of scale factor 1 and up (see s3-server.sh).
UCACHE_S3_VOLUMES=${UCACHE_S3_VOLUMES:-64} bash scripts/s3-server.sh start "$work/s3" >/dev/null
# shellcheck disable=SC1091
. "$work/s3/env"
data=${UCACHE_TPCH_DATA:-$root/target/tpch-data}
"$py" crates/ucache-py/bench/tpch.py --data "$data" "$@"
