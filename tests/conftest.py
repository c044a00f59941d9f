"""One test body for every backend: the ``--ceed`` option and the ``ceed`` fixture."""

import pytest

import hofem as hf


def pytest_addoption(parser):
    parser.addoption(
        "--ceed",
        action="append",
        default=None,
        help="backend resource to test (repeatable); default: every available backend",
    )
    parser.addoption(
        "--shard",
        default=None,
        metavar="I/N",
        help="run only the I-th of N contiguous slices of the selected tests (0 <= I < N), "
        "e.g. one slice per GPU",
    )


def _shard(text):
    """``(i, n)`` of a ``--shard I/N`` value, or a usage error naming the option."""
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        i = n = -1
    if not 0 <= i < n:
        raise pytest.UsageError(f"--shard must be I/N with 0 <= I < N (e.g. 0/4), got {text!r}")
    return i, n


def pytest_collection_modifyitems(config, items):
    """``--shard I/N``: keep the I-th contiguous slice (module fixtures stay in one slice)."""
    text = config.getoption("--shard")
    if text is None:
        return
    i, n = _shard(text)
    start, stop = len(items) * i // n, len(items) * (i + 1) // n
    config.hook.pytest_deselected(items=items[:start] + items[stop:])
    items[:] = items[start:stop]


def _resources(config):
    chosen = config.getoption("--ceed")
    return chosen if chosen else hf.available()


def pytest_generate_tests(metafunc):
    if "ceed" in metafunc.fixturenames:
        params = [
            pytest.param(r, id=r, marks=[pytest.mark.gpu] if r.startswith("/gpu") else [])
            for r in _resources(metafunc.config)
        ]
        metafunc.parametrize("ceed", params, indirect=True, scope="module")


_CEEDS = {}


@pytest.fixture(scope="module")
def ceed(request):
    """A Ceed for the backend under test (one per resource per module)."""
    if request.param not in _CEEDS:
        _CEEDS[request.param] = hf.Ceed(request.param)
    return _CEEDS[request.param]


@pytest.fixture
def ref():
    """The reference backend, the oracle the others are compared to."""
    return hf.Ceed("/cpu/self/ref")
