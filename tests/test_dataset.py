"""Tests for physskin_gs.geometry.dataset: ShapeSample builders, safetensors cache, augmentation, splits."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import trimesh

from physskin_gs.errors import SceneFormatError
from physskin_gs.geometry.dataset import (
    EXCLUDED_MESHES,
    HELD_OUT_MESHES,
    HELD_OUT_SPLATS,
    ShapeDataset,
    ShapeSample,
    augment_sample,
    default_training_paths,
    load_sample,
    procedural_sample,
    sample_from_mesh,
    sample_from_splat,
    save_sample,
)
from physskin_gs.geometry.normalize import DegenerateGeometryError
from physskin_gs.io.mesh import Mesh


def _sphere_mesh() -> Mesh:
    s = trimesh.creation.icosphere(subdivisions=3, radius=5.0)
    return Mesh(s.vertices + 3.0, s.faces, source="sphere.obj")


def test_sample_from_mesh_sphere():
    s = sample_from_mesh(_sphere_mesh(), n_encoder=512, n_volume=4000, seed=0)
    assert s.name == "sphere.obj"
    assert s.surface.shape == (512, 3) and s.volume.shape == (4000, 3) and s.normals.shape == (512, 3)
    assert s.surface.dtype == torch.float32
    r_s = s.surface.norm(dim=1)
    assert (r_s - 1).abs().max() < 0.01  # normalised frame: the sphere has radius 1
    assert s.volume.norm(dim=1).max() < 1.0 + 1e-3
    assert (s.volume.norm(dim=1) < 0.95).float().mean() > 0.6  # mostly interior points
    # Outward normals on a sphere: normal . position ~ 1.
    assert ((s.normals * s.surface).sum(1) > 0.95).all()
    again = sample_from_mesh(_sphere_mesh(), n_encoder=512, n_volume=4000, seed=0)
    assert torch.equal(s.surface, again.surface) and torch.equal(s.volume, again.volume)


def test_sample_from_mesh_rejects_flat(flat_mesh):
    with pytest.raises(DegenerateGeometryError, match=flat_mesh.name.replace(".", r"\.")):
        sample_from_mesh(flat_mesh)


def test_sample_from_splat(splat_file):
    from physskin_gs.io import load_scene

    scene = load_scene(splat_file("spot_mesh2splat_10k.splat"))
    s = sample_from_splat(scene, n_encoder=1024, n_volume=4000, seed=0)
    assert s.name == "spot_mesh2splat_10k.splat" and s.normals is None
    assert s.surface.shape == (1024, 3) and s.volume.shape == (4000, 3)
    assert torch.isclose(s.surface.abs().max(), torch.tensor(1.0), atol=0.02)
    # Tuple input with activated opacities gives the same encoder input.
    t = sample_from_splat((scene.means, scene.log_scales, torch.sigmoid(scene.opacity_logits)),
                          n_encoder=1024, n_volume=4000, seed=0)
    assert torch.equal(s.surface, t.surface)
    # Opacity filter: Gaussians below 0.05 never reach the encoder input.
    op = torch.full((scene.means.shape[0],), 0.9)
    op[::2] = 0.01
    f = sample_from_splat((scene.means, None, op), n_encoder=5000, n_volume=1000)
    kept = scene.means[1::2]
    lo, hi = kept.min(0).values, kept.max(0).values
    world = f.surface * (hi - lo).max() / 2 + (lo + hi) / 2
    d = ((world[:200, None, :] - kept[None]) ** 2).sum(-1).min(dim=1).values.sqrt()
    assert d.max() < 1e-5
    with pytest.raises(DegenerateGeometryError, match="no Gaussians"):
        sample_from_splat((scene.means, None, torch.zeros(scene.means.shape[0])))


def test_procedural_sample_deterministic():
    a, b = procedural_sample(5, n_encoder=256, n_volume=2000), procedural_sample(5, n_encoder=256, n_volume=2000)
    assert torch.equal(a.surface, b.surface) and torch.equal(a.volume, b.volume) and a.name == b.name
    assert a.volume.shape == (2000, 3) and a.surface.shape == (256, 3)


def test_safetensors_round_trip(tmp_path):
    s = procedural_sample(1, n_encoder=128, n_volume=500)
    save_sample(s, tmp_path / "a.safetensors")
    r = load_sample(tmp_path / "a.safetensors")
    assert r.name == s.name and torch.equal(r.surface, s.surface) and torch.equal(r.volume, s.volume)
    assert torch.equal(r.normals, s.normals)
    no_n = ShapeSample("x", s.surface, s.volume, None)
    save_sample(no_n, tmp_path / "b.safetensors")
    assert load_sample(tmp_path / "b.safetensors").normals is None
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(3)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(SceneFormatError, match="other.safetensors"):
        load_sample(tmp_path / "other.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"junk")
    with pytest.raises(SceneFormatError, match="junk.safetensors"):
        load_sample(tmp_path / "junk.safetensors")


def test_augmentation_renormalises():
    s = procedural_sample(2, n_encoder=256, n_volume=2000)
    a = augment_sample(s, np.random.default_rng(0))
    both = torch.cat([a.surface, a.volume])
    lo, hi = both.min(0).values, both.max(0).values
    assert torch.allclose((lo + hi) / 2, torch.zeros(3), atol=1e-5)
    assert torch.isclose((hi - lo).max(), torch.tensor(2.0), atol=1e-5)
    assert torch.allclose(a.normals.norm(dim=1), torch.ones(256), atol=1e-5)
    assert not torch.allclose(a.surface, s.surface)
    # Pairwise distance ratios are preserved up to the mild anisotropic scale (0.8-1.25 per axis).
    d0 = torch.pdist(s.surface[:50])
    d1 = torch.pdist(a.surface[:50])
    ratio = d1 / d0
    assert ratio.max() / ratio.min() <= 1.25 / 0.8 + 1e-4


def test_dataset_build_and_cache(tmp_path, mesh_file, flat_mesh, inria_sh3):
    # two closed meshes, a flat one (skipped with a warning) and an SH-3 splat
    paths = [mesh_file("robosuite_bread.stl"), mesh_file("pybullet_random_009.obj", fallback="robosuite_lemon.stl"),
             flat_mesh, inria_sh3("scene_tile_lod5_sh3.ply").path]
    with pytest.warns(UserWarning, match=flat_mesh.name.replace(".", r"\.")):
        ds = ShapeDataset.build(paths, cache_dir=tmp_path / "cache", num_procedural=2, seed=0,
                                n_encoder=256, n_volume=2000, resolution=32)
    assert len(ds) == 5 and [p for p, _ in ds.skipped] == [str(flat_mesh)]
    assert ds.names[:3] == [paths[0].name, paths[1].name, paths[3].name]
    files = sorted((tmp_path / "cache").glob("*.safetensors"))
    assert len(files) == 5
    with pytest.warns(UserWarning):
        again = ShapeDataset.build(paths, cache_dir=tmp_path / "cache", num_procedural=2, seed=0,
                                   n_encoder=256, n_volume=2000, resolution=32, augment=False)
    for a, b in zip(ds.samples, again.samples):
        assert a.name == b.name and torch.equal(a.surface, b.surface) and torch.equal(a.volume, b.volume)
    assert again[0] is again.samples[0]  # augment=False returns the stored sample
    x = ds.get(0, np.random.default_rng(3))
    y = ds.get(0, np.random.default_rng(3))
    assert torch.equal(x.surface, y.surface)
    assert x.surface.shape == (256, 3) and x.volume.shape == (2000, 3)


def test_training_split(shared_data):
    paths = default_training_paths(shared_data)
    names = {p.name for p in paths}
    assert not names & set(HELD_OUT_MESHES) and not names & set(EXCLUDED_MESHES) and not names & set(HELD_OUT_SPLATS)
    assert {"pybullet_bunny.obj", "pymeshlab_bunny.obj"} <= names  # both bunnies on the same side
    assert "plant_capture.splat" in names and "rubber_toy_cloud_sh3_NC.ply" not in names
    assert all(p.is_file() for p in paths) and len(HELD_OUT_MESHES) == 5
    for name in HELD_OUT_MESHES:
        assert (shared_data / "meshes" / name).is_file()
