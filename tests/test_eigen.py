"""Skinning-eigenmode field on RKPM nodes (physskin_gs.model.eigen): reproduction, gradients, physics, I/O.

Physical reference for the beam: the Neumann eigenfunctions of the Laplacian on a 2 x 0.4 x 0.4 box are
products of cosines; the lowest non-constant ones are the axial cos(k pi (x - x0) / L), k = 1..4, with
eigenvalues (k pi / L)^2, and the first cross-section ones cos(pi (y - y0) / b) tie with k = 5 at
(pi / b)^2 = 25 (pi / L)^2 since L / b = 5. The field's eigenvalues include the constant factor lambda + 4 mu.
"""

import io

import numpy as np
import pytest
import torch
from scipy.spatial import cKDTree

from physskin_gs.geometry.normalize import normalize_points
from physskin_gs.lbs import deformation_gradient, lbs_points
from physskin_gs.model.eigen import (CLUSTER_EXTRA, EigenSkinningField, _lame_factor, build_eigen_field,
                                     cell_nodes, cluster_cutoff)
from physskin_gs.model.field import SkinningField


def _beam(seed=0, nx=50, ny=10, nz=10):
    """Jittered grid of a 2 x 0.4 x 0.4 box (5000 points), normalised to x in [-1, 1]."""
    rng = np.random.default_rng(seed)
    axes = [(np.arange(k) + 0.5) / k * e for k, e in ((nx, 2.0), (ny, 0.4), (nz, 0.4))]
    g = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
    g += rng.uniform(-0.012, 0.012, g.shape)  # 0.3 x the 0.04 grid step
    return np.asarray(normalize_points(g)[0], dtype=np.float64)


def _ball(rng, n, center, radius):
    p = rng.normal(size=(n, 3))
    p *= (radius * rng.random((n, 1)) ** (1 / 3)) / np.linalg.norm(p, axis=1, keepdims=True)
    return p + np.asarray(center)


@pytest.fixture(scope="module")
def beam():
    V = _beam()
    # 15 handles: m = 14 ends at the axial k = 6 mode (k^2 = 36), below the pair at 41 (module docstring)
    return V, build_eigen_field(V, 15, seed=0, num_nodes=256, quadrature="uniform")


@pytest.fixture(scope="module")
def blobs():
    rng = np.random.default_rng(1)
    V = np.concatenate([_ball(rng, 2000, [-0.7, 0, 0], 0.3), _ball(rng, 2000, [0.7, 0, 0], 0.3)])
    V = np.asarray(normalize_points(V)[0], dtype=np.float64)
    return V, build_eigen_field(V, 8, seed=0, num_nodes=256, quadrature="uniform")


def _interior(V, n=2000, seed=3):
    """Random points inside the beam: volume points moved by up to 0.25 of the grid step (0.02 normalised)."""
    rng = np.random.default_rng(seed)
    return V[rng.integers(0, len(V), n)] + rng.uniform(-0.005, 0.005, (n, 3))


def test_interface_units_and_constant_handle(beam):
    V, f = beam
    assert isinstance(f, SkinningField) and f.kind == "eigen" and f.num_handles == 15
    W, G = f.weights_and_grads(torch.from_numpy(V).float())
    assert W.dtype == torch.float32 and G.dtype == torch.float32
    assert W.shape == (len(V), 15) and G.shape == (len(V), 15, 3)
    assert torch.all(W[:, -1] == 1.0) and torch.all(G[:, -1] == 0.0)
    rms = W[:, :-1].double().pow(2).mean(0).sqrt()  # units: RMS 1 over the build's volume points
    assert torch.allclose(rms, torch.ones(14, dtype=torch.float64), atol=1e-6)
    np.testing.assert_allclose(f.col_scale, 1.0, atol=1e-9)  # c^T M c is that mean square already


def test_shape_functions_reproduce_affine_functions(beam):
    V, f = beam
    x = _interior(V)
    Phi, dPhi, covered, gamma = f.shape_functions(x)
    assert covered.all() and np.all(gamma == 1.0)  # full RKPM correction everywhere inside
    ones = np.asarray(Phi.sum(1)).ravel()
    assert np.abs(ones - 1.0).max() < 1e-12  # measured 1e-14
    assert np.abs(Phi @ f.nodes - x).max() < 1e-6  # measured 4e-10
    for k in range(3):
        assert np.abs(np.asarray(dPhi[k].sum(1)).ravel()).max() < 1e-9  # grad of 1
        assert np.abs(dPhi[k] @ f.nodes - np.eye(3)[k]).max() < 1e-6  # grad of x = identity; measured 2e-8
    # hence coefficients c_n = a . x_n + b give the field a . x + b exactly
    a, b = np.array([0.3, -1.2, 0.7]), 0.4
    np.testing.assert_allclose(Phi @ (f.nodes @ a + b), x @ a + b, atol=1e-6)


