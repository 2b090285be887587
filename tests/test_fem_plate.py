"""Thin shapes in the FEM reference (method.md 13): a 1 x 1 x 1e-4 plate and a 1 x 1e-3 x 1e-3 rod keep the node
count near what was asked (meshed stretched along their thin axes, :func:`thin_shape_stretch`), and the FEM on
them is still a valid elastic reference, judged against the Kirchhoff free square plate (a Legendre Rayleigh-Ritz
solution, itself checked against the literature) and the Euler-Bernoulli free-free beam."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sl
from numpy.polynomial import legendre as leg

from physskin_gs.geometry.tetmesh import tet_volumes, tetmesh_for_shape, thin_shape_stretch
from physskin_gs.physics.fem import fem_modes, lumped_volume, mass_matrix_diag, stiffness_matrix

trimesh = pytest.importorskip("trimesh")

E, NU, RHO = 1e5, 0.45, 1000.0  # the evaluate command's FEM material
PLATE = (2.0, 2.0, 2e-4)  # the 1 x 1 x 1e-4 box in its normalised frame (half the largest extent = 1)
ROD = (2.0, 2e-3, 2e-3)
CUBE = (2.0, 2.0, 2.0)
#: node counts stay within this factor of --nodes (both ways) for plates, rods and normal shapes
COUNT_FACTOR = 2.0


def _box(ext, rotation=None):
    b = trimesh.creation.box(extents=ext)
    v = np.asarray(b.vertices, np.float64)
    if rotation is not None:
        v = v @ rotation.T
    return v, np.asarray(b.faces)


def _rotation(seed):
    q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


def _modes(tm, k=10):
    K = stiffness_matrix(tm, E, NU)
    Md = mass_matrix_diag(tm, RHO)
    vals, vecs = fem_modes(K, Md, k=k + 6, rigid=0)
    return vals, vecs  # the 6 rigid modes first, then k more


# ------------------------------------------------------------------------------- the analytic references
def kirchhoff_free_square_plate(nu, p=14):
    """Free square Kirchhoff plate on [-1, 1]^2 by Rayleigh-Ritz on tensor Legendre polynomials of degree <= p:
    (lam (k,) non-rigid frequency parameters omega a^2 sqrt(rho h / D) with a = 2 the side, ascending; shapes(xy)
    -> (N, k) their transverse deflections at points xy (N, 2)). Energy D/2 int [w_xx^2 + w_yy^2 + 2 nu w_xx w_yy
    + 2 (1 - nu) w_xy^2], kinetic rho h / 2 int w^2; the 3 rigid modes (1, x, y) are dropped."""
    xg, wg = leg.leggauss(p + 8)

    def basis(x, d=0):
        rows = []
        for i in range(p + 1):
            c = np.zeros(i + 1)
            c[i] = 1.0
            rows.append(leg.legval(x, leg.legder(c, d) if d else c))
        return np.array(rows)  # [p+1, len(x)]

    P, d1, d2 = basis(xg), basis(xg, 1), basis(xg, 2)

    def gram(a, b):
        return (a * wg) @ b.T

    M0, M1, M2, C = gram(P, P), gram(d1, d1), gram(d2, d2), gram(d2, P)
    K = (np.kron(M2, M0) + np.kron(M0, M2) + nu * (np.kron(C, C.T) + np.kron(C.T, C))
         + 2.0 * (1.0 - nu) * np.kron(M1, M1))
    lam, vec = sl.eigh(K, np.kron(M0, M0))
    lam, vec = lam[3:], vec[:, 3:]

    def shapes(xy):
        return np.einsum("in,jn,ijk->nk", basis(xy[:, 0]), basis(xy[:, 1]), vec.reshape(p + 1, p + 1, -1))

    return np.sqrt(np.clip(lam, 0.0, None)) * 4.0, shapes  # omega a^2 sqrt(rho h / D) with a^2 = 4


def test_kirchhoff_reference_matches_the_literature():
    """The Ritz reference against the free square plate (nu = 0.3) of Gorman / Leissa: 13.468, 19.596, 24.270,
    34.801 (double), 61.093 (double)."""
    lam, _ = kirchhoff_free_square_plate(0.3)
    np.testing.assert_allclose(lam[:7], [13.468, 19.596, 24.270, 34.801, 34.801, 61.093, 61.093], rtol=2e-4)


def _mac(tm, w, shapes):
    """(k_fem, k_ref) volume-weighted modal assurance criterion of transverse deflections w (n, k) against the
    reference shapes (n, k_ref) at the same nodes."""
    vol = lumped_volume(tm)
    a = (vol[:, None] * w).T @ shapes
    na = np.sqrt(np.einsum("nk,n,nk->k", w, vol, w))
    nb = np.sqrt(np.einsum("nk,n,nk->k", shapes, vol, shapes))
    return (a / na[:, None] / nb[None]) ** 2


def _subspace_overlap(tm, w, shapes):
    """sum of cos^2 of the principal angles between span(w) and span(shapes) (volume-weighted): k when equal."""
    s = np.sqrt(lumped_volume(tm))[:, None]
    return float((np.cos(sl.subspace_angles(s * w, s * shapes)) ** 2).sum())


# ------------------------------------------------------------------------------- node counts
@pytest.mark.parametrize("ext,rotated", [(PLATE, False), (PLATE, True), (ROD, False), (ROD, True), (CUBE, False)],
                         ids=["plate", "plate-rotated", "rod", "rod-rotated", "cube"])
@pytest.mark.parametrize("target", [300, 3000])
def test_node_count_stays_near_the_target(ext, rotated, target):
    """Measured: plate 283 / 3119, rotated plate 259 / 2816, rod 260 / 2052 (rotated 516 / 2079), cube 292 / 2659;
    was 100,008 (TetGen's Steiner cap) for the plate at both targets and 2052 for the rod at 300. The mesh is
    conforming and positively oriented and keeps the enclosed volume."""
    v, f = _box(ext, _rotation(3) if rotated else None)
    tm = tetmesh_for_shape(v, f, target_nodes=target)
    assert 1.0 / COUNT_FACTOR <= tm.num_nodes / target <= COUNT_FACTOR, tm.num_nodes
    vol = tet_volumes(tm.nodes, tm.tets)
    assert vol.min() > 0
    np.testing.assert_allclose(vol.sum(), np.prod(ext), rtol=1e-9)
    assert tm.info["kept_volume_fraction"] == 1.0
    np.testing.assert_allclose(np.sort(np.ptp(tm.nodes @ (_rotation(3) if rotated else np.eye(3)), 0)),
                               np.sort(ext), rtol=1e-9)  # the nodes span the box exactly
    assert ("stretch" in tm.info) == (ext != CUBE and not (ext == ROD and target == 3000))


def test_thin_shape_stretch_finds_the_thin_axes():
    """The plate is stretched along its normal only, the rod across its axis only, a cube not at all; a rotated
    plate is found by its principal axes, and the map inverts exactly."""
    v, f = _box(PLATE)
    st = thin_shape_stretch(v, f, 300, volume=float(np.prod(PLATE)))
    np.testing.assert_array_equal(st.axes, np.eye(3))  # axis-aligned: snapped to the identity
    assert st.factors[0] == st.factors[1] == 1.0 and st.factors[2] > 100
    # the fixed point: the stretched thickness is THIN_FACTOR x (stretched volume / target)^(1/3)
    g = (np.prod(PLATE) * st.volume_factor / 300) ** (1 / 3)
    np.testing.assert_allclose(PLATE[2] * st.factors[2], 1.25 * g, rtol=1e-8)
    R = _rotation(7)
    vr, _ = _box(PLATE, R)
    sr = thin_shape_stretch(vr, f, 300, volume=float(np.prod(PLATE)))
    thin = sr.axes[int(np.argmax(sr.factors))]
    assert abs(thin @ R[:, 2]) > 1 - 1e-9  # the plate's normal
    np.testing.assert_allclose(sr.factors.max(), st.factors[2], rtol=1e-6)
    np.testing.assert_allclose(sr.inverse(sr.forward(vr)), vr, atol=1e-12)
    vrod, frod = _box(ROD)
    s_rod = thin_shape_stretch(vrod, frod, 300, volume=float(np.prod(ROD)))
    assert s_rod.factors[0] == 1.0 and s_rod.factors[1] == s_rod.factors[2] > 3
    vc, fc = _box(CUBE)
    assert thin_shape_stretch(vc, fc, 300, volume=8.0) is None
    flat = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]], float)
    assert thin_shape_stretch(flat, np.array([[0, 1, 2], [1, 3, 2]]), 300) is None  # zero thickness: rejected later
    with pytest.raises(ValueError):
        thin_shape_stretch(v, f, 0)


# ------------------------------------------------------------------------------- the reference is still valid
@pytest.mark.parametrize("target", [300, 3000])
def test_thin_plate_fem_is_a_valid_bending_reference(target):
    """The issue's plate (1 x 1 x 1e-4) at --nodes 300 / 3000: 6 rigid modes, then positive eigenvalues; the lowest
    10 modes are bending (transverse motion), the lowest is the Kirchhoff twist mode, and the 5 lowest span the 5
    lowest Kirchhoff modes of a free square plate (nu = 0.45). Measured: twist MAC 0.95 / 0.91, subspace overlap
    4.85 / 4.75 of 5 (rigid eigenvalues 1e-7 of the first elastic one). P1 tets with 2-3 node layers lock in
    bending at this aspect ratio (edge / thickness ~1e3): the frequencies are ~1e3 x Kirchhoff's and the 2nd and
    3rd modes swap, so only the mode shapes are checked."""
    v, f = _box(PLATE)
    tm = tetmesh_for_shape(v, f, target_nodes=target)
    vals, vecs = _modes(tm)
    assert np.abs(vals[:6]).max() < 1e-6 * vals[6]  # rigid
    lam, vec = vals[6:], vecs[:, 6:]
    assert lam.min() > 0 and np.all(np.diff(lam) >= 0)
    vol = np.repeat(lumped_volume(tm), 3)
    energy = (vol[:, None] * vec * vec).reshape(-1, 3, lam.size).sum(0)  # [3, k] share per axis
    assert np.all(energy[2] / energy.sum(0) > 0.99)
    _, shapes = kirchhoff_free_square_plate(NU)
    ks = shapes(tm.nodes[:, :2])[:, :5]
    w = vec[2::3, :5]
    assert _mac(tm, w[:, :1], ks[:, :1])[0, 0] > 0.85
    assert _subspace_overlap(tm, w, ks) > 4.5


def test_moderately_thin_plate_frequencies_match_kirchhoff():
    """A 1 x 1 x 0.05 plate at 3000 nodes: the mode order of the free square Kirchhoff plate (twist, saddle,
    (2,0)+(0,2), then the degenerate pair), and frequency ratios within 2 / 15 / 6 % of it (measured 1.471 vs 1.477,
    1.811 vs 2.066, 2.54 / 2.57 vs 2.655)."""
    ext = (2.0, 2.0, 0.1)
    v, f = _box(ext)
    tm = tetmesh_for_shape(v, f, target_nodes=3000)
    vals, vecs = _modes(tm)
    lam, vec = vals[6:], vecs[:, 6:]
    kl, shapes = kirchhoff_free_square_plate(NU)
    om = np.sqrt(lam)
    mac = _mac(tm, vec[2::3, :5], shapes(tm.nodes[:, :2])[:, :5])
    assert mac[0, 0] > 0.95 and mac[1, 1] > 0.95 and mac[2, 2] > 0.95
    assert mac[3:5, 3:5].sum() > 1.9  # the pair, in any mixture
    np.testing.assert_allclose(om[1] / om[0], kl[1] / kl[0], rtol=0.02)
    np.testing.assert_allclose(om[2] / om[0], kl[2] / kl[0], rtol=0.15)
    np.testing.assert_allclose(om[3:5] / om[0], kl[3:5] / kl[0], rtol=0.06)
    # P1 stiffness: above Kirchhoff, within 2x at this thickness (measured 1.74x)
    D = E * ext[2] ** 3 / (12 * (1 - NU**2))
    ratio = om[0] / (kl[0] / 4.0 * np.sqrt(D / (RHO * ext[2])))
    assert 1.0 < ratio < 2.0


@pytest.mark.parametrize("target,tol", [(300, 0.15), (3000, 0.03)])
def test_thin_rod_bends_like_a_free_free_beam(target, tol):
    """The 1 x 1e-3 x 1e-3 rod: 6 rigid modes, then bending in pairs (y and z), with the Euler-Bernoulli free-free
    ratios (beta_2 L / beta_1 L)^2 = 2.757 and (beta_3 L / beta_1 L)^2 = 5.404 (measured 2.49 / 5.25 at 300
    nodes, stretched mesh with 4 nodes per cross-section; 2.757 / 5.341 at 3000)."""
    v, f = _box(ROD)
    tm = tetmesh_for_shape(v, f, target_nodes=target)
    vals, _ = _modes(tm)
    assert np.abs(vals[:6]).max() < 1e-4 * vals[6]  # rigid (measured 4e-6 relative: a soft, slender rod)
    om = np.sqrt(vals[6:])
    assert om.min() > 0
    assert om[1] / om[0] < 1.1  # the y / z pair
    bl = np.array([4.7300408, 7.8532046, 10.9956078])
    np.testing.assert_allclose(om[2] / om[0], (bl[1] / bl[0]) ** 2, rtol=tol)
    np.testing.assert_allclose(om[4] / om[0], (bl[2] / bl[0]) ** 2, rtol=tol)


# ------------------------------------------------------------------------------- the default basis on thin shapes
def _plate_points(n=16000, t=1e-4, seed=0, rotation=None):
    """Volume points of a 2 x 2 x 2t plate as the mesh sampler gives them (no interior fill: both faces)."""
    rng = np.random.default_rng(seed)
    p = np.c_[rng.uniform(-1, 1, (n, 2)), np.where(rng.random(n) < 0.5, t, -t)]
    return p if rotation is None else p @ rotation.T


def _rod_points(n=16000, s=1e-3, seed=0):
    rng = np.random.default_rng(seed)
    face, u = rng.integers(0, 4, n), rng.uniform(-s, s, n)
    y = np.where(face == 0, s, np.where(face == 1, -s, u))
    z = np.where(face == 2, s, np.where(face == 3, -s, u))
    return np.c_[rng.uniform(-1, 1, n), y, z]


#: lambda + 4 mu at E = 1, nu = 0.45: the eigen basis' stiffness factor
_LAME = 0.45 / (1.45 * 0.1) + 4.0 / 2.9


def test_eigen_basis_is_constant_through_a_thin_plate():
    """On the 1e-4 plate the field is built on the mid-plane: W is the same on both faces, dW/dz = 0, the in-plane
    gradient matches finite differences, and the spectrum is the Neumann one of the square, lambda_ij =
    (pi / 2)^2 (i^2 + j^2) (lambda + 4 mu) (measured 0.968 x for the first; the solid build gave 95 x: its
    linear correction across the 2e-4 node spread made dW/dz ~ 1 / thickness)."""
    from physskin_gs.model.eigen import build_eigen_field

    f = build_eigen_field(_plate_points(), num_handles=17, seed=0)
    np.testing.assert_array_equal(f.flat_axes, [[0.0, 0.0, 1.0]])
    solid = build_eigen_field(_plate_points(), num_handles=17, seed=0, flatten=False)
    assert solid.flat_axes.shape == (0, 3) and solid.eigenvalues[0] > 50 * f.eigenvalues[0]
    q = np.c_[np.random.default_rng(1).uniform(-0.9, 0.9, (400, 2)), np.zeros(400)]
    Wt, Gt = f.evaluate(q + [0, 0, 1e-4])
    Wb, Gb = f.evaluate(q - [0, 0, 1e-4])
    np.testing.assert_array_equal(Wt, Wb)
    np.testing.assert_array_equal(Gt, Gb)
    assert np.all(Gt[..., 2] == 0.0)
    for k in range(2):
        d = np.zeros(3)
        d[k] = 1e-5
        fd = (f.evaluate(q + d)[0] - f.evaluate(q - d)[0]) / 2e-5
        assert np.abs(fd - Gt[..., k]).max() < 1e-5 * np.abs(Gt[..., k]).max()  # measured 4e-8
    neumann = (np.pi / 2) ** 2 * _LAME * np.array([1, 1, 2, 4, 4, 5, 5, 8])
    np.testing.assert_allclose(f.eigenvalues[:8], neumann, rtol=0.06)
    # the numpy reference gives the same flattened field
    Wr, Gr = f.evaluate(q + [0, 0, 1e-4], native=False)
    np.testing.assert_allclose(Wr, Wt, atol=1e-10)
    np.testing.assert_allclose(Gr, Gt, atol=1e-8 * np.abs(Gt).max())


def test_eigen_basis_on_a_rotated_plate_and_a_rod():
    """A rotated plate is flattened along its normal (W constant along it, up to the sampling tilt of the
    principal axis: measured 2.7e-6 rad, W differences 5e-9 across the thickness); a 1e-3 rod along its
    cross-section, with the 1-D Neumann spectrum k^2 (pi / 2)^2 (lambda + 4 mu) (measured 0.99 / 3.95 / 8.87
    of it; the solid build's nodes sat on the rod's edges)."""
    from physskin_gs.model.eigen import build_eigen_field

    R = _rotation(5)
    f = build_eigen_field(_plate_points(rotation=R), num_handles=17, seed=0)
    assert f.flat_axes.shape == (1, 3) and np.arccos(min(1.0, abs(f.flat_axes[0] @ R[:, 2]))) < 1e-5
    q = np.c_[np.random.default_rng(2).uniform(-0.9, 0.9, (300, 2)), np.zeros(300)] @ R.T
    W1, G1 = f.evaluate(q + 1e-4 * R[:, 2])
    W2, _ = f.evaluate(q - 1e-4 * R[:, 2])
    np.testing.assert_allclose(W1, W2, atol=1e-7)
    assert np.abs(G1 @ R[:, 2]).max() < 1e-5 * np.abs(G1).max()
    assert np.abs(G1 @ f.flat_axes[0]).max() < 1e-12 * np.abs(G1).max()  # exactly none along its own axis
    np.testing.assert_allclose(f.eigenvalues[:3], (np.pi / 2) ** 2 * _LAME * np.array([1, 1, 2]), rtol=0.08)
    # the C kernel's assembly against the numpy reference (measured 9e-8: rounding off the tilted plane)
    small = _plate_points(n=6000, rotation=R)
    np.testing.assert_allclose(build_eigen_field(small, num_handles=9, seed=0).eigenvalues,
                               build_eigen_field(small, num_handles=9, seed=0, native=False).eigenvalues, rtol=1e-6)
    rod = build_eigen_field(_rod_points(), num_handles=17, seed=0)
    np.testing.assert_array_equal(rod.flat_axes, [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    np.testing.assert_allclose(rod.eigenvalues[:4], (np.pi / 2) ** 2 * _LAME * np.arange(1, 5) ** 2, rtol=0.03)
    x = np.c_[np.linspace(-0.9, 0.9, 50), np.zeros((50, 2))]
    np.testing.assert_array_equal(rod.evaluate(x + [0, 1e-3, -1e-3])[0], rod.evaluate(x)[0])


def test_solids_are_not_flattened_and_flat_fields_round_trip(tmp_path):
    """A cube's (and any non-thin shape's) field is the solid build, bit for bit; a flattened field survives
    save / load (the two optional state keys), and a state without them loads as a solid."""
    import torch

    from physskin_gs.model.bases import load_field, save_field
    from physskin_gs.model.eigen import EigenSkinningField, build_eigen_field, thin_axes

    cube = np.random.default_rng(0).uniform(-1, 1, (6000, 3))
    a = build_eigen_field(cube, num_handles=9, seed=0)
    b = build_eigen_field(cube, num_handles=9, seed=0, flatten=False)
    assert a.flat_axes.shape == (0, 3) and "flat_axes" not in a.state()
    np.testing.assert_array_equal(a.coeffs, b.coeffs)
    np.testing.assert_array_equal(a.nodes, b.nodes)
    assert thin_axes(cube, 0.4)[0].shape == (0, 3)
    # the gate: a width 2 sqrt(3) sigma below half the median radius (plate: 2 sqrt(3) 1e-4 = 3.46e-4)
    p = _plate_points()
    width = 2 * np.sqrt(3 * p[:, 2].var())
    assert thin_axes(p, width / 0.5 * 1.01)[0].shape == (1, 3)
    assert thin_axes(p, width / 0.5 * 0.99)[0].shape == (0, 3)
    f = build_eigen_field(_plate_points(n=6000), num_handles=9, seed=0)
    path = save_field(f, tmp_path / "plate.safetensors")
    g = load_field(path)
    x = np.random.default_rng(3).uniform(-1, 1, (200, 3))
    for u, v in zip(f.evaluate(x), g.evaluate(x)):
        np.testing.assert_array_equal(u, v)
    st = {k: v for k, v in f.state().items() if not k.startswith("flat_")}
    solid = EigenSkinningField.from_state(st)
    assert solid.flat_axes.shape == (0, 3) and not np.array_equal(solid.evaluate(x)[1], f.evaluate(x)[1])
    with pytest.raises(ValueError):
        EigenSkinningField.from_state({**st, "flat_axes": torch.zeros(1, 3, dtype=torch.float64)})


def _neumann_square(nodes, m=16):
    """(n, m + 1) the exact Neumann Laplacian eigenfunctions of [-1, 1]^2 (i^2 + j^2 order), then the constant."""
    ij = sorted([(i, j) for i in range(8) for j in range(8) if (i, j) != (0, 0)],
                key=lambda t: (t[0] ** 2 + t[1] ** 2, t))[:m]
    x, y = nodes[:, 0], nodes[:, 1]
    return np.stack([np.cos(i * np.pi * (x + 1) / 2) * np.cos(j * np.pi * (y + 1) / 2) for i, j in ij]
                    + [np.ones_like(x)], 1)


def test_default_basis_on_the_issue_plate(tmp_path):
    """`evaluate --reference fem --nodes 300` on the 1 x 1 x 1e-4 box: the default basis against the FEM.
    Measured frequency ratio 2.81 (was 9.48 with the solid build; 7.27 on the old 100,008-node mesh), rbf 2.30,
    network 4.60, laplacian-fem 1.28, and the exact continuous Neumann eigenbasis of the square (the ideal smooth,
    thickness-independent basis) 2.39: the P1 reference locks in bending, and only the mesh's own Laplacian basis
    follows its locked modes. The default is held within 1.3x of that ideal."""
    import torch

    from physskin_gs.cli.evaluate_fem import tetmesh_for_object
    from physskin_gs.cli.skin import prepare_object
    from physskin_gs.model.eigen import build_eigen_field
    from physskin_gs.physics.subspace_eval import evaluate_basis, fem_reference

    path = tmp_path / "plate.obj"
    trimesh.creation.box(extents=(1, 1, 1e-4)).export(path)
    obj = prepare_object(path, seed=0)
    tm = tetmesh_for_object(path, obj, 300)
    assert 150 <= tm.num_nodes <= 600
    ref = fem_reference(tm, E=E, nu=NU, density=RHO, k=10)
    nodes = torch.from_numpy(tm.nodes.astype(np.float32))
    f = build_eigen_field(obj.volume, num_handles=17, seed=0)
    eig = evaluate_basis(ref, f.weights(nodes).double().numpy())["freq_ratio_geomean"]
    ideal = evaluate_basis(ref, _neumann_square(tm.nodes))["freq_ratio_geomean"]
    solid = build_eigen_field(obj.volume, num_handles=17, seed=0, flatten=False)
    old = evaluate_basis(ref, solid.weights(nodes).double().numpy())["freq_ratio_geomean"]
    assert eig < 1.3 * ideal, (eig, ideal)
    assert old > 2.5 * eig, (old, eig)


def test_splat_reference_grid_offset_moves_the_voxels(tmp_path):
    """`tetmesh_for_object(grid_offset=s)` (scripts/eval_splat_grids.py): a splat's reference voxels keep their size
    and move by s of a cell along every axis; offset 0 is the evaluation's own grid and 1 is that grid again, one
    cell over."""
    from physskin_gs.cli.evaluate_fem import tetmesh_for_object
    from physskin_gs.cli.skin import prepare_object
    from tests.conftest import blob_scene, save_scene_file

    path = save_scene_file(blob_scene(3000, log_scale=-4.6, size=(1.0, 0.6, 0.4)), tmp_path / "box.ply")
    obj = prepare_object(path, seed=0)
    meshes = {s: tetmesh_for_object(path, obj, 400, grid_offset=s) for s in (0.0, 0.25, 1.0)}
    h = meshes[0.0].info["voxel"]
    assert all(m.info["voxel"] == pytest.approx(h) for m in meshes.values())
    lo = {s: m.nodes.min(0) for s, m in meshes.items()}  # the grid's first used corner, on the grid's lattice
    frac = {s: np.mod((lo[s] - lo[0.0]) / h, 1.0) for s in lo}
    assert np.allclose(np.minimum(frac[1.0], 1 - frac[1.0]), 0.0, atol=1e-6)  # a whole cell over: the same lattice
    assert np.allclose(frac[0.25], 0.75, atol=1e-6)  # the origin moved back by a quarter cell
    assert not np.allclose(meshes[0.25].nodes.min(0), meshes[0.0].nodes.min(0))


def test_splat_reference_says_what_it_leaves_out(tmp_path, capsys, monkeypatch):
    """A splat's FEM reference keeps the largest face-connected part of its voxels (a yucca's kept 89 % and dropped
    the rest of its leaves silently). `evaluate --reference fem` now says how much of the volume the reference covers
    when that is under 99 %, and records it (``fem_covers``). Here the voxel fill's own report is set to 80 % (parts
    the scene analysis does not already drop as floaters connect through voxel edges only by where a grid falls)."""
    import json

    import physskin_gs.cli.evaluate_fem as ef
    from physskin_gs.cli import main
    from tests.conftest import blob_scene, save_scene_file

    real = ef.tetmesh_for_object

    def partial(path, obj, target_nodes, grid_offset=0.0):
        tm = real(path, obj, target_nodes, grid_offset)
        tm.info["kept_volume_fraction"] = 0.8
        return tm

    monkeypatch.setattr(ef, "tetmesh_for_object", partial)
    path = save_scene_file(blob_scene(2000, log_scale=-4.6), tmp_path / "box.ply")
    out = tmp_path / "r.json"
    assert main(["evaluate", "--reference", "fem", "--bases", "voxel", "--nodes", "400", "--data", str(path),
                 "--json", str(out)]) == 0
    cap = capsys.readouterr()
    assert json.loads(out.read_text())["shapes"][0]["fem_covers"] == 0.8
    text = cap.out + cap.err
    assert "the FEM reference covers 80% of the shape's volume (its voxels not face-connected" in text, text
