"""FEM ground truth for judging skinning bases (method.md 13): P1 elasticity against beam theory, rigid modes,
Rayleigh-Ritz invariants of LBS subspaces, tetrahedralisation volumes, the FreeForm beam protocol."""

from __future__ import annotations

import time

import numpy as np
import pytest
import scipy.linalg as sl
import scipy.sparse as sp

from physskin_gs.geometry.tetmesh import (
    TetMesh,
    TetrahedralizationError,
    box_tetmesh,
    glue_occupancy,
    tet_components,
    tet_volumes,
    tetmesh_for_shape,
    tetrahedralize_surface,
    voxel_fill_tetmesh,
    voxel_tetmesh,
)
from physskin_gs.physics.fem import (
    fem_modes,
    lame,
    laplacian_eigenbasis,
    lumped_mass,
    lumped_volume,
    mass_matrix_diag,
    scalar_laplacian,
    static_deflection,
    stiffness_matrix,
)
from physskin_gs.physics.subspace_eval import evaluate_basis, fem_reference, freeform_beam_protocol, lbs_basis

trimesh = pytest.importorskip("trimesh")

E, NU, RHO = 1e6, 0.3, 1000.0  # beam-theory checks: a moderate Poisson ratio keeps P1 locking mild


# ----------------------------------------------------------------------------------- reference formulas
def timoshenko_free_free(E, nu, rho, L, a, ne=200):
    """Lowest non-rigid free-free bending angular frequency of a square a x a Timoshenko beam (Cowper shear
    coefficient 10(1+nu)/(12+11nu), rotary inertia), from a 1-D finite-element model with linear w / theta
    elements and one-point shear integration (no locking), converged to ~1e-5 at ne = 200."""
    G = E / (2 * (1 + nu))
    A, I = a * a, a**4 / 12
    kap = 10 * (1 + nu) / (12 + 11 * nu)
    h = L / ne
    n = 2 * (ne + 1)
    K, M = np.zeros((n, n)), np.zeros((n, n))
    kb = E * I / h * np.array([[0, 0, 0, 0], [0, 1, 0, -1], [0, 0, 0, 0], [0, -1, 0, 1.0]])
    Bs = np.array([-1 / h, -0.5, 1 / h, -0.5])  # shear strain w' - theta at the element midpoint
    ks = kap * G * A * h * np.outer(Bs, Bs)
    mt = rho * A * h / 6 * np.array([[2, 0, 1, 0], [0, 0, 0, 0], [1, 0, 2, 0], [0, 0, 0, 0.0]])
    mr = rho * I * h / 6 * np.array([[0, 0, 0, 0], [0, 2, 0, 1], [0, 0, 0, 0], [0, 1, 0, 2.0]])
    for e in range(ne):
        d = np.arange(2 * e, 2 * e + 4)
        K[np.ix_(d, d)] += kb + ks
        M[np.ix_(d, d)] += mt + mr
    w2 = sl.eigh(K, M, eigvals_only=True, subset_by_index=[0, 2])
    return float(np.sqrt(w2[2]))  # two rigid modes (translation, rotation) first


def rigid_motions(nodes):
    """(3n, 6) translations and infinitesimal rotations omega x x."""
    n = nodes.shape[0]
    R = np.zeros((n, 3, 6))
    for a in range(3):
        R[:, a, a] = 1.0
    for k in range(3):
        w = np.zeros(3)
        w[k] = 1.0
        R[:, :, 3 + k] = np.cross(w[None], nodes)
    return R.reshape(3 * n, 6)


def classify(tm, phi, Md):
    """(axial fraction, angular fraction) of a mode's kinetic energy on a box beam along x with a unit section:
    axial ~1 for extension; angular (the part of the transverse motion tangential about the axis) ~1 for
    torsion, ~0.5 for bending."""
    u = phi.reshape(-1, 3)
    m = Md[::3]
    y, z = tm.nodes[:, 1] - 0.5, tm.nodes[:, 2] - 0.5
    r = np.sqrt(y * y + z * z) + 1e-12
    tot = (m * (u * u).sum(1)).sum()
    return (m * u[:, 0] ** 2).sum() / tot, (m * ((y * u[:, 2] - z * u[:, 1]) / r) ** 2).sum() / tot


def rbf_weights(nodes, count, radius, seed):
    rng = np.random.default_rng(seed)
    c = nodes[rng.choice(nodes.shape[0], count, replace=False)]
    d2 = ((nodes[:, None] - c[None]) ** 2).sum(-1)
    return np.concatenate([np.exp(-d2 / (2 * radius**2)), np.ones((nodes.shape[0], 1))], axis=1)


