"""Shared fixtures: data files, a cache, the S3 test server, TPC-H Parquet data and the
`ucache` command.

S3 tests use the server of scripts/s3-server.sh, found through the variables its env file
sets (UCACHE_S3_ENDPOINT, AWS_ACCESS_KEY_ID, ...). Without one they are skipped, unless
UCACHE_S3_REQUIRED=1 (CI), which makes them fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import ucache

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def cache() -> ucache.Cache:
    return ucache.Cache("16MiB")


def pattern(n: int) -> bytes:
    """Bytes whose every 4-byte word holds its own offset / 4: any misplaced byte shows."""
    import numpy as np

    return np.arange(n // 4, dtype="<u4").tobytes()


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    p = tmp_path / "data.bin"
    p.write_bytes(pattern(64 * 4096 + 1000))
    return p


@pytest.fixture(scope="session")
def s3_env() -> dict:
    endpoint = os.environ.get("UCACHE_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL")
    if not endpoint or not os.environ.get("AWS_ACCESS_KEY_ID"):
        msg = "no S3 test server (source the env file of scripts/s3-server.sh start DIR)"
        if os.environ.get("UCACHE_S3_REQUIRED") == "1":
            pytest.fail(msg + ", and UCACHE_S3_REQUIRED=1")
        pytest.skip(msg)
    return {
        "endpoint": endpoint,
        "bucket": os.environ.get("UCACHE_S3_BUCKET", "ucache-test"),
        "access_key": os.environ["AWS_ACCESS_KEY_ID"],
        "secret_key": os.environ["AWS_SECRET_ACCESS_KEY"],
    }


@pytest.fixture(scope="session")
def s3fs_client(s3_env: dict):
    s3fs = pytest.importorskip("s3fs")
    return s3fs.S3FileSystem(
        key=s3_env["access_key"],
        secret=s3_env["secret_key"],
        endpoint_url=s3_env["endpoint"],
        client_kwargs={"region_name": "us-east-1"},
    )


@pytest.fixture(scope="session")
def s3_prefix(s3_env: dict) -> str:
    """A fresh key prefix per test session, so runs never see each other's objects."""
    return f"{s3_env['bucket']}/pytest-{uuid.uuid4().hex[:12]}"


def _tpch_with_pyarrow(out: Path) -> None:
    """A small stand-in for TPC-H when tpchgen-cli is missing: lineitem-like and orders-like
    tables with several row groups."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(7)
    n = 60_000
    pq.write_table(
        pa.table(
            {
                "l_orderkey": np.arange(n) // 4,
                "l_quantity": rng.integers(1, 50, n).astype("float64"),
                "l_extendedprice": rng.random(n) * 1000,
                "l_returnflag": rng.choice(["A", "N", "R"], n),
            }
        ),
        out / "lineitem.parquet",
        row_group_size=10_000,
    )
    pq.write_table(
        pa.table({"o_orderkey": np.arange(n // 4), "o_totalprice": rng.random(n // 4) * 1e5}),
        out / "orders.parquet",
    )


@pytest.fixture(scope="session")
def tpch_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TPC-H at scale factor 0.01 as Parquet (tpchgen-cli), one file per table."""
    out = tmp_path_factory.mktemp("tpch")
    exe = shutil.which("tpchgen-cli") or str(Path(sys.executable).with_name("tpchgen-cli"))
    if os.path.exists(exe):
        subprocess.run([exe, "parquet", "-s", "0.01", "--output-dir", str(out)], check=True)
    else:
        _tpch_with_pyarrow(out)
    assert (out / "lineitem.parquet").exists()
    return out


@pytest.fixture(scope="session")
def ucache_cli() -> str:
    """The `ucache` command (UCACHE_CLI, or target/{release,debug}/ucache)."""
    for c in [os.environ.get("UCACHE_CLI"), REPO / "target/release/ucache", REPO / "target/debug/ucache"]:
        if c and os.path.exists(c):
            return str(c)
    msg = "the ucache command is not built (cargo build -p ucache-cli)"
    if os.environ.get("UCACHE_CLI_REQUIRED") == "1":
        pytest.fail(msg)
    pytest.skip(msg)
