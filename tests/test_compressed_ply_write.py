"""PlayCanvas / SuperSplat compressed PLY encoder (physskin_gs.io.compressed_ply.save_compressed_ply, formats.md
section 3): round trips within the quantisation bounds derived from the bit layout, hand-computed packed words,
row order and Morton order, file size, the real SuperSplat files re-encoded, and edge cases."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

from physskin_gs.errors import OptionError, SceneFormatError
from physskin_gs.io import detect_format, load_scene, save_scene
from physskin_gs.io.compressed_ply import (
    CHUNK_COLOR, CHUNK_REQUIRED, LOG_SCALE_CLIP, load_compressed_ply, morton_order, pack_rotation, save_compressed_ply,
    unpack_rotation,
)
from physskin_gs.io.ply_header import read_elements, read_ply_header
from physskin_gs.scene import C0, GaussianScene

AXES = "xyz"
BITS = np.array([11, 10, 11])  # packed 11/10/11 split of positions and log-scales
STEPS = (1 << BITS) - 1  # 2047, 1023, 2047 steps over a chunk's extent
#: float32 slack for the decoder's lerp lo + (hi - lo) t: a few ulps of the largest bound magnitude.
REL = 4 * float(np.finfo(np.float32).eps)


def _scene(n, k=0, seed=0, spread=1.0, sh_amp=3.95):
    """Random raw scene: means in a box of side 2*spread, raw unnormalised quats, f_rest inside +-sh_amp."""
    g = torch.Generator().manual_seed(seed)
    return GaussianScene(
        means=(torch.rand(n, 3, generator=g) * 2 - 1) * spread,
        quats=torch.randn(n, 4, generator=g) * 1.7,
        log_scales=-1 - 6 * torch.rand(n, 3, generator=g),
        opacity_logits=torch.randn(n, generator=g) * 3,
        sh_dc=torch.randn(n, 3, generator=g),
        sh_rest=(torch.rand(n, k, 3, generator=g) * 2 - 1) * sh_amp,
    )


def _raw(path):
    """(header, {element: structured array}) of a compressed PLY read without the decoder."""
    h = read_ply_header(str(path))
    return h, read_elements(h, tuple(e.name for e in h.elements))


def _row_bounds(chunk, names, n):
    """(N, len(names)) per-row values of chunk-table columns (row i uses chunk i // 256), float64."""
    return np.stack([chunk[c].astype(np.float64) for c in names], axis=1)[np.arange(n) // 256]


def _rotation_angle_bound():
    """Largest rotation angle (radians) between a unit quaternion and its 10-bit smallest-three decode.

    Each stored component v has step sqrt(2)/1023 (v = (u/1023 - 0.5) sqrt(2)), so round-to-nearest errs by at
    most d = sqrt(2)/1023/2 per component and e = sqrt(3) d on the 3-vector a of the small ones. The largest one
    is rebuilt as m' = sqrt(1 - |a'|^2) and |m' - m| = ||a'|^2 - |a|^2| / (m + m') <= (2|a| e + e^2) / (m + m'),
    largest at the smallest possible m = 1/2 (|a| = sqrt(3)/2, m' >= sqrt(1 - (sqrt(3)/2 + e)^2)). The chord
    |q' - q| <= sqrt(e^2 + dm^2) gives the 4D angle phi = 2 asin(chord / 2) and the rotation angle 2 phi:
    about 0.0048 rad (0.275 degrees).
    """
    d = math.sqrt(2.0) / 1023 / 2
    e = math.sqrt(3.0) * d
    a = math.sqrt(3.0) / 2
    dm = (2 * a * e + e * e) / (0.5 + math.sqrt(1 - (a + e) ** 2))
    chord = math.sqrt(e * e + dm * dm)
    return 2 * (2 * math.asin(chord / 2))


def _rotation_angles(q_in, q_dec):
    """(N,) rotation angles (radians) between raw input quats (zero -> identity) and decoded ones; q ~ -q."""
    q = q_in.astype(np.float64)
    nrm = np.linalg.norm(q, axis=1)
    q = np.where(nrm[:, None] > 0, q / np.where(nrm > 0, nrm, 1)[:, None], [1.0, 0, 0, 0])
    d = q_dec.astype(np.float64)
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    s = np.where((q * d).sum(1) < 0, -1.0, 1.0)[:, None]
    phi = 2 * np.arctan2(np.linalg.norm(q - s * d, axis=1), np.linalg.norm(q + s * d, axis=1))
    return 2 * phi


def _check_within_bounds(scene, path, order=None):
    """Decode ``path`` and assert every field of every row within the format's quantisation bounds of the
    (reordered) input, using the file's own chunk table. Returns a dict of the largest errors seen."""
    o = np.arange(scene.num_gaussians) if order is None else np.asarray(order)
    dec = load_compressed_ply(str(path))
    _, els = _raw(path)
    chunk = els["chunk"]
    n = scene.num_gaussians
    assert dec.num_gaussians == n
    out = {}
    # positions and log-scales: half a step of the chunk's per-axis extent (+ float32 lerp slack)
    for field, names, clip in (("means", CHUNK_REQUIRED[0:6], None),
                               ("log_scales", CHUNK_REQUIRED[6:12], LOG_SCALE_CLIP)):
        x = getattr(scene, field).numpy()[o].astype(np.float64)
        if clip is not None:
            x = np.clip(x, -clip, clip)
        lo, hi = _row_bounds(chunk, names[:3], n), _row_bounds(chunk, names[3:], n)
        assert np.all(x >= lo) and np.all(x <= hi), field  # the bounds enclose their rows
        err = np.abs(getattr(dec, field).numpy() - x)  # [N, 3]
        tol = (hi - lo) / STEPS / 2 + REL * np.maximum(np.abs(lo), np.abs(hi))
        assert np.all(err <= tol), (field, float((err - tol).max()))
        out[field] = float(err.max())
        out[field + "_step_frac"] = float((err / np.maximum((hi - lo) / STEPS, 1e-30)).max())
    # rotations: the derived 10-bit smallest-three angle bound
    ang = _rotation_angles(scene.quats.numpy()[o], dec.quats.numpy())
    assert ang.max() <= _rotation_angle_bound() + 1e-6, float(ang.max())
    out["rot_angle"] = float(ang.max())
    # colour rgb = 0.5 + C0 dc: half the 8-bit step of the chunk's colour range
    rgb = 0.5 + C0 * scene.sh_dc.numpy()[o].astype(np.float64)
    lo, hi = _row_bounds(chunk, CHUNK_COLOR[:3], n), _row_bounds(chunk, CHUNK_COLOR[3:], n)
    err = np.abs(0.5 + C0 * dec.sh_dc.numpy().astype(np.float64) - rgb)
    assert np.all(err <= (hi - lo) / 255 / 2 + 1e-6), float(err.max())
    out["rgb"] = float(err.max())
    # opacity in sigmoid space: 8 bits, round to nearest
    a = torch.sigmoid(scene.opacity_logits.double()).numpy()[o]
    err = np.abs(torch.sigmoid(dec.opacity_logits.double()).numpy() - a)
    assert err.max() <= 1 / 510 + 1e-6, float(err.max())
    out["opacity"] = float(err.max())
    if dec.sh_rest.shape[1]:
        err = np.abs(dec.sh_rest.numpy() - scene.sh_rest.numpy()[o])
        assert err.max() <= 8 / 512 + 1e-6, float(err.max())  # inputs stay inside +-(4 - 8/256)
        out["sh_rest"] = float(err.max())
    return out


# ------------------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("k", [0, 3, 15])
def test_roundtrip_random_scene_within_quantisation(tmp_path, k):
    s = _scene(1000, k=k, seed=k)  # 1000 = 3 full chunks + 232
    p = save_compressed_ply(s, tmp_path / "r.compressed.ply")
    assert p == str((tmp_path / "r.compressed.ply").resolve())
    assert detect_format(p) == "compressed-ply"
    h, els = _raw(p)
    assert h.element("chunk").count == 4 and len(els["vertex"]) == 1000
    assert (h.element("sh") is not None) == (k > 0)
    if k:
        assert h.element("sh").names == [f"f_rest_{i}" for i in range(3 * k)]
    errs = _check_within_bounds(s, p)
    # the bounds are reached, not just respected: round-to-nearest errs up to about half a step, no more
    assert 0.45 < errs["means_step_frac"] <= 0.5 + 1e-3
    dec = load_compressed_ply(p)
    assert dec.sh_degree == {0: 0, 3: 1, 15: 3}[k]
    # the chunk bounds are the exact min / max of each chunk's rows (tight, as SuperSplat writes them)
    chunk = els["chunk"]
    m = s.means.numpy()
    for c in range(4):
        rows = m[256 * c:256 * (c + 1)]
        assert [chunk[f"min_{a}"][c] for a in AXES] == rows.min(0).tolist()
        assert [chunk[f"max_{a}"][c] for a in AXES] == rows.max(0).tolist()


def test_roundtrip_sh_false_writes_degree_0(tmp_path):
    s = _scene(300, k=15)
    p = save_compressed_ply(s, tmp_path / "nosh.ply", sh=False)
    h, _ = _raw(p)
    assert [e.name for e in h.elements] == ["chunk", "vertex"]
    dec = load_compressed_ply(p)
    assert dec.sh_degree == 0 and tuple(dec.sh_rest.shape) == (300, 0, 3)
    assert os.path.getsize(p) == h.data_offset + 2 * 72 + 300 * 16
    _check_within_bounds(s.with_sh_degree(0), p)


def test_sh_bytes_are_the_nearest_decoded_value(tmp_path):
    """Every f_rest is written as the byte whose decoded value (0, (u + 0.5)/256, 1 -> (n - 0.5) 8) is nearest;
    beyond +-4 values clip. The worst case is 6/256 next to +-4 (decoded values 0 and 1.5/256 apart)."""
    vals = np.linspace(-4.5, 4.5, 3 * 3 * 400, dtype=np.float32)  # dense, through both ends
    n = len(vals) // 9
    s = _scene(n, k=3)
    s.sh_rest = torch.from_numpy(vals.reshape(n, 3, 3))
    p = save_compressed_ply(s, tmp_path / "sh.ply")
    dec = load_compressed_ply(p).sh_rest.numpy()
    u = np.arange(256)
    cand = (np.where(u == 0, 0.0, np.where(u == 255, 1.0, (u + 0.5) / 256)) - 0.5) * 8  # all decodable values
    x = np.clip(vals.reshape(n, 3, 3).astype(np.float64), -4, 4)
    best = np.abs(x[..., None] - cand).min(-1)
    err = np.abs(dec - x)
    np.testing.assert_allclose(err, best, atol=1e-6)
    assert err.max() <= 6 / 256 + 1e-9 and err.max() > 5.5 / 256
    inner = np.abs(x) <= 4 - 8 / 256
    assert err[inner].max() <= 4 / 256 + 1e-9


def test_log_scales_clipped_to_20(tmp_path):
    s = _scene(5)
    s.log_scales[0] = torch.tensor([-100.0, 50.0, -3.0])
    s.log_scales[1] = torch.tensor([-19.0, 19.0, -21.0])
    with pytest.warns(UserWarning, match=r"clip 2 with log-scales beyond \+-20 \(kept at the bound\) of 5 Gaussians"):
        p = save_compressed_ply(s, tmp_path / "clip.ply")
    _, els = _raw(p)
    c = els["chunk"][0]
    assert (c["min_scale_x"], c["max_scale_y"], c["min_scale_z"]) == (-20.0, 20.0, -20.0)
    dec = load_compressed_ply(p).log_scales.numpy()
    assert dec[0, 0] == -20.0 and dec[0, 1] == 20.0 and dec[1, 2] == -20.0
    _check_within_bounds(s, p)


def test_sh_beyond_the_byte_range_is_said(tmp_path):
    """SH rest coefficients beyond +-4 clip to +-4 (the layout's byte range): one warning says how many rows (a
    converted file lost them without a word); within the range nothing is said."""
    import warnings

    s = _scene(6, k=3)
    s.sh_rest.zero_()
    s.sh_rest[2, 0, 0], s.sh_rest[4, 1, 2] = 6.0, -9.0
    with pytest.warns(UserWarning, match=r"clip 2 with SH coefficients beyond \+-4 \(kept at \+-4\) of 6"):
        p = save_compressed_ply(s, tmp_path / "sh.ply")
    back = load_compressed_ply(p).sh_rest.numpy()
    assert back[2, 0, 0] == pytest.approx(4.0, abs=8 / 256) and back[4, 1, 2] == pytest.approx(-4.0, abs=8 / 256)
    s.sh_rest[2, 0, 0], s.sh_rest[4, 1, 2] = 3.9, -3.9
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        save_compressed_ply(s, tmp_path / "sh2.ply")


def test_extreme_logits_no_overflow(tmp_path):
    s = _scene(4)
    s.opacity_logits = torch.tensor([-1e30, -1000.0, 1000.0, 3e38])
    with np.errstate(all="raise"):
        p = save_compressed_ply(s, tmp_path / "op.ply")
    alpha = _raw(p)[1]["vertex"]["packed_color"] & 0xFF
    assert alpha.tolist() == [0, 0, 255, 255]


# ------------------------------------------------------------------------------------- bit-level answers


def test_packed_words_known_answers(tmp_path):
    """Three hand-built rows whose packed uint32 words are computed by hand from formats.md section 3."""
    inv = 1.0 / C0
    s = GaussianScene(
        means=torch.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 4.0], [0.5, 1.0, 1.0]]),
        quats=torch.tensor([[2.5, 0.0, 0.0, 0.0], [0.0, 0.0, -3.0, 0.0], [0.8, 0.6, 0.0, 0.0]]),
        log_scales=torch.tensor([[-1.0, -1.0, -1.0], [0.0, 0.0, 0.0], [-0.75, -0.5, -0.25]]),
        opacity_logits=torch.tensor([0.0, 40.0, -40.0]),
        sh_dc=torch.tensor([[0.0, 0.0, 0.0], [inv, inv, inv], [0.25 * inv, 0.6 * inv, 0.8 * inv]]),
        sh_rest=torch.tensor([[[-3.99, 1.1, 3.97], [-3.97, 3.99, -4.0], [4.0, 0.0, 10.0]],
                              [[0.0, 0.0, 0.0]] * 3, [[0.0, 0.0, 0.0]] * 3]),
    )
    p = save_compressed_ply(s, tmp_path / "known.compressed.ply")
    data = open(p, "rb").read()
    head = data[: data.index(b"end_header\n") + len(b"end_header\n")].decode("ascii").split("\n")
    assert head[:2] == ["ply", "format binary_little_endian 1.0"] and head[2].startswith("comment Generated by")
    assert head[3] == "element chunk 1"
    assert head[4:22] == [f"property float {c}" for c in CHUNK_REQUIRED + CHUNK_COLOR]
    assert head[22:27] == ["element vertex 3", "property uint packed_position", "property uint packed_rotation",
                           "property uint packed_scale", "property uint packed_color"]
    assert head[27] == "element sh 3" and head[28:37] == [f"property uchar f_rest_{i}" for i in range(9)]
    assert head[37:] == ["end_header", ""]
    body = data[len("\n".join(head)):]
    assert len(body) == 18 * 4 + 3 * 16 + 3 * 9
    chunk = np.frombuffer(body, "<f4", 18)
    np.testing.assert_array_equal(chunk[:12], [0, 0, 0, 1, 2, 4, -1, -1, -1, 0, 0, 0])
    np.testing.assert_allclose(chunk[12:], [0.5] * 3 + [1.5] * 3, rtol=1e-6)
    vert = np.frombuffer(body, "<u4", 12, offset=72).reshape(3, 4)
    # position: row 0 at chunk min -> 0; row 1 at chunk max -> all ones; row 2 at t = (0.5, 0.5, 0.25):
    # x = floor(0.5 * 2047 + 0.5) = 1024, y = floor(0.5 * 1023 + 0.5) = 512, z = floor(0.25 * 2047 + 0.5) = 512
    assert vert[:, 0].tolist() == [0, 0xFFFFFFFF, (1024 << 21) | (512 << 11) | 512]
    # rotation: identity (any positive scale) -> index 0, three codes floor(0.5 * 1023 + 0.5) = 512;
    # (0, 0, -1, 0) -> flipped to +y, index 2, three 512s; (0.8, 0.6, 0, 0) -> index 0, x -> 0.6/sqrt(2) + 0.5
    # = 0.924264 -> floor(945.52 + 0.5) = 946, y and z 512
    mid = (512 << 20) | (512 << 10) | 512
    assert vert[:, 1].tolist() == [mid, (2 << 30) | mid, (946 << 20) | (512 << 10) | 512]
    # scale: t = (0.25, 0.5, 0.75) -> floor(511.75 + 0.5) = 512, 512, floor(1535.25 + 0.5) = 1535
    assert vert[:, 2].tolist() == [0, 0xFFFFFFFF, (512 << 21) | (512 << 11) | 1535]
    # colour: rgb 0.5 -> 0, 1.5 -> 255, (0.75, 1.1, 1.3) -> t (0.25, 0.6, 0.8) -> 64, 153, 204;
    # alpha sigmoid(0) = 0.5 -> floor(127.5 + 0.5) = 128, sigmoid(40) -> 255, sigmoid(-40) -> 0
    assert vert[:, 3].tolist() == [128, 0xFFFFFFFF, (64 << 24) | (153 << 16) | (204 << 8)]
    sh = np.frombuffer(body, "u1", 27, offset=72 + 48).reshape(3, 9)
    # channel-major: byte c*K + k holds sh_rest[k, c]; s = 256 (f/8 + 0.5): -3.99 -> 0.32 -> 0; -3.97 -> 0.96 -> 1;
    # 4 -> 255; 1.1 -> 163.2 -> 163; 3.99 -> 255.68 -> 255; 0 -> 128 (tie between 127.5 and 128.5 -> up);
    # 3.97 -> 255.04 -> 254 (254.5 is nearer than 256); -4 -> 0; 10 -> clipped -> 255
    assert sh[0].tolist() == [0, 1, 255, 163, 255, 128, 254, 0, 255]
    assert sh[1:].tolist() == [[128] * 9] * 2
    # and the decoder reads the words back as the layout says
    dec = load_compressed_ply(p)
    np.testing.assert_array_equal(dec.means.numpy()[:2], [[0, 0, 0], [1, 2, 4]])
    np.testing.assert_allclose(dec.quats.numpy()[2], [0.8, 0.6, 0.0, 0.0], atol=1e-3)