# ----------------------------------------------------------------------------------- element level
def test_linear_fields_energy_exact_and_rigid_null_space():
    tm = box_tetmesh((3.0, 2.0, 1.5), (4, 3, 2), origin=(-1.0, 0.5, 0.2))
    K = stiffness_matrix(tm, E, NU)
    mu, lam = lame(E, NU)
    V = 3.0 * 2.0 * 1.5
    assert sp.issparse(K) and K.shape == (3 * tm.num_nodes,) * 2
    assert abs(K - K.T).max() == 0.0
    rng = np.random.default_rng(1)
    Gd = rng.standard_normal((3, 3))
    u = (tm.nodes @ Gd.T).reshape(-1)  # u(x) = G x, uniform strain
    eps = 0.5 * (Gd + Gd.T)
    energy = V * (mu * (eps * eps).sum() + 0.5 * lam * np.trace(eps) ** 2)
    assert 0.5 * u @ (K @ u) == pytest.approx(energy, rel=1e-12)
    R = rigid_motions(tm.nodes)
    assert np.abs(K @ R).max() < 1e-9 * abs(K).max()
    ev = np.linalg.eigvalsh(K.toarray())
    assert (np.abs(ev) < 1e-9 * ev[-1]).sum() == 6 and ev[6] > 1e-4 * ev[-1]
    # masses and volumes
    assert lumped_mass(tm, RHO).sum() == pytest.approx(RHO * V, rel=1e-12)
    assert mass_matrix_diag(tm, RHO).sum() == pytest.approx(3 * RHO * V, rel=1e-12)
    assert lumped_volume(tm).sum() == pytest.approx(V, rel=1e-12)
    # scalar Laplacian: exact Dirichlet energy of a linear function, constants in the kernel
    L = scalar_laplacian(tm)
    g = np.array([0.3, -1.2, 2.0])
    f = tm.nodes @ g
    assert f @ (L @ f) == pytest.approx(V * g @ g, rel=1e-12)
    assert np.abs(L @ np.ones(tm.num_nodes)).max() < 1e-12 * abs(L).max()


def test_fem_modes_match_dense_generalised_eigensolver():
    tm = box_tetmesh((4.0, 1.0, 1.0), (8, 2, 2))
    K, Md = stiffness_matrix(tm, E, NU), mass_matrix_diag(tm, RHO)
    lam, phi = fem_modes(K, Md, k=8)
    ref = sl.eigh(K.toarray(), np.diag(Md), eigvals_only=True)
    assert np.abs(ref[:6]).max() < 1e-9 * ref[6]  # exactly six rigid modes
    np.testing.assert_allclose(lam, ref[6:14], rtol=1e-9)
    np.testing.assert_allclose(phi.T @ (Md[:, None] * phi), np.eye(8), atol=1e-9)
    np.testing.assert_allclose(K @ phi, Md[:, None] * phi * lam[None], atol=1e-7 * np.abs(K @ phi).max())


# ----------------------------------------------------------------------------------- beam theory
def test_free_free_beam_frequencies_converge_to_beam_theory():
    """10 x 1 x 1 beam: bending vs Euler-Bernoulli (22.373) / Timoshenko, torsion vs pi/L sqrt(G J / rho I_p)
    with J = 0.1406 a^4, I_p = a^4 / 6, axial vs pi/L sqrt(E / rho) (Rayleigh-Love lateral-inertia correction)."""
    L, a = 10.0, 1.0
    G = E / (2 * (1 + NU))
    w_eb = 22.373 * np.sqrt(E * a**4 / 12 / (RHO * a * a * L**4))
    w_ti = timoshenko_free_free(E, NU, RHO, L, a)
    w_to = np.pi / L * np.sqrt(G * 0.1406 * a**4 / (RHO * a**4 / 6))
    w_ax = np.pi / L * np.sqrt(E / RHO)
    w_love = w_ax / np.sqrt(1 + (NU * np.pi / L) ** 2 * (a * a / 6))
    assert w_ti / w_eb == pytest.approx(0.9661, abs=2e-4)  # shear + rotary inertia at L / a = 10
    bend, tors, axial = [], [], []
    for n in (2, 3, 4, 6):
        tm = box_tetmesh((L, a, a), (10 * n, n, n))
        K, Md = stiffness_matrix(tm, E, NU), mass_matrix_diag(tm, RHO)
        lam, phi = fem_modes(K, Md, k=12)
        w = np.sqrt(lam)
        cls = [classify(tm, phi[:, j], Md) for j in range(12)]
        assert cls[0][0] < 0.1 and 0.3 < cls[0][1] < 0.7  # the lowest mode bends
        bend.append(w[0])
        tors.append(next(w[j] for j in range(12) if cls[j][1] > 0.8))
        axial.append(next(w[j] for j in range(12) if cls[j][0] > 0.8))
    bend, tors, axial = map(np.array, (bend, tors, axial))
    e_bend, e_tors = bend / w_eb - 1, tors / w_to - 1
    # measured: bending +23.2 / +9.7 / +4.4 / +0.2 % vs EB; torsion +24.5 / +15.4 / +10.2 / +5.2 %
    assert np.all(np.diff(e_bend) < 0) and np.all(np.diff(e_tors) < 0)
    assert np.all(bend > w_ti)  # P1 is stiff: above the (lower) Timoshenko value at every level
    assert abs(e_bend[-1]) < 0.03 and e_tors[-1] < 0.07
    # h^2 Richardson extrapolation from n = 3 and 6 lands on Timoshenko (measured +0.5 %) and torsion (+1.7 %)
    assert (4 * bend[3] - bend[1]) / 3 / w_ti == pytest.approx(1.0, abs=0.015)
    assert (4 * tors[3] - tors[1]) / 3 / w_to == pytest.approx(1.0, abs=0.03)
    # axial: -0.11 / -0.10 / -0.09 / -0.08 % vs pi/L c, converging to Rayleigh-Love's -0.074 %
    assert np.all(np.abs(axial / w_ax - 1) < 3e-3)
    assert np.all(np.diff(np.abs(axial / w_love - 1)) < 0) and abs(axial[-1] / w_love - 1) < 2e-4