def test_constant_handle_spans_every_affine_motion(beam):
    V, f = beam
    X = torch.from_numpy(_interior(V, 500))
    W, G = (t.double() for t in f.weights_and_grads(X))
    A = torch.tensor([[0.1, -0.3, 0.2], [0.05, 0.2, -0.1], [0.3, 0.0, -0.15]], dtype=torch.float64)
    t = torch.tensor([0.5, -0.2, 0.1], dtype=torch.float64)
    Z = torch.zeros(f.num_handles, 3, 4, dtype=torch.float64)
    Z[-1, :, :3], Z[-1, :, 3] = A, t
    assert torch.allclose(lbs_points(X, W, Z), X + X @ A.T + t, atol=1e-12)
    F = deformation_gradient(X, W, G, Z)
    assert torch.allclose(F, (torch.eye(3, dtype=torch.float64) + A).expand_as(F), atol=1e-12)


def _fd_check(f, x, eps):
    _, G = f.evaluate(x)
    worst = 0.0
    for k in range(3):
        dx = np.zeros(3)
        dx[k] = eps
        fd = (f.evaluate(x + dx)[0] - f.evaluate(x - dx)[0]) / (2 * eps)  # [N, H]
        worst = max(worst, float((np.abs(fd - G[:, :, k]) / (np.abs(G).max() + 1e-12)).max()))
    return worst


def test_gradient_matches_central_differences_inside(beam):
    V, f = beam
    assert _fd_check(f, _interior(V, 400, seed=5), 1e-5) < 1e-3  # measured 1e-8


def test_gradient_matches_central_differences_in_the_blend_band(beam):
    V, f = beam
    rng = np.random.default_rng(7)
    r = float(np.median(f.radius))
    top = V[:, 1].max()
    x = np.stack([rng.uniform(-0.9, 0.9, 4000), top + rng.uniform(0, r, 4000), rng.uniform(-0.15, 0.15, 4000)], 1)
    gamma = f.shape_functions(x)[3]
    band = x[(gamma > 0.05) & (gamma < 0.95)]
    assert len(band) >= 50  # measured 220 (RKPM partly blended with Shepard above the top face)
    assert _fd_check(f, band[:200], 1e-6) < 1e-3  # measured 2e-8


def test_beam_low_modes_are_the_axial_cosines(beam):
    V, f = beam
    W, _ = f.evaluate(V)
    x = V[:, 0]
    assert abs(np.corrcoef(W[:, 0], x)[0, 1]) > 0.95  # measured 0.993: monotone, cos(pi (x - x0) / L)-like
    bins = np.digitize(x, np.linspace(-1, 1, 41))
    for j in range(4):  # the first four are functions of x alone (share of variance explained by x-bins)
        w = W[:, j]
        mean_b = np.zeros(bins.max() + 1)
        np.add.at(mean_b, bins, w)
        mean_b /= np.maximum(np.bincount(bins), 1)
        assert 1 - np.mean((w - mean_b[bins]) ** 2) / w.var() > 0.98  # measured >= 0.992
    # eigenvalues: (k pi / L)^2 (lambda + 4 mu), k = 1..4, then the triple at k^2 = 25
    L = x.max() - x.min()
    ratio = f.eigenvalues / (_lame_factor(0.45) * (np.pi / L) ** 2)
    np.testing.assert_allclose(ratio[:4], [1, 4, 9, 16], rtol=0.05)  # measured 0.984 3.94 8.90 15.99
    np.testing.assert_allclose(ratio[4:7], 25, rtol=0.05)  # measured 25.0 25.2 25.2


