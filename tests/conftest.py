"""Shared test fixtures.

Real test data lives outside the repository in ``../shared/data`` (override with the environment variable
``PHYSSKIN_SHARED_DATA``). Tests that need it use the ``shared_data`` fixture or ``requires_shared_data`` and
are skipped with a clear reason when it is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("PHYSSKIN_SHARED_DATA", REPO_ROOT.parent / "shared" / "data")).resolve()
DATA_DIR = REPO_ROOT / "data"

requires_shared_data = pytest.mark.skipif(
    not (SHARED_DATA / "splats").is_dir(),
    reason=f"shared test data not found at {SHARED_DATA} (set PHYSSKIN_SHARED_DATA)",
)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path to ``../shared/data``; skips the test when it is absent."""
    if not (SHARED_DATA / "splats").is_dir():
        pytest.skip(f"shared test data not found at {SHARED_DATA} (set PHYSSKIN_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def splats_dir(shared_data: Path) -> Path:
    return shared_data / "splats"


@pytest.fixture(scope="session")
def meshes_dir(shared_data: Path) -> Path:
    return shared_data / "meshes"


@pytest.fixture
def one_torch_thread():
    """Run a test with one torch thread (small tensors; avoids oversubscribing 2-core machines), restored after."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