def test_cantilever_static_tip_deflection_converges():
    """Gravity-loaded 10 x 1 x 1 cantilever clamped by stiff kappa M springs on the x = 0 face: tip deflection vs
    Timoshenko q L^4 / (8 E I) + q L^2 / (2 kappa_s G A), approached from below (P1 is stiff in bending)."""
    L, g = 10.0, 9.8
    G = E / (2 * (1 + NU))
    ks = 10 * (1 + NU) / (12 + 11 * NU)
    q = RHO * g
    ref = q * L**4 / (8 * E / 12) + q * L**2 / (2 * ks * G)
    ratios = []
    for n in (2, 3, 4, 6):
        tm = box_tetmesh((L, 1.0, 1.0), (10 * n, n, n))
        K, Md = stiffness_matrix(tm, E, NU), mass_matrix_diag(tm, RHO)
        f = np.zeros(3 * tm.num_nodes)
        f[2::3] = -g * Md[2::3]
        pins = np.flatnonzero(tm.nodes[:, 0] < 1e-9)
        end = np.flatnonzero(tm.nodes[:, 0] > L - 1e-9)
        u = static_deflection(K, Md, pins, f, kappa=1e9)
        np.testing.assert_allclose((K + sp.diags(np.where(np.isin(np.arange(3 * tm.num_nodes) // 3, pins),
                                                          1e9 * Md, 0.0))) @ u, f, atol=1e-8 * np.abs(f).max())
        ratios.append(-u[3 * end + 2].mean() / ref)
    ratios = np.array(ratios)  # measured 0.504 / 0.682 / 0.785 / 0.885
    assert np.all(np.diff(ratios) > 0) and np.all(ratios < 1.0) and ratios[-1] > 0.85


# ----------------------------------------------------------------------------------- subspace evaluation
@pytest.fixture(scope="module")
def beam_ref():
    tm = box_tetmesh((2.0, 0.5, 0.4), (36, 9, 8))  # 3330 nodes
    return fem_reference(tm, k=10)


@pytest.fixture(scope="module")
def beam_scores(beam_ref):
    """evaluate_basis of the 16-mode Laplacian basis (timed) and of 16 random RBF bumps (3 seeds), + constants."""
    t = time.perf_counter()
    lap = evaluate_basis(beam_ref, laplacian_eigenbasis(beam_ref.tm, 16))  # 17 handles, 204 DOF
    seconds = time.perf_counter() - t
    rbf = [evaluate_basis(beam_ref, rbf_weights(beam_ref.tm.nodes, 16, 0.25, s)) for s in range(3)]
    return {"lap": lap, "lap_seconds": seconds, "rbf": rbf}


def test_lbs_basis_layout():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 3))
    W = rng.standard_normal((5, 2))
    B = lbs_basis(x, W)
    assert B.shape == (15, 24)
    A = rng.standard_normal((2, 3, 4))  # per-handle affine transforms
    u = (B @ A.reshape(-1)).reshape(5, 3)
    xh = np.concatenate([x, np.ones((5, 1))], 1)
    np.testing.assert_allclose(u, np.einsum("vi,iab,vb->va", W, A, xh), rtol=1e-12)


def test_rayleigh_ritz_invariants(beam_ref, beam_scores):
    ref = beam_ref
    n = ref.tm.num_nodes
    # constant handle only: the 12-D affine span = 6 rigid (exact zeros) + 6 uniform strains
    r = evaluate_basis(ref, np.ones((n, 1)))
    assert r["rank"] == 12 and r["near_zero"] == 6
    mu = np.array(r["ritz_eigvals"])
    B = lbs_basis(ref.tm.nodes, np.ones((n, 1)))  # independent path: generalised eig of B^T K B, B^T M B
    ev = sl.eigh(B.T @ (ref.K @ B), B.T @ (ref.Mdiag[:, None] * B), eigvals_only=True)
    np.testing.assert_allclose(mu[6:], ev[6:], rtol=1e-8)
    assert np.all(np.abs(mu[:6]) < 1e-9 * mu[6])
    # any basis: Ritz values bound the FEM ones from above (min-max); compliance can only drop
    for r in [beam_scores["lap"]] + beam_scores["rbf"]:
        assert r["near_zero"] == 6 and r["rank"] == 12 * 17
        assert min(r["freq_ratios"]) >= 1 - 1e-9 and len(r["freq_ratios"]) == 10
        assert r["freq_ratio_geomean"] >= 1 - 1e-9
        assert all(0 <= s["compliance_ratio"] <= 1 + 1e-9 for s in r["static"])
        assert all(0 <= m <= 1 + 1e-9 for m in r["mode_residuals"])


