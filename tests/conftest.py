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