def test_beam_cross_section_modes_come_after_the_axial_ones(beam):
    V, f = beam
    W, _ = f.evaluate(V)

    def captured(v, B):  # share of v's variance in span(B)
        c, *_ = np.linalg.lstsq(B, v, rcond=None)
        return 1 - np.sum((v - B @ c) ** 2) / np.sum(v * v)

    for axis in (1, 2):
        v = V[:, axis] - V[:, axis].mean()
        assert captured(v, W[:, :4]) < 0.01  # measured 5e-6 / 1e-5
        assert captured(v, W[:, 4:7]) > 0.9  # measured 0.98 / 0.97 (cos(pi y / b) ~ y)


def test_learned_columns_are_mass_orthonormal(beam):
    V, f = beam
    W, _ = f.evaluate(V)
    Wl = W[:, :-1]
    gram = Wl.T @ Wl / len(V)  # the mass Gram with v_p = 1 / V
    assert np.abs(gram - np.eye(f.num_handles - 1)).max() < 1e-8  # measured 2e-14
    assert np.abs(Wl.mean(0)).max() < 1e-8  # M-orthogonal to the constant handle
    assert np.all(np.diff(f.eigenvalues) >= 0) and f.eigenvalues[0] > 0


def test_disconnected_blobs_give_a_piecewise_constant_mode(blobs):
    V, f = blobs
    assert np.median(f.radius) < 0.25  # gap between the blobs: 0.8 (normalised)
    W, _ = f.evaluate(V)
    left = V[:, 0] < 0
    assert f.eigenvalues[0] < 1e-9 * f.eigenvalues[1]  # measured |lambda_0| 3e-14 vs 197
    w = W[:, 0]
    assert w[left].std() < 1e-6 and w[~left].std() < 1e-6  # constant on each blob
    assert abs(abs(w[left].mean()) - 1) < 1e-6 and abs(w[left].mean() + w[~left].mean()) < 1e-6  # +-1


def test_state_round_trip_is_bit_identical(beam):
    V, f = beam
    buf = io.BytesIO()
    torch.save(f.state(), buf)
    buf.seek(0)
    g = EigenSkinningField.from_state(torch.load(buf))
    assert g.kind == "eigen" and g.num_handles == f.num_handles
    x = torch.from_numpy(np.concatenate([_interior(V, 300), [[3.0, 0.0, 0.0], [0.0, 0.3, 0.0]]])).float()
    for a, b in zip(f.weights_and_grads(x), g.weights_and_grads(x)):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="lacks"):
        EigenSkinningField.from_state({k: v for k, v in f.state().items() if k != "radius"})


def test_build_is_deterministic_for_a_seed(beam):
    V, f = beam
    again = build_eigen_field(torch.from_numpy(V), 15, seed=0, num_nodes=256, quadrature="uniform")
    for k, v in f.state().items():
        assert torch.equal(v, again.state()[k]), k
    # cell nodes do not depend on the seed (it only starts the Lanczos iteration): the same field to round-off
    other = build_eigen_field(V, 15, seed=1, num_nodes=256, quadrature="uniform")
    assert torch.equal(other.state()["nodes"], f.state()["nodes"])
    np.testing.assert_allclose(other.eigenvalues, f.eigenvalues, rtol=1e-8)
    # farthest-point nodes start from a seeded point: other nodes, the same physics
    a = build_eigen_field(V, 15, seed=0, num_nodes=256, quadrature="uniform", nodes="fps")
    b = build_eigen_field(V, 15, seed=1, num_nodes=256, quadrature="uniform", nodes="fps")
    assert not torch.equal(a.state()["nodes"], b.state()["nodes"])
    np.testing.assert_allclose(b.eigenvalues[:4], a.eigenvalues[:4], rtol=0.02)  # measured 0.3 %
    np.testing.assert_allclose(a.eigenvalues[:4], f.eigenvalues[:4], rtol=0.03)  # either node rule


