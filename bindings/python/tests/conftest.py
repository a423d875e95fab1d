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