def test_full_space_basis_is_exact():
    """One handle per node spans every nodal displacement (12 n columns, rank 3 n after the SVD cut):
    Ritz values equal the FEM ones, modes are captured and the static solutions are reproduced."""
    tm = box_tetmesh((3.0, 1.0, 1.0), (6, 2, 2))
    ref = fem_reference(tm, k=8)
    r = evaluate_basis(ref, np.eye(tm.num_nodes))
    assert r["rank"] == 3 * tm.num_nodes and r["near_zero"] == 6
    np.testing.assert_allclose(r["freq_ratios"], 1.0, atol=1e-8)
    assert max(r["mode_residuals"]) < 1e-7
    for s in r["static"]:
        assert s["tip_ratio"] == pytest.approx(1.0, abs=1e-8) and s["static_rel_error"] < 1e-8


def test_laplacian_basis_beats_random_bumps_and_timing(beam_scores):
    lap, rbf, seconds = beam_scores["lap"], beam_scores["rbf"], beam_scores["lap_seconds"]
    # measured on this 2 x 0.5 x 0.4 beam: Laplacian 1.03, RBF 1.2-1.3
    assert lap["freq_ratio_geomean"] < 1.1
    assert all(lap["freq_ratio_geomean"] < r["freq_ratio_geomean"] for r in rbf)
    assert all(lap["static"][1]["static_rel_error"] < r["static"][1]["static_rel_error"] for r in rbf)
    # ~0.3 s with one BLAS thread (n = 3330, 204 DOF); OpenBLAS's two spinning threads on a busy 2-core machine
    # have taken up to 7 s, and 15.6 s with two other jobs on the machine: speed is the benchmarks' to measure,
    # this only guards against a hang
    assert lap["seconds"] < 120.0 and seconds < 120.0


def test_laplacian_eigenbasis_is_the_neumann_spectrum():
    tm = box_tetmesh((2.0, 0.5, 0.4), (24, 6, 5))
    W = laplacian_eigenbasis(tm, 4)
    vol, L = lumped_volume(tm), scalar_laplacian(tm)
    assert W.shape == (tm.num_nodes, 5) and np.all(W[:, -1] == 1.0)
    w1 = W[:, 0]
    lam1 = (w1 @ (L @ w1)) / (w1 @ (vol * w1))
    assert lam1 == pytest.approx((np.pi / 2.0) ** 2, rel=0.01)  # cos(pi x / 2): first Neumann mode
    assert np.corrcoef(w1, np.cos(np.pi * tm.nodes[:, 0] / 2.0))[0, 1] ** 2 > 0.999
    assert abs(w1 @ vol) < 1e-8 * np.abs(w1) @ vol  # V-orthogonal to constants


def test_freeform_protocol():
    full = freeform_beam_protocol(lambda x: np.eye(x.shape[0]), divisions=(10, 2, 2))
    for case in ("bend", "twist"):
        assert full[case]["nmse"] < 1e-6  # the full space reproduces the clamped FEM up to the spring clamp
        assert full["clamp_leak"][case] < 1e-3
    assert full["bend"]["tip_fem"] > 0 and full["twist"]["tip_fem"] > 0
    lap = freeform_beam_protocol(lambda x: laplacian_eigenbasis(box_tetmesh((5, 1, 1), (20, 4, 4)), 6),
                                 divisions=(20, 4, 4))
    const = freeform_beam_protocol(lambda x: np.ones((x.shape[0], 1)), divisions=(20, 4, 4))
    assert 0 < lap["bend"]["nmse"] < const["bend"]["nmse"] <= 1.0 + 1e-9
    assert 0 < lap["twist"]["nmse"] < const["twist"]["nmse"] <= 1.0 + 1e-9


# ----------------------------------------------------------------------------------- tet meshes
def _check_mesh(tm: TetMesh):
    v = tet_volumes(tm.nodes, tm.tets)
    assert v.min() > 0
    assert tet_components(tm.tets)[0] == 1
    assert np.array_equal(np.unique(tm.tets), np.arange(tm.num_nodes))


def test_tetrahedralize_sphere_and_box():
    s = trimesh.creation.icosphere(subdivisions=3)
    tm = tetrahedralize_surface(s.vertices, s.faces, target_nodes=3000)
    _check_mesh(tm)
    vol = tet_volumes(tm.nodes, tm.tets).sum()
    assert tm.method == "tetgen" and vol == pytest.approx(s.volume, rel=1e-9)
    assert vol == pytest.approx(4 / 3 * np.pi, rel=0.02)  # polyhedral sphere: -0.9 %
    assert 1500 < tm.num_nodes < 6000
    b = trimesh.creation.box((2.0, 1.0, 0.5))
    tb = tetrahedralize_surface(b.vertices, b.faces, target_nodes=800)
    _check_mesh(tb)
    assert tet_volumes(tb.nodes, tb.tets).sum() == pytest.approx(1.0, rel=1e-12)
    np.testing.assert_allclose(np.ptp(tb.nodes, 0), [2.0, 1.0, 0.5], rtol=1e-12)