def test_far_points_are_finite_and_continuous_at_the_edge(beam):
    V, f = beam
    far = np.array([[50.0, 0, 0], [0, -1e4, 0], [3, 3, 3], [1.5, 0.1, -0.2], [-1e6, 1e6, 1e6]])
    W, G = f.evaluate(far)
    assert np.isfinite(W).all() and np.isfinite(G).all()
    np.testing.assert_array_equal(W[:, :-1], f.coeffs[f.nearest_scaled(far)])
    assert np.all(G == 0.0)
    # leave the beam along +x from its last node: the field is continuous where the last support ends
    n0 = int(np.argmax(f.nodes[:, 0]))
    ray = lambda t: (f.nodes[n0] + np.array([t, 0.0, 0.0]))[None]  # noqa: E731
    lo, hi = 0.0, 4.0 * float(f.radius.max())
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f.shape_functions(ray(mid))[2][0] else (lo, mid)
    w_in, w_out = f.evaluate(ray(lo))[0], f.evaluate(ray(hi))[0]
    assert f.shape_functions(ray(lo))[2][0] and not f.shape_functions(ray(hi))[2][0]
    assert np.abs(w_in - w_out).max() < 1e-6
    # values stay bounded everywhere (Lebesgue bound 1 + sqrt(3 kappa_hi) < 10 times max |C|)
    grid = np.random.default_rng(2).uniform(-1.5, 1.5, (20000, 3))
    assert np.abs(f.evaluate(grid)[0]).max() <= 10 * np.abs(f.coeffs).max()  # measured 3.0 vs max |C| 2.9


def test_errors():
    V = _beam(nx=10, ny=4, nz=4)
    with pytest.raises(ValueError):
        build_eigen_field(V[:, :2])
    bad = V.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="finite"):
        build_eigen_field(bad)
    with pytest.raises(ValueError, match="num_handles"):
        build_eigen_field(V, 1)
    with pytest.raises(ValueError, match="too few"):
        build_eigen_field(V[:12], 16)
    with pytest.raises(ValueError, match="Poisson"):
        build_eigen_field(V, 4, nu=0.5)
    f = build_eigen_field(V, 4, num_nodes=64)
    with pytest.raises(ValueError, match="finite"):
        f.evaluate(np.array([[0.0, np.inf, 0.0]]))
    with pytest.raises(ValueError, match=r"\(N, 3\)"):
        f.weights_and_grads(torch.zeros(4, 2))
    W, G = f.weights_and_grads(torch.zeros(0, 3))
    assert W.shape == (0, 4) and G.shape == (0, 4, 3)


def test_values_do_not_depend_on_batching(beam):
    V, f = beam
    x = np.concatenate([_interior(V, 50), [[0.0, 0.4, 0.0], [1.02, 0.0, 0.0]]])
    W, G = f.evaluate(x)
    for i in (0, 17, 50, 51):
        Wi, Gi = f.evaluate(x[i:i + 1])
        assert np.array_equal(Wi[0], W[i]) and np.array_equal(Gi[0], G[i])


def test_dense_and_lanczos_eigensolvers_agree(beam):
    V, _ = beam
    # farthest-point nodes, so 160 and 161 nodes differ by one node; k = m + 1 + CLUSTER_EXTRA = 20 eigenpairs
    kw = dict(quadrature="uniform", nodes="fps")
    dense = build_eigen_field(V, 16, num_nodes=8 * (16 + CLUSTER_EXTRA), **kw)  # n <= 8 k: dense generalised eigh
    lanczos = build_eigen_field(V, 16, num_nodes=8 * (16 + CLUSTER_EXTRA) + 1, **kw)  # ARPACK shift-invert
    np.testing.assert_allclose(lanczos.eigenvalues[:4], dense.eigenvalues[:4], rtol=0.005)  # measured 2e-4
    L = V[:, 0].max() - V[:, 0].min()
    ratio = dense.eigenvalues / (_lame_factor(0.45) * (np.pi / L) ** 2)
    np.testing.assert_allclose(ratio[:4], [1, 4, 9, 16], rtol=0.05)  # measured 0.984 3.96 8.97 16.2