def test_pack_rotation_inverts_unpack():
    """pack_rotation(unpack_rotation(w)) == w for valid words whose stored index is the strict largest."""
    rng = np.random.default_rng(3)
    q = rng.normal(size=(20000, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    w = pack_rotation(q)
    d = unpack_rotation(w)
    w2 = pack_rotation(d)
    a = np.sort(np.abs(d), axis=1)
    # the stored index is still the clear largest after decoding (quantisation can push a small one past it)
    clear = (np.abs(d).argmax(1) == (w >> 30)) & (a[:, 3] - a[:, 2] > 1e-3)
    assert clear.mean() > 0.95
    np.testing.assert_array_equal(w2[clear], w[clear])
    assert (w >> 30).max() == 3 and np.all(np.abs(d).max(1) >= 0.5 - 1e-6)
    np.testing.assert_array_equal(pack_rotation(np.zeros((2, 4))), [0x20080200] * 2)  # zero -> identity


# ----------------------------------------------------------------------------------- order and Morton


def test_order_is_applied(tmp_path):
    s = _scene(700, k=3, seed=5)
    order = np.random.default_rng(1).permutation(700)
    p = save_compressed_ply(s, tmp_path / "o.ply", order=order)
    _check_within_bounds(s, p, order)  # decoded row r ~ input row order[r], every field
    # identical bytes to writing the reordered scene; torch and list orders work as well
    q = save_compressed_ply(s.subset(torch.from_numpy(order)), tmp_path / "o2.ply")
    assert open(p, "rb").read() == open(q, "rb").read()
    r = save_compressed_ply(s, tmp_path / "o3.ply", order=torch.from_numpy(order).to(torch.int32))
    assert open(p, "rb").read() == open(r, "rb").read()
    r = save_compressed_ply(s, tmp_path / "o4.ply", order=order.tolist())
    assert open(p, "rb").read() == open(r, "rb").read()


@pytest.mark.parametrize("bad,match", [
    (np.arange(699), r"shape \(700,\)"),
    (np.r_[np.arange(699), 0], "not a permutation"),
    (np.r_[np.arange(699), 700], "outside 0..699"),
    (np.r_[np.arange(699), -1], "outside 0..699"),
    (np.arange(700, dtype=np.float64), "integer permutation"),
    (np.ones(700, dtype=bool), "integer permutation"),
    (np.arange(700).reshape(70, 10), r"shape \(700,\)"),
])
def test_bad_order_rejected(tmp_path, bad, match):
    with pytest.raises(OptionError, match=match):
        save_compressed_ply(_scene(700), tmp_path / "bad.ply", order=bad)
    assert os.listdir(tmp_path) == []


def _morton_reference(p):
    """Plain per-point Morton codes over the bbox (bit loop, 10 bits per axis, z y x interleaved)."""
    lo, hi = p.min(0), p.max(0)
    out = []
    for row in p:
        cell = [min(1023, int((row[a] - lo[a]) / (hi[a] - lo[a]) * 1024)) if hi[a] > lo[a] else 0 for a in range(3)]
        code = 0
        for b in range(10):
            for a in range(3):
                code |= ((cell[a] >> b) & 1) << (3 * b + a)
        out.append(code)
    return np.array(out)


def test_morton_order_matches_reference():
    rng = np.random.default_rng(2)
    p = rng.uniform(-3, 5, size=(2000, 3))
    p[:, 1] *= 0.01  # a flat axis still gets its own 1024 cells
    o = morton_order(torch.from_numpy(p))
    assert o.dtype == np.int64 and sorted(o.tolist()) == list(range(2000))
    code = _morton_reference(p)
    assert np.all(np.diff(code[o]) >= 0)
    np.testing.assert_array_equal(o, np.argsort(code, kind="stable"))  # ties keep the input order
    assert morton_order(np.zeros((0, 3))).shape == (0,)
    np.testing.assert_array_equal(morton_order(np.ones((5, 3))), np.arange(5))  # all equal: input order


def test_morton_order_refines_crowded_cells():
    """More than 256 points in one top-level cell are sorted again on a grid over their own bounding box."""
    rng = np.random.default_rng(4)
    far = rng.uniform(0, 1, size=(200, 3))
    clump = 0.5 + rng.uniform(0, 1e-6, size=(600, 3))  # far inside one 1/1024 cell of the unit box
    p = np.concatenate([far, clump, [[0, 0, 0], [1, 1, 1]]])
    o = morton_order(p)
    assert sorted(o.tolist()) == list(range(len(p)))
    in_clump = (o >= 200) & (o < 800)
    pos = np.flatnonzero(in_clump)
    assert np.all(np.diff(pos) == 1)  # the clump is one contiguous run
    sub = o[pos] - 200
    np.testing.assert_array_equal(sub, np.argsort(_morton_reference(clump), kind="stable"))
    flat = morton_order(p, max_levels=1)  # without refinement the clump stays in input order
    np.testing.assert_array_equal(flat[np.flatnonzero((flat >= 200) & (flat < 800))], np.arange(200, 800))


def test_morton_order_errors():
    with pytest.raises(OptionError, match=r"shape \(N, 3\)"):
        morton_order(np.zeros((4, 2)))
    with pytest.raises(OptionError, match="max_levels"):
        morton_order(np.zeros((4, 3)), max_levels=0)
    with pytest.raises(SceneFormatError, match="non-finite"):
        morton_order(np.array([[0, 0, 0], [np.nan, 0, 0]]))


def test_morton_order_shrinks_quantisation_error(tmp_path):
    """A spatially spread scene (20 clusters in a 100-unit box): Morton-ordered chunks are compact, so position
    errors drop far below those of a random order (where every chunk spans the whole box). The largest error
    drops much less than the typical one: a Z-order curve jumps across the box at octant boundaries, and the few
    chunks that straddle a jump (or two clusters) keep a wide range."""
    rng = np.random.default_rng(7)
    centres = rng.uniform(-50, 50, size=(20, 3))
    means = centres[rng.integers(0, 20, 20000)] + rng.normal(scale=0.5, size=(20000, 3))
    s = _scene(20000, seed=7)
    s.means = torch.from_numpy(means.astype(np.float32))
    errs = {}
    for name, order in (("random", rng.permutation(20000)), ("morton", morton_order(s.means))):
        p = save_compressed_ply(s, tmp_path / f"{name}.ply", order=order)
        got = _check_within_bounds(s, p, order)
        e = np.abs(load_compressed_ply(p).means.numpy() - s.means.numpy()[order]).max(1)  # [N]
        errs[name] = (got["means"], float(np.median(e)))
    assert errs["morton"][0] < 0.75 * errs["random"][0], errs  # observed 0.022 vs 0.040
    assert errs["morton"][1] < 0.1 * errs["random"][1], errs  # observed 0.0006 vs 0.022


# ------------------------------------------------------------------------------------------------- size


def test_size_one_third_of_inria(tmp_path):
    n = 10000
    s = _scene(n)
    inria = save_scene(s, tmp_path / "s.ply")
    comp = save_compressed_ply(s, tmp_path / "s.compressed.ply")
    h, _ = _raw(comp)
    per = os.path.getsize(comp) / n
    assert per <= os.path.getsize(inria) / n / 3
    assert os.path.getsize(comp) == h.data_offset + 72 * 40 + 16 * n and per < 16.4  # 16.28 + header / N
    comp3 = save_compressed_ply(_scene(n, k=15), tmp_path / "s3.compressed.ply")
    h3, _ = _raw(comp3)
    assert os.path.getsize(comp3) == h3.data_offset + 72 * 40 + (16 + 45) * n
    assert os.path.getsize(comp3) <= os.path.getsize(save_scene(_scene(n, k=15), tmp_path / "s3.ply")) / 3


# ------------------------------------------------------------------------------------------ real files


def test_guitar_decode_encode_decode(splats_dir, tmp_path):
    """The SuperSplat guitar (already Morton-ordered, tight bounds) decoded, re-encoded in its own order and
    decoded again stays within the quantisation bounds; positions, scales and colours even come back with the
    very same packed words (same round-to-nearest), rotations except for near-ties of the largest component."""
    src = splats_dir / "guitar_playcanvas.compressed.ply"
    a = load_scene(src)
    p = save_compressed_ply(a, tmp_path / "guitar2.compressed.ply")
    errs = _check_within_bounds(a, p)
    _, e0 = _raw(src)
    _, e1 = _raw(p)
    for f in ("packed_position", "packed_scale", "packed_color"):
        np.testing.assert_array_equal(e1["vertex"][f], e0["vertex"][f], err_msg=f)
    same = e1["vertex"]["packed_rotation"] == e0["vertex"]["packed_rotation"]
    assert same.mean() > 0.995
    d = unpack_rotation(e0["vertex"]["packed_rotation"].astype(np.uint32)[~same])
    srt = np.sort(np.abs(d), axis=1)
    assert np.all(srt[:, 3] - srt[:, 2] < 2e-3)  # the differing ones are near-ties
    for c in CHUNK_REQUIRED + CHUNK_COLOR:
        np.testing.assert_allclose(e1["chunk"][c], e0["chunk"][c], rtol=1e-6, atol=1e-6, err_msg=c)
    assert errs["means"] < 1e-6 and errs["rot_angle"] < _rotation_angle_bound()
    # a random order instead spreads every chunk over the whole guitar, and Morton order brings it back
    rng = np.random.default_rng(0)
    b = a.subset(torch.from_numpy(rng.permutation(a.num_gaussians)))
    o = morton_order(b.means)
    q = save_compressed_ply(b, tmp_path / "guitar3.compressed.ply", order=o)
    errs3 = _check_within_bounds(b, q, o)
    assert errs3["means"] < 2e-3


def test_playcanvas_sh_file_decode_encode_decode(splat_file, tmp_path):
    src = splat_file("playcanvas_test_sh.compressed.ply")
    a = load_scene(src)
    p = save_compressed_ply(a, tmp_path / "sh2.compressed.ply")
    _check_within_bounds(a, p)
    b = load_compressed_ply(p)
    assert b.sh_degree == 3
    _, e0 = _raw(src)
    _, e1 = _raw(p)
    for name in e0["sh"].dtype.names:  # decoded SH bytes re-encode to themselves
        np.testing.assert_array_equal(e1["sh"][name], e0["sh"][name])


# ------------------------------------------------------------------------------------------ edge cases


@pytest.mark.parametrize("n", [1, 255, 256, 257, 513])
def test_chunk_counts(tmp_path, n):
    s = _scene(n, k=3, seed=n)
    p = save_compressed_ply(s, tmp_path / "n.ply")
    h, els = _raw(p)
    assert h.element("chunk").count == -(-n // 256) and len(els["sh"]) == n
    _check_within_bounds(s, p)


def test_single_gaussian_is_exact_where_degenerate(tmp_path):
    s = _scene(1, k=3)
    p = save_compressed_ply(s, tmp_path / "one.ply")
    _, els = _raw(p)
    v = els["vertex"][0]
    assert int(v["packed_position"]) == 0 and int(v["packed_scale"]) == 0
    assert int(v["packed_color"]) >> 8 == 0
    dec = load_compressed_ply(p)
    assert torch.equal(dec.means, s.means) and torch.equal(dec.log_scales, s.log_scales)
    torch.testing.assert_close(dec.sh_dc, s.sh_dc, rtol=0, atol=1e-5)  # only rgb -> dc float rounding


def test_degenerate_chunk_all_rows_equal(tmp_path):
    """300 identical rows: chunk min == max on every axis (no division by zero, decoded back exactly), and a
    second chunk that is degenerate on one axis only."""
    row = _scene(1, seed=9)
    s = row.subset(torch.zeros(300, dtype=torch.int64))
    s.means = s.means.clone()
    s.means[256:, 0] = torch.linspace(-1, 1, 44)  # chunk 1: x varies, y and z constant
    with np.errstate(divide="raise", invalid="raise"):
        p = save_compressed_ply(s, tmp_path / "deg.ply")
    dec = load_compressed_ply(p)
    assert torch.equal(dec.means[:256], s.means[:256]) and torch.equal(dec.means[256:, 1:], s.means[256:, 1:])
    assert torch.equal(dec.log_scales, s.log_scales)
    _check_within_bounds(s, p)


def test_zero_quaternion_is_identity(tmp_path):
    s = _scene(3)
    s.quats = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1e-30, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, -2.0]])
    p = save_compressed_ply(s, tmp_path / "q.ply")
    words = _raw(p)[1]["vertex"]["packed_rotation"].tolist()
    assert words == [0x20080200, 0x20080200, (3 << 30) | 0x20080200]
    q = load_compressed_ply(p).quats.numpy()
    np.testing.assert_allclose(q[0], [1, 0, 0, 0], atol=1e-3)
    np.testing.assert_allclose(q[2], [0, 0, 0, 1], atol=1e-3)


