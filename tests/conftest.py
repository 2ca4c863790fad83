"""Fixtures that test modules ask for by name."""

import pytest


@pytest.fixture
def one_torch_thread(monkeypatch):
    """For the Atari modules (`pytestmark = pytest.mark.usefixtures("one_torch_thread")`): the test machine's 2 cores
    are shared, and torch's threads fighting for them make a CNN step up to 10x slower (an action of the CNN took
    260 ms on 2 threads against 7 ms on 1). The scripts these tests start inherit the variable."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