def test_knn_quadrature_weighs_points_by_the_volume_they_sample():
    """The default ``knn`` rule: about uniform on a uniform cloud; on a cloud whose surface shell is sampled 10x
    denser than the interior, the shell's total weight moves most of the way from its point fraction (what uniform
    weights give it) toward its volume fraction; the default build still reproduces affine functions and the beam's first mode."""
    from physskin_gs.model.eigen import quadrature_weights

    rng = np.random.default_rng(0)
    U = rng.uniform(-1, 1, (8000, 3))
    w = quadrature_weights(U, "knn")
    inner = np.abs(U).max(1) < 0.8
    assert w.sum() == pytest.approx(1.0) and np.all(w > 0)
    assert np.median(w[inner]) * len(U) == pytest.approx(1.0, rel=0.25)
    # a ball: coarse interior (2000 points) + a thin shell 0.9 < r < 1 sampled with 6000 points
    def ball(n, r0, r1):
        d = rng.normal(size=(n, 3))
        d /= np.linalg.norm(d, axis=1, keepdims=True)
        return d * ((r0 ** 3 + (r1 ** 3 - r0 ** 3) * rng.random((n, 1))) ** (1 / 3))
    P = np.concatenate([ball(2000, 0.0, 0.9), ball(6000, 0.9, 1.0)])
    shell = np.linalg.norm(P, axis=1) > 0.9
    frac = 1 - 0.9 ** 3  # 0.271 of the volume; 0.75 of the points
    got = quadrature_weights(P, "knn")[shell].sum()
    assert frac < got < 0.5 < shell.mean()  # measured 0.44: most of the way from 0.75 (points) to 0.27 (volume)
    with pytest.raises(ValueError, match="quadrature"):
        quadrature_weights(P, "bogus")
    V = _beam()
    f = build_eigen_field(V, 16, seed=0, num_nodes=256)  # knn by default
    W, _ = f.evaluate(V)
    assert abs(np.corrcoef(W[:, 0], V[:, 0])[0, 1]) > 0.95
    Phi = f.shape_functions(_interior(V, 300))[0]
    assert np.abs(np.asarray(Phi.sum(1)).ravel() - 1).max() < 1e-9


def test_cluster_cutoff_never_splits_near_equal_eigenvalues():
    lam = np.array([1.0, 4.0, 9.0, 16.0, 25.0, 25.1, 25.2, 26.0, 26.05, 29.0])
    assert cluster_cutoff(lam, 4, 0.015) == 4  # 16 | 25: a real gap
    assert cluster_cutoff(lam, 5, 0.015) == 4  # 25 | 25.1 would split the triple: down to its start
    assert cluster_cutoff(lam, 6, 0.015) == 4
    assert cluster_cutoff(lam, 7, 0.015) == 7  # 25.2 | 26.0 is a 3 % gap
    assert cluster_cutoff(lam, 8, 0.015) == 7  # the pair 26.0 / 26.05
    assert cluster_cutoff(lam, 8, 0.0) == 8  # tol 0 keeps m
    assert cluster_cutoff(lam[:6], 6, 0.015) == 6  # nothing computed beyond the cut-off: keep m
    # the first cluster straddles the cut (a ball's three l = 1 modes, 2 asked for): keep all three
    ball = np.array([1.0, 1.014, 1.024, 2.6, 2.62, 2.63, 2.65, 2.66])
    assert cluster_cutoff(ball, 2, 0.015) == 3 and cluster_cutoff(ball, 1, 0.015) == 3
    assert cluster_cutoff(np.array([5.0, 5.0, 5.0, 5.01]), 2, 0.015) == 2  # its end not computed: keep m
    # a dense spectrum (1 % gaps all the way) has no cluster worth keeping whole: m is kept
    dense = 10.0 * 1.01 ** np.arange(40)
    assert cluster_cutoff(dense, 30, 0.015) == 30
    # a chained cluster of three is dropped whole (the shift is bounded by max_shift)
    chain = np.array([1.0, 2.0, 3.0, 4.0, 4.02, 4.04, 5.0])
    assert cluster_cutoff(chain, 5, 0.015) == 3 and cluster_cutoff(chain, 5, 0.015, max_shift=1) == 6


def test_requested_handles_drop_to_the_start_of_a_split_mirror_pair(beam):
    """On the 2 x 0.4 x 0.4 beam, m = 15 learned columns would end inside the y / z pair at k^2 = 41 (the cross
    modes times the axial k = 4 cosine: 25 + 16): keeping one of the pair is an arbitrary mixture of y and z, a
    preferred sideways direction in a square beam. The build drops that pair (15 handles); cluster_tol = 0
    keeps 16."""
    V, f15 = beam
    f = build_eigen_field(V, 16, seed=0, num_nodes=256, quadrature="uniform")
    assert f.num_handles == 15
    np.testing.assert_allclose(f.eigenvalues, f15.eigenvalues, rtol=1e-8)
    L = V[:, 0].max() - V[:, 0].min()
    raw = build_eigen_field(V, 16, seed=0, num_nodes=256, quadrature="uniform", cluster_tol=0.0)
    assert raw.num_handles == 16
    ratio = raw.eigenvalues / (_lame_factor(0.45) * (np.pi / L) ** 2)
    assert ratio[14] > 1.03 * ratio[13]  # the kept cut-off at 36 | 41 is a real gap (measured ~15 %)


