"""What only the s3:// backend has, against the loopback moto server (see conftest.py).

The behaviour every backend shares (round trips, listing, put_if_absent races, atomic reads,
large files) runs on s3:// too, from test_local_store.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from shoal import _contract as contract
from shoal._storage.objstore import CHUNK, ObjectStore
from shoal._storage.store import join, open_store, split_scheme
from shoal.errors import StoreError
from tests.helpers import wait_until


def _etag(endpoint: str, uri: str) -> str:
    # boto3, a second client, reads what the server stored (moto depends on it).
    import boto3

    bucket, key = split_scheme(uri)[1].split("/", 1)
    client = boto3.client("s3", endpoint_url=endpoint)
    return str(client.head_object(Bucket=bucket, Key=key)["ETag"])


@pytest.mark.s3
def test_big_files_go_up_in_parts_and_small_ones_in_one_put(
    s3_server: str, s3_root: str, tmp_path: Path
) -> None:
    store = open_store(s3_root)
    big = tmp_path / "big"
    big.write_bytes(os.urandom(2 * CHUNK + 1000))
    small = tmp_path / "small"
    small.write_bytes(b"small")
    store.put_file(big, join(store.root, "big"))
    store.put_file(small, join(store.root, "small"))
    # A multipart upload's ETag ends in -<number of parts>.
    assert _etag(s3_server, join(store.root, "big")).strip('"').endswith("-3")
    assert "-" not in _etag(s3_server, join(store.root, "small"))
    out = tmp_path / "out"
    store.get_file(join(store.root, "big"), out)
    assert out.read_bytes() == big.read_bytes()


@pytest.mark.s3
def test_store_is_an_object_store_rooted_at_the_prefix(s3_root: str) -> None:
    store = open_store(s3_root)
    assert isinstance(store, ObjectStore)
    assert store.root == s3_root
    assert store.local_path(join(store.root, "x")) is None
    # Objects are really under the prefix: a store at the bucket sees them there.
    store.put_bytes(join(store.root, "k"), b"v")
    bucket = open_store("s3://" + split_scheme(s3_root)[1].split("/")[0])
    assert join(store.root, "k") in bucket.list(bucket.root)


@pytest.mark.s3
def test_obstore_errors_become_store_errors(s3_server: str) -> None:
    store = open_store("s3://no-such-bucket-for-shoal")
    with pytest.raises(StoreError, match="no-such-bucket-for-shoal") as err:
        store.put_bytes(join(store.root, "x"), b"x")
    assert type(err.value).__module__ == "shoal.errors"
    assert err.value.__cause__ is not None


@pytest.mark.s3
def test_the_endpoint_is_part_of_the_store_identity(
    s3_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = open_store(s3_root)
    monkeypatch.setenv(contract.S3_ENDPOINT, "http://127.0.0.1:9")
    assert open_store(s3_root) is not first


def test_import_shoal_storage_does_not_import_obstore(child_env: dict[str, str]) -> None:
    code = (
        "import sys, tempfile, pathlib\n"
        "import shoal._storage.store as s, shoal._api.io\n"
        "st = s.open_store(pathlib.Path(tempfile.mkdtemp()).as_uri())\n"
        "st.put_bytes(s.join(st.root, 'x'), b'1')\n"
        "assert 'obstore' not in sys.modules, 'obstore imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], env=child_env, check=True)


@pytest.mark.s3
def test_a_forked_child_fails_fast_instead_of_hanging(s3_root: str) -> None:
    """obstore's client hangs in a child forked after the parent used it (see objstore.py).

    If this starts failing because the child *succeeds*, obstore fixed fork: drop the guard.
    """
    store = open_store(s3_root)
    store.put_bytes(join(store.root, "p"), b"parent")  # the parent has done obstore I/O
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            child = open_store(s3_root)
            assert child is not store  # the cache is per process
            child.get_bytes(join(store.root, "p"))
        except StoreError as e:
            code = 0 if "forked" in str(e) else 2
        except BaseException:
            code = 3
        finally:
            os._exit(code)
    try:
        done = wait_until("the forked child to end", lambda: (
            (ended := os.waitpid(pid, os.WNOHANG))[0] != 0 and ended), timeout=30, every=0.02)
    except AssertionError:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung talking to the store")
    assert os.waitstatus_to_exitcode(done[1]) == 0
    assert store.get_bytes(join(store.root, "p")) == b"parent"  # the parent's still works
