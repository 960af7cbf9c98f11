"""Bad input raises a clear ucache exception, never crashes the interpreter."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ucache


def test_missing_file_is_file_not_found(cache, tmp_path: Path):
    with pytest.raises(FileNotFoundError) as e:
        cache.map(tmp_path / "nope.bin")
    assert isinstance(e.value, ucache.NotFound) and "nope.bin" in str(e.value)


@pytest.mark.parametrize(
    "url, words",
    [("s3:/bucket/key", "not an s3:// URL"), ("http://host/x", "unsupported URL scheme"), ("s3://", "names no bucket")],
)
def test_bad_urls_are_invalid_arguments(cache, url, words):
    with pytest.raises(ucache.InvalidArgument) as e:
        cache.map(url)
    assert words in str(e.value) and isinstance(e.value, ValueError)


def test_bad_options(cache, data_file):
    with pytest.raises(ucache.InvalidArgument, match="buffer size"):
        cache.map(data_file, buffer_size=5000)
    with pytest.raises(ucache.InvalidArgument, match="unknown policy 'nope'"):
        cache.map(data_file, policy="nope")
    with pytest.raises(ucache.InvalidArgument, match="unknown size suffix"):
        ucache.Cache("1 parsec")
    with pytest.raises(ucache.InvalidArgument, match="smaller than one eviction batch"):
        ucache.Cache(4096, batch=64)
    with pytest.raises(ucache.InvalidArgument):
        ucache.Cache(-1)
    with pytest.raises(ucache.InvalidArgument, match="`create` needs `writable`"):
        cache.map(data_file, writable=False, create=True)
    # create without writable is refused too: writable defaults to False, create never
    # implies it.
    with pytest.raises(ucache.InvalidArgument, match="must be writable"):
        cache.map(data_file, create=True)


def test_write_to_read_only_mapping(cache, data_file):
    m = cache.map(data_file)
    with pytest.raises(PermissionError) as e:
        m.pin(0, exclusive=True)
    assert isinstance(e.value, ucache.ReadOnly)
    with pytest.raises(ucache.ReadOnly):
        m.write(0, b"x")
    t = cache.map(data_file, transparent=True)
    with pytest.raises(TypeError, match="read-only"):
        memoryview(t)[0:1] = b"x"  # a read-only export refuses stores
    import numpy as np

    a = np.frombuffer(t, dtype=np.uint8)
    with pytest.raises(ValueError, match="read-only"):
        a[0] = 1
    with pytest.raises(ValueError):
        a.setflags(write=True)


def test_buffer_of_an_explicit_mapping_is_refused(cache, data_file):
    with pytest.raises(BufferError, match="not transparent"):
        memoryview(cache.map(data_file))


def test_use_after_close(cache, data_file):
    m = cache.map(data_file)
    m.close()
    m.close()  # idempotent
    for call in [lambda: m.read(0, 1), lambda: m.pin(0), lambda: m.msync(), lambda: len(m)]:
        with pytest.raises(ucache.Closed, match="closed"):
            call()


def test_released_pin_in_a_subprocess_never_crashes(data_file):
    """Every misuse of a released pin and a closed mapping, in a child interpreter: it must
    exit normally, having seen only exceptions."""
    code = textwrap.dedent(
        f"""
        import gc, ucache
        c = ucache.Cache("1MiB")
        m = c.map({str(data_file)!r}, transparent=True)
        with m.pin(0) as v:
            kept = v
        for f in [lambda: kept[0], lambda: bytes(kept), lambda: kept.tobytes()]:
            try:
                f(); raise SystemExit("released view was readable")
            except ValueError:
                pass
        p = m.pin(1); p.release()
        for f in [lambda: p.view, lambda: memoryview(p)]:
            try:
                f(); raise SystemExit("released pin exported")
            except ucache.Closed:
                pass
        del p, kept; gc.collect()
        m.close()
        try:
            memoryview(m); raise SystemExit("closed mapping exported")
        except ucache.Closed:
            pass
        print("ok")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_stopped_server_is_a_store_error(cache):
    with pytest.raises(ucache.StoreError) as e:
        cache.map(
            "s3://bucket/key",
            endpoint=f"http://127.0.0.1:{_closed_port()}",
            access_key="a",
            secret_key="b",
        )
    assert isinstance(e.value, OSError) and "s3://bucket/key" in str(e.value)


def test_wrong_credentials_are_permission_denied(cache, s3_env, s3fs_client, s3_prefix):
    key = f"{s3_prefix}/creds.bin"
    s3fs_client.pipe(key, b"x" * 5000)
    url = f"s3://{key}"
    m = cache.map(url, endpoint=s3_env["endpoint"])
    assert m.read(0, 3) == b"xxx"
    with pytest.raises(PermissionError) as e:
        cache.map(url, endpoint=s3_env["endpoint"], access_key=s3_env["access_key"], secret_key="wrong")
    assert isinstance(e.value, ucache.PermissionDenied) and "credentials" in str(e.value)
    with pytest.raises(ucache.NotFound):
        cache.map(f"s3://{s3_prefix}/missing", endpoint=s3_env["endpoint"])
    with pytest.raises(ucache.InvalidArgument, match="go together"):
        cache.map(url, access_key="only-one")