def test_voxel_tetmesh_exact_volume_and_conforming():
    occ = np.zeros((5, 4, 3), bool)
    occ[:4, 0, 0] = True  # an L of 6 voxels ...
    occ[0, 1:3, 0] = True
    occ[2, 0, 1] = True  # ... plus one on top: 7 face-connected voxels
    occ[4, 3, 2] = True  # touches nothing
    occ[1, 1, 1] = True  # edge-adjacent only to (0, 1, 0) and (2, 0, 1)-style neighbours: not face-connected
    tm = voxel_tetmesh(occ, origin=(1.0, -2.0, 0.5), voxel=0.25)
    _check_mesh(tm)
    assert tm.method == "voxel" and tm.num_tets == 6 * 7
    assert tet_volumes(tm.nodes, tm.tets).sum() == pytest.approx(7 * 0.25**3, rel=1e-13)
    # conforming: every interior triangle is shared by exactly two tets, so the boundary triangles are exactly
    # two per exposed voxel face
    faces = np.sort(tm.tets[:, [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]]].reshape(-1, 3), axis=1)
    _, counts = np.unique(faces, axis=0, return_counts=True)
    assert counts.max() == 2
    kept = np.zeros_like(occ)
    kept[:4, 0, 0] = kept[0, 1:3, 0] = kept[2, 0, 1] = True
    pad = np.pad(kept, 1)
    exposed = sum(int((pad & ~np.roll(pad, s, axis=ax)).sum()) for ax in range(3) for s in (1, -1))
    assert (counts == 1).sum() == 2 * exposed
    # nodes are the distinct voxel corners
    assert tm.num_nodes == len({(i + di, j + dj, k + dk) for i, j, k in np.argwhere(kept)
                                for di in (0, 1) for dj in (0, 1) for dk in (0, 1)})


def test_tetmesh_for_shape_falls_back_to_voxels_on_open_surface():
    s = trimesh.creation.icosphere(subdivisions=3)
    tm = tetmesh_for_shape(s.vertices, s.faces[30:], target_nodes=1500)  # a hole of 30 triangles
    _check_mesh(tm)
    assert tm.method == "voxel" and tm.info["path"] == "voxel" and "watertight" in tm.info["tetgen_error"]
    assert tet_volumes(tm.nodes, tm.tets).sum() == pytest.approx(4 / 3 * np.pi, rel=0.08)
    assert 700 < tm.num_nodes < 3500
    ok = tetmesh_for_shape(s.vertices, s.faces, target_nodes=1500)
    assert ok.info["path"] == "tetgen"


def test_tetmesh_for_shape_survives_self_intersection():
    """Two overlapping spheres, as one self-intersecting surface: TetGen 0.8.4 aborts the process on this input;
    it runs in a child, so tetrahedralize_surface raises instead, and the voxel fill meshes the union."""
    a = trimesh.creation.icosphere(subdivisions=2)
    b = a.copy()
    b.apply_translation([1.0, 0.0, 0.0])
    u = trimesh.util.concatenate([a, b])
    with pytest.raises(TetrahedralizationError):
        tetrahedralize_surface(u.vertices, u.faces, target_nodes=1200)
    tm = voxel_fill_tetmesh(u.vertices, u.faces, resolution=20)
    _check_mesh(tm)
    assert tm.info["fill"] == "flood" and tm.info["glue"]["dilations"] == 0
    r, d = 1.0, 1.0
    union = 2 * 4 / 3 * np.pi * r**3 - np.pi * (4 * r + d) * (2 * r - d) ** 2 / 12
    assert tet_volumes(tm.nodes, tm.tets).sum() == pytest.approx(union, rel=0.08)


def test_overlapping_spheres_go_through_union_and_tetgen():
    a = trimesh.creation.icosphere(subdivisions=3)
    b = a.copy()
    b.apply_translation([1.0, 0.0, 0.0])
    u = trimesh.util.concatenate([a, b])
    tm = tetmesh_for_shape(u.vertices, u.faces, target_nodes=1500)
    _check_mesh(tm)
    assert tm.info["path"] == "union+tetgen" and tm.method == "tetgen"
    assert tm.info["union"]["bodies_in"] == 2 and tm.info["union"]["bodies_out"] == 1
    vol = tet_volumes(tm.nodes, tm.tets).sum()
    assert vol == pytest.approx(tm.info["union"]["volume_out"], rel=1e-4)  # TetGen fills the union (-5e-6)
    union = 2 * 4 / 3 * np.pi - np.pi * 5 / 12  # two unit spheres 1 apart minus their lens
    assert vol == pytest.approx(union, rel=0.02)  # polyhedral spheres: measured -0.8 %
    np.testing.assert_allclose(tm.nodes.min(0), [-1, -1, -1], atol=0.01)
    np.testing.assert_allclose(tm.nodes.max(0), [2, 1, 1], atol=0.01)
    assert 750 < tm.num_nodes < 3000


def _two_cubes(gap):
    a = trimesh.creation.box((1.0, 1.0, 1.0))
    a.apply_translation([0.5, 0.5, 0.5])
    b = a.copy()
    b.apply_translation([1.0 + gap, 0.0, 0.0])
    return trimesh.util.concatenate([a, b])


