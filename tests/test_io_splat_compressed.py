"""antimatter15 .splat and PlayCanvas compressed PLY decoding (formats.md sections 2-3): the real samples,
a plain per-splat reference decoder holding the vectorised one, and gsplat.export_splats fixtures decoded
back within the formats' quantisation."""

from __future__ import annotations

import math
import os
import struct

import numpy as np
import pytest
import torch
from scipy.spatial import cKDTree

from physskin_gs.errors import SceneFormatError
from physskin_gs.io import detect_format, load_scene, save_scene
from physskin_gs.io.ply_header import read_elements, read_ply_header
from physskin_gs.scene import C0

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---------------------------------------------------------------- .splat


@pytest.mark.parametrize("name,count", [("plant_capture.splat", 113648), ("spot_mesh2splat_10k.splat", 10000)])
def test_real_splat_files(splat_file, name, count):
    path = splat_file(name)
    assert detect_format(path) == "splat"
    s = load_scene(path)
    assert s.format == "splat" and s.num_gaussians == count and s.sh_degree == 0
    assert tuple(s.sh_rest.shape) == (count, 0, 3)
    for f in ("means", "quats", "log_scales", "opacity_logits", "sh_dc"):
        assert torch.isfinite(getattr(s, f)).all(), f  # A = 0 / 255 clamped before the logit
    qn = s.quats.norm(dim=1)
    assert torch.allclose(qn, torch.ones_like(qn), atol=1e-5)
    raw = np.fromfile(path, dtype="<f4").reshape(-1, 8)
    np.testing.assert_array_equal(s.means.numpy(), raw[:, :3])
    np.testing.assert_allclose(s.scales.numpy(), raw[:, 3:6], rtol=1e-6)


def test_splat_record_decoding_reference(tmp_path):
    """Hand-built records against the formulas of formats.md section 2."""
    recs = [
        ((1.0, 2.0, 3.0), (0.5, 0.25, 2.0), (255, 0, 128, 255), (128 + 64, 128, 128, 128 - 64)),
        ((-1.0, 0.0, 0.5), (1.0, 1.0, 1.0), (10, 20, 30, 0), (128, 128, 128, 128)),  # zero quat -> identity
        ((0.0, 0.0, 0.0), (0.1, 0.2, 0.3), (1, 2, 3, 128), (255, 0, 0, 0)),
    ]
    buf = b"".join(struct.pack("<6f4B4B", *p, *sc, *c, *q) for p, sc, c, q in recs)
    path = tmp_path / "hand.splat"
    path.write_bytes(buf)
    s = load_scene(path)
    for i, (p, sc, c, q) in enumerate(recs):
        assert s.means[i].tolist() == list(p)
        np.testing.assert_allclose(s.log_scales[i].numpy(), np.log(sc), rtol=1e-6)
        np.testing.assert_allclose(s.sh_dc[i].numpy(), (np.array(c[:3]) / 255 - 0.5) / C0, rtol=1e-5, atol=1e-6)
        a = min(max(c[3] / 255, 1 / 512), 1 - 1 / 512)
        assert math.isclose(float(s.opacity_logits[i]), math.log(a / (1 - a)), rel_tol=1e-5, abs_tol=1e-6)
        qq = (np.array(q, dtype=np.float64) - 128) / 128
        qq = qq / np.linalg.norm(qq) if np.linalg.norm(qq) > 0 else np.array([1.0, 0, 0, 0])
        np.testing.assert_allclose(s.quats[i].numpy(), qq, atol=1e-6)
    assert np.isfinite(s.opacity_logits.numpy()).all()



def test_a_zero_scale_in_a_splat_is_a_flat_splat_not_an_invalid_row(tmp_path):
    """A zero linear scale (a flat, 2D-style splat, or a log-scale under float32's range written out) reads as
    log-scale FLAT_LOG_SCALE: the row is valid, drawn and moved (it read as -inf, so the row was invalid:
    invisible and static). A negative scale is still invalid and warned about."""
    from physskin_gs.io.splat import FLAT_LOG_SCALE
    from physskin_gs.io.validate import invalid_mask

    recs = [((0.0, 0.0, 0.0), (0.5, 0.0, 0.25), (200, 100, 50, 255), (255, 128, 128, 128)),
            ((1.0, 0.0, 0.0), (0.5, -0.1, 0.25), (200, 100, 50, 255), (255, 128, 128, 128))]
    path = tmp_path / "flat.splat"
    path.write_bytes(b"".join(struct.pack("<6f4B4B", *p, *sc, *c, *q) for p, sc, c, q in recs))
    with pytest.warns(UserWarning, match="1 records have negative or non-finite scales"):
        s = load_scene(path)
    np.testing.assert_allclose(s.log_scales[0].numpy(), [math.log(0.5), FLAT_LOG_SCALE, math.log(0.25)], rtol=1e-6)
    assert np.isnan(s.log_scales[1, 1].item())
    assert invalid_mask(s).tolist() == [False, True]


