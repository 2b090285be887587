"""Shared test fixtures.

Real test data lives outside the repository in ``../shared/data`` (override with the environment variable
``PHYSSKIN_SHARED_DATA``); part of it is not licence-clean and is never committed. So that a fresh clone still
runs most of the suite, the licence-clean files are also in the repository (``data/`` and ``tests/data/``, listed
with source, licence and sha256 in ``data/SOURCES.md``, byte-identical to the shared copies):

- ``splat_file(name)`` / ``mesh_file(name)``: the repository copy, else the shared copy, else the test skips
  with the reason. ``mesh_file(name, fallback=other)`` (likewise ``splat_file``) uses ``other`` where ``name`` is
  only in the shared data (for tests that need "some closed mesh", not facts of that one file).
- ``inria_sh3(name)``: an INRIA SH-3 PLY with zero nx/ny/nz and raw (unnormalised) quaternions: the real shared
  file ``name`` when present, else a stand-in written at test time from the CC0 spot splat (random SH bands,
  raw quaternion norms, a few extreme log-scales). The returned record carries the file's own counts for the
  assertions, so no assertion is weakened for the stand-in.
- ``flat_mesh``: a zero-thickness mesh (z = 0): the shared ``c3d_alligator.obj`` when present, else a planar
  mesh written at test time.

``shared_data`` / ``splats_dir`` / ``meshes_dir`` / ``requires_shared_data`` stay for tests that need facts of
files that only the shared folder holds; they skip with a clear reason when it is absent.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("PHYSSKIN_SHARED_DATA", REPO_ROOT.parent / "shared" / "data")).resolve()
DATA_DIR = REPO_ROOT / "data"
TESTS_DATA = REPO_ROOT / "tests" / "data"
REPO_DATA_DIRS = (DATA_DIR, TESTS_DATA)

SHARED_REASON = f"shared test data not found at {SHARED_DATA} (set PHYSSKIN_SHARED_DATA)"

requires_shared_data = pytest.mark.skipif(not (SHARED_DATA / "splats").is_dir(), reason=SHARED_REASON)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path to ``../shared/data``; skips the test when it is absent."""
    if not (SHARED_DATA / "splats").is_dir():
        pytest.skip(SHARED_REASON)
    return SHARED_DATA


@pytest.fixture(scope="session")
def splats_dir(shared_data: Path) -> Path:
    return shared_data / "splats"


@pytest.fixture(scope="session")
def meshes_dir(shared_data: Path) -> Path:
    return shared_data / "meshes"


# ------------------------------------------------------------------------------------ repo copy, else shared
def find_data_file(kind: str, name: str) -> Optional[Path]:
    """``name`` in the repository (``data/``, ``tests/data/``), else in ``../shared/data/<kind>``, else None."""
    for d in REPO_DATA_DIRS:
        if (d / name).is_file():
            return d / name
    shared = SHARED_DATA / kind / name
    return shared if shared.is_file() else None


def _not_here(kind: str, name: str) -> str:
    return (f"{name} is only in the shared test data (not committed, see data/SOURCES.md), which was not found "
            f"at {SHARED_DATA / kind} (set PHYSSKIN_SHARED_DATA)")


def _resolver(kind: str) -> Callable[..., Path]:
    def get(name: str, fallback: Optional[str] = None) -> Path:
        path = find_data_file(kind, name)
        if path is None and fallback is not None:
            path = find_data_file(kind, fallback)
        if path is None:
            pytest.skip(_not_here(kind, name))
        return path

    return get


@pytest.fixture(scope="session")
def splat_file() -> Callable[..., Path]:
    """``splat_file(name, fallback=None)``: a Gaussian file by its shared name (repository copy first), else the
    licence-clean ``fallback``; skips if neither is available."""
    return _resolver("splats")