def test_glue_joins_two_cubes_half_a_voxel_apart():
    """Unit cubes [0, 1]^3 and [1 + g, 2 + g] x [0, 1]^2 at R = 21 voxels along x (voxel h = (2 + g) / 21) with
    g = h / 2: the grid is odd, so one voxel layer is centred on the gap; the winding trim empties it and the
    fill is two 10^3-ish blocks. One box dilation glues them; the closing fills the gap layer back."""
    R = 21
    g = 1.0 / (R - 0.5)
    c = _two_cubes(g)
    h = (2.0 + g) / R
    assert g == pytest.approx(0.5 * h, rel=1e-12)
    raw = voxel_fill_tetmesh(c.vertices, c.faces, resolution=R, method="flood", glue=False)
    assert raw.info["components"] == 2 and raw.info["kept_volume_fraction"] == pytest.approx(0.5, abs=0.01)
    tm = voxel_fill_tetmesh(c.vertices, c.faces, resolution=R, method="flood")
    _check_mesh(tm)
    gl = tm.info["glue"]
    assert gl["components_before"] == 2 and gl["dilations"] == 1 and gl["components_after"] == 1
    assert gl["kept_volume_fraction"] >= 0.99 and gl["original_covered_fraction"] == 1.0
    assert tm.info["voxel"] == pytest.approx(h, rel=1e-12)
    vol = tet_volumes(tm.nodes, tm.tets).sum()
    assert vol == pytest.approx(gl["voxels_kept"] * h**3, rel=1e-12)
    # the closing fills the whole gap layer (one voxel thick, the cubes' y-z section) and adds nothing else
    ny, nz = (int(round(np.ptp(raw.nodes[:, a]) / h)) for a in (1, 2))
    assert gl["voxels_before"] == 2 * round(raw.info["volume"] / h**3)
    assert gl["voxels_kept"] == gl["voxels_before"] + ny * nz and gl["bridge_voxels"] == 0
    # both cubes (~1 each, faces rounded out to the grid: measured 10 x 11 x 11 voxels) plus the gap layer
    assert vol == pytest.approx(2.0 + h, rel=0.15)
    ext = np.ptp(tm.nodes, 0)
    assert ext[0] == pytest.approx(2.0 + g, abs=1.01 * h) and ext[1] == pytest.approx(1.0, abs=1.01 * h)
    # through tetmesh_for_shape: the union leaves two disjoint bodies, so the voxel path (flood, glued)
    ts = tetmesh_for_shape(c.vertices, c.faces, target_nodes=1500)
    _check_mesh(ts)
    assert ts.info["path"] == "voxel" and ts.info["union"]["bodies_out"] == 2 and ts.info["fill"] == "flood"
    assert "2 disjoint bodies" in ts.info["path_reason"]
    assert ts.info["glue"]["kept_volume_fraction"] >= 0.99 and ts.info["glue"]["original_covered_fraction"] >= 0.99
    assert abs(np.log(ts.num_nodes / 1500)) < np.log(1.3)


def test_glue_occupancy_edge_and_corner_contacts():
    for offset, bridge in (((4, 4, 2), 1), ((4, 4, 4), 2)):  # B meets A along an edge / at a corner
        occ = np.zeros((10, 10, 10), bool)
        occ[2:4, 2:4, 2:4] = True
        occ[offset[0]:offset[0] + 2, offset[1]:offset[1] + 2, offset[2]:offset[2] + 2] = True
        assert voxel_tetmesh(occ, (0, 0, 0), 1.0).info["components"] == 2  # not face-connected
        kept, info = glue_occupancy(occ)
        assert info["dilations"] == 1 and info["components_before"] == 2 and info["components_after"] == 1
        assert info["bridge_voxels"] == bridge and kept.sum() == 16 + bridge and np.all(kept[occ])
        assert info["kept_volume_fraction"] == 1.0 and info["original_covered_fraction"] == 1.0
        tm = voxel_tetmesh(kept, (0, 0, 0), 1.0)
        _check_mesh(tm)
        assert tm.num_tets == 6 * (16 + bridge)
        # without shaving, the dilated grid itself: two 4^3 boxes, overlapping in 2 x 2 x 4 (edge) / 2^3 (corner)
        fat, info = glue_occupancy(occ, shave=False)
        assert fat.sum() == 128 - (16 if bridge == 1 else 8) and info["components_after"] == 1
    # a lone voxel 5 empty voxels away from a block is beyond two dilations (they close gaps of 4): kept out, with its share reported
    occ = np.zeros((16, 8, 8), bool)
    occ[2:6, 2:6, 2:6] = True
    occ[11, 3, 3] = True
    kept, info = glue_occupancy(occ)
    assert info["dilations"] == 2 and info["components_after"] == 2 and not kept[11, 3, 3]
    assert info["original_covered_fraction"] == pytest.approx(64 / 65)
    kept, info = glue_occupancy(occ, max_dilations=0)
    assert info["dilations"] == 0 and kept.sum() == 64
    with pytest.raises(ValueError):
        glue_occupancy(np.zeros((3, 3, 3), bool))