def test_splat_bad_sizes(tmp_path):
    p = tmp_path / "bad.splat"
    p.write_bytes(b"\x00" * 33)
    with pytest.raises(SceneFormatError, match=r"bad\.splat.*not a multiple of the 32-byte record"):
        load_scene(p)
    p.write_bytes(b"")
    with pytest.raises(SceneFormatError, match=r"bad\.splat: empty file"):
        load_scene(p)


def test_splat_detected_by_content_without_extension(splat_file, tmp_path):
    p = tmp_path / "spot.bin"
    p.write_bytes(splat_file("spot_mesh2splat_10k.splat").read_bytes())
    assert detect_format(p) == "splat"
    assert load_scene(p).num_gaussians == 10000


def test_demo_data_matches_sources(tmp_path):
    data = os.path.join(REPO, "data")
    for name, n in (("spot_mesh2splat_10k.splat", 10000), ("plant_capture.splat", 113648)):
        path = os.path.join(data, name)
        if not os.path.exists(path):
            pytest.skip(f"{path} absent")
        import hashlib

        digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
        assert digest in open(os.path.join(data, "SOURCES.md")).read()
        assert load_scene(path).num_gaussians == n


# --------------------------------------------------------- compressed PLY


def _reference_decode(path):
    """Plain per-splat decoder written straight from the formats.md section 3 table (slow; small inputs)."""
    h = read_ply_header(str(path))
    els = read_elements(h, tuple(e.name for e in h.elements))
    chunk, vert = els["chunk"], els["vertex"]
    sh = els.get("sh")

    def un(v, bits):
        return (v & ((1 << bits) - 1)) / ((1 << bits) - 1)

    out = []
    for i in range(len(vert)):
        c = chunk[i // 256]
        row = vert[i]
        pp, pr, ps, pc = (int(row[k]) for k in ("packed_position", "packed_rotation", "packed_scale", "packed_color"))
        t = (un(pp >> 21, 11), un(pp >> 11, 10), un(pp, 11))
        pos = [c[f"min_{a}"] + (c[f"max_{a}"] - c[f"min_{a}"]) * t[j] for j, a in enumerate("xyz")]
        t = (un(ps >> 21, 11), un(ps >> 11, 10), un(ps, 11))
        scl = [c[f"min_scale_{a}"] + (c[f"max_scale_{a}"] - c[f"min_scale_{a}"]) * t[j] for j, a in enumerate("xyz")]
        abc = [(un(pr >> s, 10) - 0.5) * math.sqrt(2) for s in (20, 10, 0)]
        m = math.sqrt(max(0.0, 1 - sum(x * x for x in abc)))
        idx = pr >> 30
        q, it = [], iter(abc)
        for slot in range(4):
            q.append(m if slot == idx else next(it))
        col = [un(pc >> s, 8) for s in (24, 16, 8, 0)]
        rgb = [c[f"min_{a}"] + (c[f"max_{a}"] - c[f"min_{a}"]) * col[j] for j, a in enumerate("rgb")]
        dc = [(x - 0.5) / C0 for x in rgb]
        a = min(max(col[3], 1 / 512), 1 - 1 / 512)
        op = -math.log(1 / a - 1)
        rest = []
        if sh is not None:
            names = sorted(sh.dtype.names, key=lambda n: int(n.split("_")[-1]))
            for n in names:
                u = int(sh[i][n])
                v = 0.0 if u == 0 else 1.0 if u == 255 else (u + 0.5) / 256
                rest.append((v - 0.5) * 8)
        out.append((pos, scl, q, dc, op, rest))
    return out


def test_compressed_test_sh_against_reference(splat_file):
    path = splat_file("playcanvas_test_sh.compressed.ply")
    assert detect_format(path) == "compressed-ply"
    s = load_scene(path)
    assert s.format == "compressed-ply" and s.num_gaussians == 64 and s.sh_degree == 3
    ref = _reference_decode(path)
    for i, (pos, scl, q, dc, op, rest) in enumerate(ref):
        np.testing.assert_allclose(s.means[i].numpy(), pos, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(s.log_scales[i].numpy(), scl, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(s.quats[i].numpy(), q, atol=1e-6)
        np.testing.assert_allclose(s.sh_dc[i].numpy(), dc, rtol=1e-5, atol=1e-5)
        assert math.isclose(float(s.opacity_logits[i]), op, rel_tol=1e-5, abs_tol=1e-5)
        # channel-major: field c*15 + k -> sh_rest[k, c]
        np.testing.assert_allclose(s.sh_rest[i].numpy(), np.array(rest).reshape(3, 15).T, atol=1e-6)


def test_compressed_guitar_decodes_inside_chunk_bounds(splats_dir):
    path = splats_dir / "guitar_playcanvas.compressed.ply"
    s = load_scene(path)
    assert s.num_gaussians == 90854 and s.sh_degree == 0
    h = read_ply_header(str(path))
    chunk = read_elements(h, ("chunk",))["chunk"]
    assert len(chunk) == 355
    ci = np.arange(90854) // 256
    lo = np.stack([chunk[f"min_{a}"] for a in "xyz"], 1)[ci]
    hi = np.stack([chunk[f"max_{a}"] for a in "xyz"], 1)[ci]
    m = s.means.numpy()
    assert np.all(m >= lo - 1e-6) and np.all(m <= hi + 1e-6)
    slo = np.stack([chunk[f"min_scale_{a}"] for a in "xyz"], 1)[ci]
    shi = np.stack([chunk[f"max_scale_{a}"] for a in "xyz"], 1)[ci]
    ls = s.log_scales.numpy()
    assert np.all(ls >= slo - 1e-6) and np.all(ls <= shi + 1e-6)
    # the extreme codes reach the bounds exactly: per-axis extremes equal the chunk table's extremes
    # (x spans -17.42..-0.90 as formats.md says; z goes down to -19.41)
    np.testing.assert_allclose(ls.min(0), [chunk[f"min_scale_{a}"].min() for a in "xyz"], rtol=1e-6)
    np.testing.assert_allclose(ls.max(0), [chunk[f"max_scale_{a}"].max() for a in "xyz"], rtol=1e-6)
    assert -17.5 < ls[:, 0].min() < -17.3 and -1.0 < ls[:, 0].max() < -0.8
    # the largest |component| of every decoded unit quaternion is >= 0.5
    q = s.quats.numpy()
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=2e-3)
    assert np.abs(q).max(axis=1).min() >= 0.5 - 1e-6
    assert np.isfinite(s.opacity_logits.numpy()).all()  # A = 255 occurs: clamped
    ref = _reference_decode_first(path, 300)
    for i, (pos, scl, qq, dc, op, _) in enumerate(ref):
        np.testing.assert_allclose(s.means[i].numpy(), pos, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(s.quats[i].numpy(), qq, atol=1e-6)
        np.testing.assert_allclose(s.sh_dc[i].numpy(), dc, rtol=1e-5, atol=1e-5)


def _reference_decode_first(path, n):
    """Reference decode of the first n splats only (builds a trimmed copy in memory)."""
    import tempfile

    h = read_ply_header(str(path))
    els = read_elements(h, ("chunk", "vertex"))
    from plyfile import PlyData, PlyElement

    chunks = -(-n // 256)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "first.compressed.ply")
        PlyData([PlyElement.describe(np.asarray(els["chunk"][:chunks]), "chunk"),
                 PlyElement.describe(np.asarray(els["vertex"][:n]), "vertex")]).write(p)
        return _reference_decode(p)


def test_compressed_short_chunk_table_rejected(splats_dir, tmp_path):
    from plyfile import PlyData, PlyElement

    h = read_ply_header(str(splats_dir / "guitar_playcanvas.compressed.ply"))
    els = read_elements(h, ("chunk", "vertex"))
    p = tmp_path / "short.compressed.ply"
    PlyData([PlyElement.describe(np.asarray(els["chunk"][:300]), "chunk"),
             PlyElement.describe(np.asarray(els["vertex"]), "vertex")]).write(str(p))
    with pytest.raises(SceneFormatError, match=r"short\.compressed\.ply: compressed PLY chunk table too short: "
                                               r"300 chunks for 90854 splats"):
        load_scene(p)


def test_compressed_truncated_rejected(splat_file, tmp_path):
    data = splat_file("playcanvas_test_sh.compressed.ply").read_bytes()
    p = tmp_path / "cut.ply"
    p.write_bytes(data[:-100])
    with pytest.raises(SceneFormatError, match=r"cut\.ply: truncated file: element 'sh'"):
        load_scene(p)


def test_compressed_convert_roundtrip(splat_file, tmp_path):
    """Decoded values survive INRIA save/load bit for bit (no second quantisation)."""
    a = load_scene(splat_file("playcanvas_test_sh.compressed.ply"))
    b = load_scene(save_scene(a, tmp_path / "dec.ply"))
    for f in ("means", "quats", "log_scales", "opacity_logits", "sh_dc", "sh_rest"):
        assert torch.equal(getattr(a, f), getattr(b, f))


# ------------------------------------------------- gsplat.export_splats fixtures


@pytest.fixture(scope="module")
def random_gaussians():
    g = torch.Generator().manual_seed(0)
    n = 600
    means = torch.rand(n, 3, generator=g) * 2 - 1
    log_scales = -1 - 4 * torch.rand(n, 3, generator=g)
    quats = torch.randn(n, 4, generator=g) * 1.7  # raw, unnormalised
    opac = torch.randn(n, generator=g) * 2 + 1
    rgb = 0.05 + 0.9 * torch.rand(n, 3, generator=g)  # inside [0, 1] so .splat does not clamp
    sh0 = ((rgb - 0.5) / C0)[:, None, :]
    shN = (torch.rand(n, 15, 3, generator=g) * 2 - 1) * 0.8
    return means, log_scales, quats, opac, sh0, shN


def _match(decoded_means, means):
    dist, idx = cKDTree(means.numpy()).query(decoded_means.numpy())
    return torch.from_numpy(idx), float(dist.max())


def _quat_abs_dot(a, b):
    a = a / a.norm(dim=1, keepdim=True)
    b = b / b.norm(dim=1, keepdim=True)
    return (a * b).sum(1).abs()


def test_gsplat_ply_export_exact(random_gaussians, tmp_path):
    from gsplat import export_splats

    means, ls, q, op, sh0, shN = random_gaussians
    p = tmp_path / "g.ply"
    export_splats(means, ls, q, op, sh0, shN, format="ply", save_to=str(p))
    s = load_scene(p)  # gsplat writes no normals
    assert s.format == "inria-ply" and s.sh_degree == 3
    assert torch.equal(s.means, means) and torch.equal(s.quats, q) and torch.equal(s.log_scales, ls)
    assert torch.equal(s.opacity_logits, op) and torch.equal(s.sh_dc, sh0[:, 0]) and torch.equal(s.sh_rest, shN)


def test_gsplat_splat_export_within_quantisation(random_gaussians, tmp_path):
    from gsplat import export_splats

    means, ls, q, op, sh0, shN = random_gaussians
    p = tmp_path / "g.splat"
    export_splats(means, ls, q, op, sh0, shN, format="splat", save_to=str(p))
    s = load_scene(p)
    assert s.num_gaussians == len(means)
    idx, dist = _match(s.means, means)
    assert dist == 0.0 and len(set(idx.tolist())) == len(means)  # float positions are exact
    torch.testing.assert_close(s.log_scales, ls[idx], atol=1e-6, rtol=1e-6)
    assert float((s.sh_dc - sh0[idx, 0]).abs().max()) <= 1.01 / 255 / C0  # 8-bit colour (truncated)
    assert float((s.opacities - torch.sigmoid(op[idx])).abs().max()) <= 1.01 / 255
    assert float(_quat_abs_dot(s.quats, q[idx]).min()) > 0.999  # 8-bit components


def test_gsplat_compressed_export_within_quantisation(random_gaussians, tmp_path):
    from gsplat import export_splats

    means, ls, q, op, sh0, shN = random_gaussians
    p = tmp_path / "g.compressed.ply"
    export_splats(means, ls, q, op, sh0, shN, format="ply_compressed", save_to=str(p))
    s = load_scene(p)
    keep = torch.sigmoid(op) > 1 / 255  # gsplat drops nearly transparent splats
    assert s.format == "compressed-ply" and s.num_gaussians == int(keep.sum()) and s.sh_degree == 3
    idx, dist = _match(s.means, means)
    assert len(set(idx.tolist())) == s.num_gaussians
    assert dist < 2.0 / 1023  # 11/10/11-bit positions in chunks no wider than the [-1, 1] cube
    assert float((s.log_scales - ls[idx]).abs().max()) < 4.0 / 1023
    assert float(_quat_abs_dot(s.quats, q[idx]).min()) > 0.9999  # 10-bit smallest-three
    assert float((s.sh_dc - sh0[idx, 0]).abs().max()) < 1.01 / 255 / C0 / 2 * 1.0 + 1e-3
    assert float((s.opacities - torch.sigmoid(op[idx])).abs().max()) < 1.01 / 255
    assert float((s.sh_rest - shN[idx]).abs().max()) <= 8 / 256 / 2 + 1e-6  # 8-bit SH on [-4, 4]