def _mirror_set(rng, n):
    """(4 n, 3) points of the 2 x 0.4 x 0.4 box, exactly mirror-symmetric across y = 0 and z = 0."""
    p = rng.uniform([-1.0, -0.2, -0.2], [1.0, 0.2, 0.2], (n, 3))
    for a in (1, 2):
        m = p.copy()
        m[:, a] = -m[:, a]
        p = np.concatenate([p, m])
    return p


def test_cell_nodes_count_and_mirror_symmetry():
    rng = np.random.default_rng(4)
    P = _mirror_set(rng, 3000)
    for n, tol in ((100, 0.1), (400, 0.05), (1000, 0.05)):
        c = cell_nodes(P, n)
        assert abs(len(c) - n) <= tol * n  # measured 96, 392, 1008
        lo, hi = P.min(0), P.max(0)
        assert np.all(c >= lo - 1e-12) and np.all(c <= hi + 1e-12)
        for a in (1, 2):  # the mirrored node set is the node set
            m = c.copy()
            m[:, a] = -m[:, a]
            d, _ = cKDTree(c).query(m)
            assert d.max() < 1e-12
        # the nodes reach the surface: the outermost node along each axis is within 1 % of the box of the
        # outermost point (measured <= 0.08 %)
        assert np.all(np.abs(c).max(0) > np.abs(P).max(0) - 0.01 * (hi - lo).max())
        if n >= 400:  # and cover the volume: no point is far from a node (at 100, 2 x 2 cells per section
            dn, _ = cKDTree(c).query(c, k=2)  # put every node on the section's edges)
            dp, _ = cKDTree(c).query(P)
            assert dp.max() < 1.5 * np.median(dn[:, 1])  # measured 1.39 / 1.04


def test_mirror_symmetric_points_give_a_mirror_invariant_span():
    """A mirror-symmetric point set gives a basis whose span is closed under the mirror (what keeps a symmetric
    beam under a symmetric load from drifting sideways); farthest-point nodes from a random start do not."""
    rng = np.random.default_rng(5)
    P = np.asarray(normalize_points(_mirror_set(rng, 1500))[0], dtype=np.float64)

    def residual(f):
        W, _ = f.evaluate(P)
        worst = 0.0
        for a in (1, 2):
            Pm = P.copy()
            Pm[:, a] = -Pm[:, a]
            Wm, _ = f.evaluate(Pm)  # W(mirror x) at the same points
            c, *_ = np.linalg.lstsq(W, Wm, rcond=None)
            worst = max(worst, float(np.linalg.norm(Wm - W @ c) / np.linalg.norm(Wm)))
        return worst

    cells = build_eigen_field(P, 16, seed=0, num_nodes=400)
    assert residual(cells) < 1e-6  # measured ~1e-12
    fps = build_eigen_field(P, 16, seed=0, num_nodes=400, nodes="fps", cluster_tol=0.0)
    assert residual(fps) > 1e-4  # measured ~1e-2


def test_unknown_node_rule_and_bad_cluster_tol_are_rejected(beam):
    V, _ = beam
    with pytest.raises(ValueError, match="node rule"):
        build_eigen_field(V, 8, nodes="grid")
    with pytest.raises(ValueError, match="cluster_tol"):
        build_eigen_field(V, 8, cluster_tol=1.5)


