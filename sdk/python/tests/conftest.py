"""Fixtures of the SDK suite. It runs against a real wardend named by $WARDEN_URL and
$WARDEN_API_KEY (an admin key); test/sdk starts one and runs this suite."""

from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import warden  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get("WARDEN_URL") or not os.environ.get("WARDEN_API_KEY"):
        raise pytest.UsageError("set WARDEN_URL and WARDEN_API_KEY (an admin key) to a running wardend; "
                                "go test ./test/sdk does")


@pytest.fixture(scope="session")
def client() -> warden.Warden:
    return warden.Warden()


@pytest.fixture(scope="session")
def sandbox(client: warden.Warden) -> Iterator[warden.Sandbox]:
    """One sandbox shared by the tests that only need somewhere to run."""
    with client.sandboxes.create(metadata={"suite": "python-sdk"}, timeout_seconds=600) as sb:
        yield sb
