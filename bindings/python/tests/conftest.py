import itertools
import os

import pytest

_n = itertools.count()


@pytest.fixture
def shm_addr():
    """A fresh shm:// address for each test (names are per-process)."""
    return f"shm://accio-py-{os.getpid()}-{next(_n)}"


def connected_pair(addr):
    """(connecting end, accepted end, listener) of one connection inside this process:
    accept runs on a thread because connect waits for it."""
    import threading

    import accio

    lst = accio.listen(addr)
    got = []
    t = threading.Thread(target=lambda: got.append(lst.accept(timeout=10)))
    t.start()
    a = accio.connect(lst.addr, timeout=10)
    t.join(10)
    return a, got[0], lst


@pytest.fixture(scope="session")
def accio_bin():
    """The `accio` CLI that launches worlds (`accio run`): $ACCIO_BIN (CI sets it, and then
    it must exist), else the workspace's release build, else `accio` on PATH; skips with a
    message when there is none."""
    import shutil

    given = os.environ.get("ACCIO_BIN")
    if given:
        assert os.access(given, os.X_OK), f"ACCIO_BIN={given} is not an executable"
        return given
    here = os.path.dirname(os.path.abspath(__file__))
    built = os.path.join(here, "..", "..", "..", "target", "release", "accio")
    if os.access(built, os.X_OK):
        return os.path.normpath(built)
    found = shutil.which("accio")
    if found:
        return found
    pytest.skip("skipped: no accio binary (cargo build --release -p accio-cli, or set ACCIO_BIN)")