def test_symmetric_cantilever_stays_symmetric_with_cell_nodes():
    """Kaolin's cantilever setup (E 1e5, nu 0.45, rho 500, h 0.05, root pinned, gravity -z) on the reduced
    simulator alone: an eigen basis from mirror-symmetric samples with mirror-symmetric cubature keeps the tip
    on the mid-plane (measured 2e-9 m after 30 steps, the Newton tolerance), while farthest-point nodes on the
    same samples push it 15 mm sideways."""
    from physskin_gs.physics.fem_dynamics import _box_cubature
    from physskin_gs.physics.simulator import SubspaceSimulator

    P = _mirror_set(np.random.default_rng(0), 1500)  # normalised frame of the 1 x 0.2 x 0.2 m beam (x 0.5 m)
    size, origin = np.array([1.0, 0.2, 0.2]), np.array([0.0, -0.1, -0.1])
    Xc = _box_cubature(size, origin, 512, "fps_sym", 0)  # metres, mirror-symmetric
    tip = Xc[:, 0] > 0.95

    def max_side(**kw):
        f = build_eigen_field(P, 16, num_nodes=512, **kw)
        W, G = f.weights_and_grads(torch.from_numpy((Xc - origin - size / 2) / 0.5).float())
        sim = SubspaceSimulator(torch.from_numpy(Xc), W.double(), G.double() / 0.5, float(np.prod(size)), E=1e5,
                                nu=0.45, density=500.0, dt=0.05, floor_height=None, damping=0.0)
        sim.set_pins(torch.from_numpy(np.nonzero(Xc[:, 0] <= 0.02)[0]))
        side, sag = 0.0, 0.0
        for _ in range(30):
            sim.step()
            x = sim.positions().numpy()[tip]
            side, sag = max(side, abs(float(x[:, 1].mean()))), max(sag, -float(x[:, 2].mean()))
        return side, sag

    side, sag = max_side()
    assert sag > 0.5 and side < 1e-6  # the beam sags 0.5-0.8 m and stays on the mid-plane
    side_fps, sag_fps = max_side(nodes="fps")
    assert sag_fps > 0.5 and side_fps > 1e-3


def test_cell_nodes_memory_stays_linear_on_flat_and_outlier_sets():
    """Neighbours are looked up among the occupied cells, so a flat set, a thin diagonal line or a few far
    outliers (a box mostly empty) cost memory in proportion to the points, not to the grid's bounding box."""
    import tracemalloc

    rng = np.random.default_rng(2)
    flat = np.c_[rng.random((500, 2)), np.zeros(500)]
    line = np.repeat(rng.random((4000, 1)), 3, axis=1)
    outliers = -1 + 0.02 * rng.random((20000, 3))
    outliers[:10] = 1 - 0.01 * rng.random((10, 3))
    for pts, n in ((flat, 1024), (line, 1024), (outliers, 1024)):
        tracemalloc.start()
        c = cell_nodes(pts, n)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert c is not None and 0 < len(c) <= len(pts) and np.isfinite(c).all()
        assert peak < 4000 * len(pts) + (8 << 20)  # bytes; a dense grid over these boxes needed 4-30 GiB
    f = build_eigen_field(flat, 16)  # builds (it raised MemoryError with dense neighbour arrays)
    assert np.isfinite(f.evaluate(flat)[0]).all()


# ------------------------------------------------------------------ the C kernel (model._rkpm_native)
def _needs_rkpm_kernel():
    from physskin_gs.model import _rkpm_native
    if not _rkpm_native.available():
        pytest.skip("no C compiler: native RKPM kernel unavailable")
    return _rkpm_native


def test_native_field_matches_the_reference_inside_on_the_fringe_and_outside(beam):
    """The C kernel against the numpy / scipy shape functions: points inside, in the RKPM-to-Shepard fringe
    (just outside the surface), beyond every support (nearest-node rows) and exactly on nodes."""
    rk = _needs_rkpm_kernel()
    V, f = beam
    rng = np.random.default_rng(7)
    x = np.concatenate([_interior(V, 1500), V[:200] * 1.08, rng.uniform(-1.6, 1.6, (1500, 3)), f.nodes[:50]])
    W0, G0 = f.evaluate(x, native=False)
    W1, G1 = f.evaluate(x, native=True)
    Wn, Gn, covered, gamma = rk.evaluate(f, x)
    _, _, cov_ref, gamma_ref = f.shape_functions(x)
    assert (covered == cov_ref).all() and 0 < covered.sum() < len(x)  # some points lie beyond every support
    assert 0 < (gamma_ref[covered] < 1).sum()  # the fringe (blend) is exercised
    np.testing.assert_allclose(gamma, gamma_ref, atol=1e-9)
    assert np.abs(W1 - W0).max() < 1e-10 * np.abs(W0).max()  # measured 1e-15 relative
    assert np.abs(G1 - G0).max() < 1e-9 * np.abs(G0).max()  # measured 2e-15 relative
    assert np.all(W1[:, -1] == 1.0) and np.all(G1[:, -1] == 0.0)
    out = ~covered
    assert np.array_equal(W1[out], W0[out]) and np.all(G1[out] == 0.0)  # the nearest scaled node's coefficients


