"""Every test under tests/integration carries the `integration` marker (set it once per module:
`pytestmark = pytest.mark.integration`), so `-m integration` and `-m 'not integration'` select
the tiers exactly; a module without it stops the collection with its name."""

import os

import pytest


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__) + os.sep
    unmarked = sorted({str(item.path) for item in items if str(item.path).startswith(here)
                       and not item.get_closest_marker("integration")})  # fmt: skip
    if unmarked:
        raise pytest.UsageError(
            "modules in tests/integration without `pytestmark = pytest.mark.integration`: "
            + ", ".join(os.path.relpath(path) for path in unmarked)
        )
