"""Fixtures that test modules ask for by name, and the thread count of pytest-xdist's workers."""

import os

import pytest

# Each xdist worker gets one thread for torch (and the scripts it starts, which inherit the variable): two workers
# with torch's default of a thread per core would put four busy threads on the test machine's 2 cores, and torch's
# spinning threads slow down sharply when they outnumber the cores. Set before any test module imports torch.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def one_torch_thread(monkeypatch):
    """For the Atari modules (`pytestmark = pytest.mark.usefixtures("one_torch_thread")`): the test machine's 2 cores
    are shared, and torch's threads fighting for them make a CNN step up to 10x slower (an action of the CNN took
    260 ms on 2 threads against 7 ms on 1). The scripts these tests start inherit the variable."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def pytest_runtest_setup(item):
    """helpers.require_e2e reads the test being set up: a module fixture that starts a script counts for the first
    test that asks for it."""
    import helpers

    helpers.CURRENT_TEST = item