@pytest.fixture(scope="session")
def mesh_file() -> Callable[..., Path]:
    """``mesh_file(name, fallback=None)``: a mesh by its shared name (repository copy first), else the
    licence-clean ``fallback``; skips if neither is available."""
    return _resolver("meshes")


# ------------------------------------------------------------------------------------ INRIA SH-3 sample
@dataclass(frozen=True)
class InriaSample:
    """An INRIA SH-3 PLY and facts of that file, for assertions."""

    path: Path
    count: int  # Gaussians
    log_scale_below_min: int  # rows with a log-scale below -20 (validate()'s LOG_SCALE_LOW)
    real: bool  # the shared third-party file (False: the stand-in)

    @property
    def name(self) -> str:
        return self.path.name


# Facts of the shared INRIA files (../shared/data/SOURCES.md; counts of log-scales < -20 measured).
SHARED_INRIA = {
    "lego_gsplat_sh3.ply": (12828, 0),
    "scene_tile_lod3_sh3.ply": (1971, 26),
    "scene_tile_lod4_sh3.ply": (489, 1),
    "scene_tile_lod5_sh3.ply": (111, 0),
}

STANDIN_NAME = "spot_sh3_standin.ply"
STANDIN_STRIDE = 5  # every 5th Gaussian of the 10k spot splat: 2000
STANDIN_EXTREME_EVERY = 100  # rows 7, 107, ...: one axis at a log-scale of about -21.5 (as in the LoD tiles)


def write_sh3_standin(path) -> InriaSample:
    """Write the licence-clean INRIA SH-3 stand-in and return its facts.

    Built from ``data/spot_mesh2splat_10k.splat`` (CC0) with a fixed seed: every 5th Gaussian (2000); DC colours
    and centres kept; log-scales jittered (N(0, 0.3) per axis) with every 100th row given one axis at -21.5
    (extreme but legal, like the real LoD tiles); opacity logits uniform in [-3, 8]; quaternions scaled to raw
    norms uniform in [0.3, 2.1] (like the trained lego); 45 SH-rest coefficients N(0, 0.05). Written by
    ``save_scene``: the fixed 62-float INRIA record with zero nx/ny/nz, as INRIA's own writer does.
    """
    from physskin_gs.io import load_scene, save_scene
    from physskin_gs.scene import GaussianScene

    spot = load_scene(DATA_DIR / "spot_mesh2splat_10k.splat")
    idx = torch.arange(0, spot.num_gaussians, STANDIN_STRIDE)
    n = int(idx.numel())
    rng = np.random.default_rng(20240612)
    log_scales = spot.log_scales[idx].numpy() + rng.normal(0.0, 0.3, (n, 3)).astype(np.float32)
    extreme = np.arange(7, n, STANDIN_EXTREME_EVERY)
    log_scales[extreme, 2] = -21.5
    norms = rng.uniform(0.3, 2.1, n).astype(np.float32)
    scene = GaussianScene(
        means=spot.means[idx].clone(),
        quats=spot.quats[idx] * torch.from_numpy(norms)[:, None],
        log_scales=torch.from_numpy(log_scales.astype(np.float32)),
        opacity_logits=torch.from_numpy(rng.uniform(-3.0, 8.0, n).astype(np.float32)),
        sh_dc=spot.sh_dc[idx].clone(),
        sh_rest=torch.from_numpy(rng.normal(0.0, 0.05, (n, 15, 3)).astype(np.float32)),
        source="spot_mesh2splat_10k.splat (SH-3 stand-in)",
        format="inria-ply",
    )
    out = Path(save_scene(scene, path))
    return InriaSample(out, n, int(extreme.size), real=False)


@pytest.fixture(scope="session")
def sh3_standin(tmp_path_factory) -> InriaSample:
    """The licence-clean INRIA SH-3 stand-in (always available)."""
    return write_sh3_standin(tmp_path_factory.mktemp("sh3_standin") / STANDIN_NAME)