def test_pyvista_ant_is_one_piece_with_its_legs(mesh_file):
    """pyvista's ant: 15 closed bodies, 9 after the union (legs and antennae do not touch the body). The voxel
    path must keep the legs: one face-connected piece holding >= 99 % of the occupied volume, and the tet nodes
    near (almost) every surface vertex."""
    from scipy.spatial import cKDTree

    from physskin_gs.geometry.normalize import compute_normalization
    from physskin_gs.io.mesh import load_mesh

    m = load_mesh(str(mesh_file("pyvista_ant.ply")))
    v, f = np.asarray(m.vertices, np.float64), np.asarray(m.faces)
    vn = compute_normalization(v[np.unique(f)]).to_normalized(v)
    tm = tetmesh_for_shape(vn, f, target_nodes=3000)
    _check_mesh(tm)
    info = tm.info
    assert info["path"] == "voxel" and info["fill"] == "flood"
    assert info["union"]["bodies_in"] == 15 and info["union"]["bodies_out"] == 9
    assert info["glue"]["components_before"] > 10 and info["glue"]["dilations"] >= 1
    assert info["glue"]["kept_volume_fraction"] >= 0.99 and info["glue"]["original_covered_fraction"] >= 0.99
    assert info["kept_volume_fraction"] == 1.0  # voxel_tetmesh found nothing more to drop
    d, _ = cKDTree(tm.nodes).query(vn[np.unique(f)])
    assert (d < 1.5 * info["voxel"]).mean() >= 0.95  # measured 100 %
    # the legs stay thin: the mesh volume stays near the union's (0.102; measured 0.125 with voxel-thick legs)
    assert info["volume"] < 1.5 * info["union"]["volume_out"]
    assert abs(np.log(tm.num_nodes / 3000)) < np.log(1.3)


def test_kaolin_beam_surface(meshes_dir):
    path = meshes_dir / "kaolin_beam_surf.obj"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    m = trimesh.load(str(path), process=False, force="mesh")
    tm = tetrahedralize_surface(np.asarray(m.vertices), np.asarray(m.faces), target_nodes=1500)
    _check_mesh(tm)
    ext = np.ptp(tm.nodes, 0)
    np.testing.assert_allclose(np.sort(ext), [0.25, 0.25, 1.0], rtol=1e-9)
    assert tet_volumes(tm.nodes, tm.tets).sum() == pytest.approx(ext.prod(), rel=1e-9)
    # the unstructured mesh's lowest free-free bending pair vs Timoshenko at L / a = 4 (measured +2.6 %)
    K, Md = stiffness_matrix(tm, E, NU), mass_matrix_diag(tm, RHO)
    lam, _ = fem_modes(K, Md, k=2)
    w = np.sqrt(lam) / timoshenko_free_free(E, NU, RHO, 1.0, 0.25)
    assert 1.0 < w[0] < 1.05 and w[1] / w[0] - 1 < 0.01


# ----------------------------------------------------------------------------------- elastic-mode weights
def test_elastic_mode_weights_hold_the_lowest_modes_exactly():
    """The fields of the lowest modes are in span(W), so Rayleigh-Ritz on the same mesh reproduces those modes'
    frequencies and shapes to round-off; the later ones (only approximated) stay >= 1 (min-max)."""
    from physskin_gs.physics.fem import elastic_mode_weights

    tm = box_tetmesh((2.0, 0.5, 0.4), (16, 4, 4))  # no symmetric pair: 0.5 x 0.4 section
    ref = fem_reference(tm, nu=0.45, k=8)
    W = elastic_mode_weights(tm, m=9, nu=0.45)
    assert W.shape == (tm.num_nodes, 10) and np.all(W[:, -1] == 1.0)
    vol = lumped_volume(tm)
    G = W[:, :-1].T @ (vol[:, None] * W[:, :-1])  # V-orthogonal, unit V-weighted RMS, V-orthogonal to 1
    np.testing.assert_allclose(G, vol.sum() * np.eye(9), atol=1e-8 * vol.sum())
    assert np.abs(W[:, :-1].T @ vol).max() < 1e-9 * vol.sum()
    r = evaluate_basis(ref, W)
    lap = evaluate_basis(ref, laplacian_eigenbasis(tm, 9))
    np.testing.assert_allclose(r["freq_ratios"][:3], 1.0, atol=1e-7)  # modes 1-3: all 9 fields
    assert max(r["mode_residuals"][:3]) < 1e-6
    assert min(r["freq_ratios"]) >= 1 - 1e-9
    assert r["freq_ratio_geomean"] < lap["freq_ratio_geomean"]  # measured 1.03 vs 1.17


def _symmetric_box_tetmesh(size, div, origin) -> TetMesh:
    """A box of cubes, each split into 24 tets (its centre, a face centre, an edge): the mesh has every symmetry of
    the box (Kuhn's 6-tet split favours one diagonal, so a square beam's two bendings differ on it by 45 %)."""
    h = np.asarray(size, float) / np.asarray(div, float)
    pts, index, tets = [], {}, []

    def node(p):
        key = tuple(np.round(p * 2 / h).astype(int))
        if key not in index:
            index[key] = len(pts)
            pts.append(p)
        return index[key]

    corners = np.array([[a, b, c] for a in (0, 1) for b in (0, 1) for c in (0, 1)], float)
    for o in np.ndindex(*(int(d) for d in div)):
        o = np.asarray(o, float)
        centre = node((o + 0.5) * h)
        for ax in range(3):
            a1, a2 = [a for a in range(3) if a != ax]
            for side in (0.0, 1.0):
                fc = o + 0.5
                fc[ax] = o[ax] + side
                face = node(fc * h)
                quad = sorted((c for c in corners if c[ax] == side), key=lambda c: np.arctan2(c[a2] - 0.5, c[a1] - 0.5))
                for q in range(4):
                    t = [centre, face, node((o + quad[q]) * h), node((o + quad[(q + 1) % 4]) * h)]
                    P = np.array([pts[v] for v in t])
                    if np.linalg.det(P[1:] - P[0]) < 0:
                        t[2], t[3] = t[3], t[2]
                    tets.append(t)
    return TetMesh(np.array(pts) + np.asarray(origin, float), np.array(tets), "box24", {})


