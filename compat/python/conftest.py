"""Connection settings for the compatibility suite, from the environment compat/run sets.

COMPAT_URL points either at PostgreSQL directly or at pgvia; the tests do not know which,
so every test must pass on both (compat/run checks that).
"""

import os

import pytest


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.exit(f"{name} is not set: run the suite through compat/run", returncode=2)
    return value


@pytest.fixture(scope="session")
def url() -> str:
    return _env("COMPAT_URL")


@pytest.fixture(scope="session")
def stress_seconds() -> float:
    return float(os.environ.get("COMPAT_STRESS_SECONDS", "10"))


@pytest.fixture(scope="session")
def stress_clients() -> int:
    return int(os.environ.get("COMPAT_STRESS_CLIENTS", "50"))
