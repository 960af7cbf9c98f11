#!/usr/bin/env bash
# The Python package's tests: builds crates/ucache-py into a virtual environment under
# target/pyenv (created once; later runs only rebuild what changed) and runs its pytest suite.
# The S3 tests use the server whose variables are in the environment (scripts/test.sh sources
# the env file of scripts/s3-server.sh); without them they are skipped, unless
# UCACHE_S3_REQUIRED=1, which makes them fail. The simulator tests compare with the `ucache`
# command, built here.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=$PWD/target/pyenv
py=$venv/bin/python
# maturin (run by pip without build isolation) and tpchgen-cli are found on PATH.
export PATH="$venv/bin:$PATH"
if [ ! -x "$py" ]; then
  python3 -m venv "$venv"
fi
# Test dependencies, pinned loosely; pip does nothing when they are already installed. They go
# in one pip call so that its resolver keeps them compatible (libcachesim wants boto3, whose
# botocore must suit s3fs's aiobotocore). libcachesim is pinned: the conformance test
# (tests/test_libcachesim.py) compares with 0.3.5's numbers.
deps=(maturin pytest numpy fsspec pyarrow duckdb s3fs tpchgen-cli libcachesim==0.3.5)
stamp=$venv/.deps-installed
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${deps[*]}" ]; then
  "$py" -m pip install --quiet --disable-pip-version-check "${deps[@]}"
  echo "${deps[*]}" >"$stamp"
fi

# The extension, built by maturin through pip with the venv's maturin (no isolated build
# environment to download). The dev profile by default: it shares target/debug with `cargo
# test`, so after scripts/test.sh only pyo3 and this crate compile (seconds, where a release
# build with LTO takes minutes). UCACHE_PY_PROFILE=release tests the optimized build.
MATURIN_PEP517_ARGS="--profile ${UCACHE_PY_PROFILE:-dev}" \
  "$py" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
  --force-reinstall ./crates/ucache-py

# The `ucache` command, for the simulator's comparison.
cargo build --quiet -p ucache-cli
export UCACHE_CLI=$PWD/target/debug/ucache UCACHE_CLI_REQUIRED=1
# The LD_PRELOAD shim, for DuckDB under its read mode (tests/test_preload_duckdb.py).
cargo build --quiet -p ucache-preload
export UCACHE_PRELOAD_LIB=$PWD/target/debug/libucache_preload.so UCACHE_PRELOAD_REQUIRED=1
# libcachesim was installed above: the conformance test must run, not skip.
export UCACHE_LIBCACHESIM_REQUIRED=1

# pytest exits 5 when it collected no tests: a broken collection must not pass.
cd crates/ucache-py
set +e
"$py" -m pytest -q -p no:cacheprovider tests "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then
  echo "test-python.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