def test_elastic_mode_weights_do_not_depend_on_the_frame_or_a_pair_mixing():
    """A rotated mesh gives the same fields (up to sign); a square beam's two equal bendings (exactly equal on a
    mesh with the beam's symmetries, turned 27 degrees so the solver mixes them) are taken whole or not at all, so
    the weights keep the beam's y <-> z symmetry (with MODE_CLUSTER_RTOL = 0 the residual is 0.02-1.0)."""
    from scipy.spatial.transform import Rotation

    from physskin_gs.physics.fem import elastic_mode_weights

    tm = box_tetmesh((2.0, 0.5, 0.4), (12, 3, 3), origin=(-1.0, -0.25, -0.2))
    W = elastic_mode_weights(tm, m=6)
    R = Rotation.from_euler("xyz", [30, -50, 70], degrees=True).as_matrix()
    Wr = elastic_mode_weights(TetMesh(tm.nodes @ R.T, tm.tets, "box", {}), m=6)
    np.testing.assert_allclose(np.abs(Wr), np.abs(W), atol=1e-6 * np.abs(W).max())
    sq = _symmetric_box_tetmesh((1.0, 0.2, 0.2), (10, 2, 2), (-0.5, -0.1, -0.1))
    key = {tuple(np.round(p, 9)): i for i, p in enumerate(sq.nodes)}
    perm = np.array([key[tuple(np.round(p, 9))] for p in sq.nodes[:, [0, 2, 1]]])  # the node at (x, z, y)
    turned = TetMesh(sq.nodes @ Rotation.from_euler("x", 27, degrees=True).as_matrix().T, sq.tets, "box24", {})
    lam, _ = fem_modes(stiffness_matrix(turned, 1.0, 0.45), mass_matrix_diag(turned, 1.0), k=2)
    assert lam[1] == pytest.approx(lam[0], rel=1e-9)  # the pair
    for m in (1, 2, 3, 4, 8):
        Ws = elastic_mode_weights(turned, m=m)
        A, B = Ws[:, :-1], Ws[perm, :-1]
        resid = B - A @ np.linalg.lstsq(A, B, rcond=None)[0]
        assert np.abs(resid).max() < 1e-8 * np.abs(B).max(), m
        assert 1 <= A.shape[1] <= m
    assert elastic_mode_weights(turned, m=2).shape[1] == 2  # the second field would split a pair: one kept


def test_elastic_mode_weights_of_a_body_with_a_stiff_part_bend_its_soft_part():
    """A bar whose left half is 1e4 times stiffer (``tet_stiffness``, a ``--region`` of wood in a rubber object):
    its modes' fields vary five times less across the stiff half than across the soft one (so a stiff part no longer
    locks the whole subspace: the one-material fields strained it as much as the soft half), and with one material
    the fields vary across both halves alike. Density per node changes the modes too (a heavy soft half)."""
    from physskin_gs.physics.fem import elastic_mode_weights, shape_gradients

    tm = box_tetmesh((2.0, 0.5, 0.5), (16, 4, 4), origin=(-1.0, -0.25, -0.25))
    g, vol = shape_gradients(tm)
    cen = tm.nodes[tm.tets].mean(1)  # [T, 3]
    left = cen[:, 0] < 0

    def grad_ratio(W):  # mean |grad W| over the stiff half / over the soft half, all fields
        G = np.einsum("tif,tid->tfd", W[tm.tets][:, :, :-1], g)  # [T, k, 3] (the constant column dropped)
        n = np.linalg.norm(G, axis=2).mean(1)  # [T]
        return float((n[left] * vol[left]).sum() / vol[left].sum() / ((n[~left] * vol[~left]).sum() / vol[~left].sum()))

    one = elastic_mode_weights(tm, m=8, nu=0.45)
    two = elastic_mode_weights(tm, m=8, nu=0.45, tet_stiffness=np.where(left, 1e4, 1.0))
    assert one.shape == two.shape and np.allclose(two[:, -1], 1.0)
    assert 0.5 < grad_ratio(one) < 2.0  # a homogeneous bar: both halves alike (mirror pairs)
    assert grad_ratio(two) < 0.3 * grad_ratio(one)  # 0.21 against 1.0 (the stiff half's fields: near its rigid motions)
    heavy = elastic_mode_weights(tm, m=8, nu=0.45, node_density=np.where(tm.nodes[:, 0] > 0, 50.0, 1.0))
    assert not np.allclose(np.abs(heavy[:, :-1]), np.abs(one[:, :-1]), atol=1e-3)