@pytest.fixture(scope="session")
def inria_sh3(sh3_standin) -> Callable[[str], InriaSample]:
    """``inria_sh3(name)``: the shared INRIA SH-3 file ``name`` when present, else the stand-in. For tests that
    need "an SH-3 INRIA PLY (zero normals, raw quaternions)", not facts of that one file."""
    def get(name: str) -> InriaSample:
        path = SHARED_DATA / "splats" / name
        if name in SHARED_INRIA and path.is_file():
            count, below = SHARED_INRIA[name]
            return InriaSample(path, count, below, real=True)
        return sh3_standin

    return get


# ------------------------------------------------------------------------------------ flat mesh
FLAT_STANDIN_NAME = "flat_star.obj"


def write_flat_mesh(path) -> Path:
    """A zero-thickness (z = 0) triangulated 7-pointed star with a hole-free fan of 4 rings: 2D like the
    alligator, non-square in x/y."""
    k, rings = 14, 4  # 14 boundary corners (7 points), rings of vertices towards the centre
    lines = ["# planar 7-pointed star, z = 0 (physskin_gs test fixture)", "v 0 0 0"]
    for r in range(1, rings + 1):
        for j in range(k):
            a = 2 * math.pi * j / k
            rad = (1.0 if j % 2 == 0 else 0.45) * r / rings
            lines.append(f"v {1.6 * rad * math.cos(a):.6f} {rad * math.sin(a):.6f} 0")
    faces = [(1, 2 + j, 2 + (j + 1) % k) for j in range(k)]
    for r in range(1, rings):
        base_in, base_out = 2 + (r - 1) * k, 2 + r * k
        for j in range(k):
            a, b = base_in + j, base_in + (j + 1) % k
            c, d = base_out + j, base_out + (j + 1) % k
            faces += [(a, c, d), (a, d, b)]
    lines += [f"f {a} {b} {c}" for a, b, c in faces]
    Path(path).write_text("\n".join(lines) + "\n")
    return Path(path)


@pytest.fixture(scope="session")
def flat_mesh(tmp_path_factory) -> Path:
    """A flat (zero z extent) mesh: shared ``c3d_alligator.obj`` when present, else a planar stand-in."""
    shared = SHARED_DATA / "meshes" / "c3d_alligator.obj"
    if shared.is_file():
        return shared
    return write_flat_mesh(tmp_path_factory.mktemp("flat_mesh") / FLAT_STANDIN_NAME)


@pytest.fixture
def one_torch_thread():
    """Run a test with one torch thread (small tensors; avoids oversubscribing 2-core machines), restored after."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def blob_scene(n: int = 300, seed: int = 0, log_scale: float = -3.0, size=(1.0, 0.4, 0.4)):
    """A synthetic GaussianScene: n opaque Gaussians (opacity logit 3) scattered uniformly in a box of ``size``
    (scene units, centred on the origin; default 1 x 0.4 x 0.4), isotropic std exp(log_scale), random DC colour,
    SH degree 0 (tests build their inputs from it)."""
    import torch

    from physskin_gs.scene import C0, GaussianScene

    g = torch.Generator().manual_seed(seed)
    means = (torch.rand(n, 3, generator=g) - 0.5) * torch.tensor([float(v) for v in size])
    return GaussianScene(
        means=means.float(), quats=torch.tensor([[1.0, 0.0, 0.0, 0.0]]).repeat(n, 1),
        log_scales=torch.full((n, 3), float(log_scale)), opacity_logits=torch.full((n,), 3.0),
        sh_dc=((torch.rand(n, 3, generator=g) - 0.5) / C0).float(), sh_rest=torch.zeros(n, 0, 3),
        source=None, format="synthetic")


def save_scene_file(scene, path) -> Path:
    """``scene`` written as an INRIA PLY at ``path``; returns the path."""
    from physskin_gs.io import save_scene

    save_scene(scene, path)
    return Path(path)