def test_refuses_to_overwrite_source(tmp_path):
    src = save_compressed_ply(_scene(10), tmp_path / "in.compressed.ply")
    before = open(src, "rb").read()
    s = load_scene(src)
    with pytest.raises(OptionError, match="refusing to overwrite the input file"):
        save_compressed_ply(s, src)
    link = tmp_path / "link.ply"
    os.symlink(src, link)
    with pytest.raises(OptionError, match="refusing to overwrite the input file"):
        save_compressed_ply(s, link)
    assert open(src, "rb").read() == before
    assert sorted(os.listdir(tmp_path)) == ["in.compressed.ply", "link.ply"]  # no temporary file left
    save_compressed_ply(s, tmp_path / "other.ply")  # another path is fine


def test_bad_paths_and_values(tmp_path):
    s = _scene(10)
    with pytest.raises(OptionError, match="is a directory"):
        save_compressed_ply(s, tmp_path)
    with pytest.raises(OptionError, match="output folder does not exist"):
        save_compressed_ply(s, tmp_path / "nope" / "x.ply")
    with pytest.raises(OptionError, match="str or os.PathLike"):
        save_compressed_ply(s, 12)
    for field in ("means", "quats", "log_scales", "opacity_logits", "sh_dc"):
        bad = _scene(10)
        getattr(bad, field).view(-1)[7] = float("inf") if field != "sh_dc" else float("nan")
        with pytest.raises(SceneFormatError, match=f"non-finite {field}.*sanitise"):
            save_compressed_ply(bad, tmp_path / "bad.ply")
    bad = _scene(10, k=3)
    bad.sh_rest[4, 1, 2] = float("nan")
    with pytest.raises(SceneFormatError, match="non-finite sh_rest"):
        save_compressed_ply(bad, tmp_path / "bad.ply")
    save_compressed_ply(bad, tmp_path / "ok.ply", sh=False)  # the SH that is not written is not checked
    with pytest.raises(SceneFormatError, match="no Gaussians"):
        save_compressed_ply(_scene(0), tmp_path / "empty.ply")
    deg4 = _scene(10, k=24)
    with pytest.raises(OptionError, match="SH degree <= 3"):
        save_compressed_ply(deg4, tmp_path / "d4.ply")
    assert load_compressed_ply(save_compressed_ply(deg4, tmp_path / "d4.ply", sh=False)).sh_degree == 0
    assert sorted(os.listdir(tmp_path)) == ["d4.ply", "ok.ply"]