def test_native_build_matches_the_reference_build(beam):
    """K and M from the kernel's dense accumulation give the reference's eigenpairs and column units."""
    _needs_rkpm_kernel()
    V, _ = beam
    ref = build_eigen_field(V, 15, seed=0, num_nodes=256, native=False)
    fast = build_eigen_field(V, 15, seed=0, num_nodes=256, native=True)
    assert fast.num_handles == ref.num_handles
    np.testing.assert_allclose(fast.eigenvalues, ref.eigenvalues, rtol=1e-9)
    np.testing.assert_allclose(fast.col_scale, ref.col_scale, rtol=1e-9)
    np.testing.assert_allclose(fast.coeffs, ref.coeffs, atol=1e-7 * np.abs(ref.coeffs).max())


def test_native_kernel_required_but_unavailable_raises(beam, monkeypatch):
    from physskin_gs.model import _rkpm_native
    V, f = beam
    monkeypatch.setattr(_rkpm_native, "_load", lambda: None)
    with pytest.raises(RuntimeError, match="native RKPM kernel is unavailable"):
        f.evaluate(V[:10], native=True)
    with pytest.raises(RuntimeError, match="native RKPM kernel is unavailable"):
        build_eigen_field(V, 6, num_nodes=64, native=True)
    W, G = f.evaluate(V[:10])  # the default falls back to the reference
    W0, G0 = f.evaluate(V[:10], native=False)
    assert np.array_equal(W, W0) and np.array_equal(G, G0)


def test_bucket_table_lists_every_covering_node():
    """Each node appears in every bucket its support's box overlaps, ascending; so the covering nodes of any
    point are among its bucket's (checked against a KD-tree ball query)."""
    rk = _needs_rkpm_kernel()
    rng = np.random.default_rng(3)
    nodes = rng.uniform(-1, 1, (300, 3))
    radius = rng.uniform(0.05, 0.6, 300)
    t = rk.bucket_table(nodes, radius)
    x = rng.uniform(-1.5, 1.5, (3000, 3))
    b = np.floor((x - t.origin) / t.size).astype(np.int64)
    inside = ((b >= 0) & (b < t.dims)).all(1)
    flat = (b[:, 0] * t.dims[1] + b[:, 1]) * t.dims[2] + b[:, 2]
    d = np.linalg.norm(x[:, None] - nodes[None], axis=2) / radius[None]  # [3000, 300]
    for p in range(len(x)):
        cover = np.flatnonzero(d[p] < 1)
        if not inside[p]:
            assert cover.size == 0
            continue
        lst = t.node[t.start[flat[p]]:t.start[flat[p] + 1]]
        assert np.all(np.diff(lst) > 0) and np.isin(cover, lst).all()
    with pytest.raises(ValueError):
        rk.bucket_table(nodes[:0], radius[:0])


def test_native_float32_output_is_the_float64_result_rounded(beam):
    _needs_rkpm_kernel()
    V, f = beam
    x = np.concatenate([_interior(V, 500), np.random.default_rng(2).uniform(-1.6, 1.6, (300, 3))])
    W64, G64 = f.evaluate(x, native=True)
    W32, G32 = f.evaluate(x, native=True, dtype=np.float32)
    assert W32.dtype == np.float32 and G32.dtype == np.float32
    assert np.array_equal(W32, W64.astype(np.float32)) and np.array_equal(G32, G64.astype(np.float32))
    Wt, Gt = f.weights_and_grads(torch.from_numpy(x))
    assert np.array_equal(Wt.numpy(), W32) and np.array_equal(Gt.numpy(), G32)


def test_native_build_does_not_depend_on_the_thread_count(beam):
    """The dense K / M sums run over a fixed number of point slices, so 1 and 2 threads give the same field."""
    _needs_rkpm_kernel()
    V, _ = beam
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = build_eigen_field(V, 8, seed=0, num_nodes=128)
        torch.set_num_threads(2)
        two = build_eigen_field(V, 8, seed=0, num_nodes=128)
    finally:
        torch.set_num_threads(old)
    assert np.array_equal(one.coeffs, two.coeffs) and np.array_equal(one.eigenvalues, two.eigenvalues)


def test_eigen_field_rejects_non_finite_arrays(beam):
    _, f = beam
    for key in ("nodes", "radius", "coeffs"):
        d = f.state()
        d[key] = d[key].clone()
        d[key].view(-1)[0] = float("inf")
        with pytest.raises(ValueError, match="finite"):
            EigenSkinningField.from_state(d)
