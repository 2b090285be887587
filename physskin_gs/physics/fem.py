"""P1 (linear tetrahedral) finite elements: the physical ground truth that skinning bases are judged against
(method.md 13).

Everything is float64 and scipy.sparse. Vector fields use node-major DOFs: DOF ``3 v + a`` is component a of
node v. Units are those of the caller; with metres, Pa and kg/m^3, stiffness is in N/m, masses in kg and
eigenvalues of K phi = lambda M phi in (rad/s)^2.

* :func:`stiffness_matrix` - linear elasticity, ``1/2 u^T K u = int mu eps:eps + lam/2 tr(eps)^2``.
* :func:`lumped_mass` / :func:`mass_matrix_diag` - rho vol/4 per tet node.
* :func:`scalar_laplacian` / :func:`lumped_volume` - the scalar P1 Dirichlet operator and its lumped mass.
* :func:`fem_modes` - lowest non-rigid free-free modes by shift-invert Lanczos.
* :func:`static_deflection` - (K + kappa M_pinned) u = f, the simulator's mass-proportional pin springs
  (:func:`spd_factor`: sparse LU with a symmetric ordering).
* :func:`laplacian_eigenbasis` - the classical skinning-weight baseline (equals skinning eigenmodes for a
  homogeneous material).
* :func:`elastic_mode_weights` - skinning weights from the displacement fields of the lowest linear-elastic
  vibration modes (modal analysis; the ``modes`` basis).
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, eigsh, splu

from physskin_gs.elastic import lame_parameters
from physskin_gs.geometry.tetmesh import TetMesh, tet_volumes

__all__ = [
    "lame",
    "shape_gradients",
    "stiffness_matrix",
    "lumped_mass",
    "mass_matrix_diag",
    "scalar_laplacian",
    "lumped_volume",
    "fem_modes",
    "pin_diagonal",
    "static_deflection",
    "spd_factor",
    "laplacian_eigenbasis",
    "elastic_mode_weights",
    "MODE_CLUSTER_RTOL",
]

_CHUNK = 40_000  # tets assembled at once (144 entries each): bounds the COO temporaries to ~140 MB


#: Lame parameters (mu, lam) from (E, nu): the project's :func:`physskin_gs.elastic.lame_parameters` (kept under
#: this name for the FEM API). Raises ValueError unless E > 0 and -1 < nu < 0.5.
lame = lame_parameters


def shape_gradients(tm: TetMesh) -> Tuple[np.ndarray, np.ndarray]:
    """Gradients of the four P1 hat functions of every tet, (t, 4, 3), and the tet volumes (t,) (> 0 required).

    With edge rows D = [x1-x0; x2-x0; x3-x0], x - x0 = D^T xi, so grad xi_k is column k of D^-1 and
    grad N0 = -(grad N1 + grad N2 + grad N3). Raises ValueError for a tet with non-positive volume."""
    x = tm.nodes[tm.tets]  # [t, 4, 3]
    D = x[:, 1:] - x[:, :1]  # [t, 3, 3] edge rows
    vol = np.linalg.det(D) / 6.0  # [t]
    if vol.size and not vol.min() > 0:
        raise ValueError(f"tet mesh has {int((vol <= 0).sum())} tets with non-positive volume")
    g123 = np.linalg.inv(D).transpose(0, 2, 1)  # [t, 3, 3] rows: grad xi_1..3
    g = np.concatenate([-g123.sum(1, keepdims=True), g123], axis=1)  # [t, 4, 3]
    return g, vol


def _assemble(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, n: int) -> sp.csr_matrix:
    return sp.coo_matrix((vals.ravel(), (rows.ravel(), cols.ravel())), shape=(n, n)).tocsr()


def stiffness_matrix(tm: TetMesh, E: float, nu: float, tet_scale: Optional[np.ndarray] = None) -> sp.csr_matrix:
    """(3n, 3n) csr P1 linear-elastic stiffness (isotropic; homogeneous, or with ``tet_scale`` (T,) each tet's
    Young's modulus as a multiple of E), node-major DOFs.

    Element block for nodes i, j and axes a, b: V (mu (delta_ab g_i.g_j + g_ib g_ja) + lam g_ia g_jb), the
    Hessian of V (mu eps:eps + lam/2 tr(eps)^2). Symmetrised exactly; rigid motions are in its null space.
    Vectorised over tets (in chunks of 40k). Raises ValueError for bad E / nu or inverted tets."""
    mu, lam = lame_parameters(E, nu)
    g, vol = shape_gradients(tm)
    n3 = 3 * tm.num_nodes
    eye = np.eye(3)
    K = sp.csr_matrix((n3, n3))
    for s in range(0, tm.num_tets, _CHUNK):
        gs, vs, ts = g[s : s + _CHUNK], vol[s : s + _CHUNK], tm.tets[s : s + _CHUNK]
        gg = np.einsum("tid,tjd->tij", gs, gs)  # [t, 4, 4]
        ke = mu * gg[:, :, None, :, None] * eye[None, None, :, None, :]  # [t, i, a, j, b]
        ke = ke + mu * np.einsum("tib,tja->tiajb", gs, gs) + lam * np.einsum("tia,tjb->tiajb", gs, gs)
        ke *= (vs if tet_scale is None else vs * tet_scale[s : s + _CHUNK])[:, None, None, None, None]
        dof = (3 * ts[:, :, None] + np.arange(3)[None, None, :]).reshape(-1, 12)  # [t, 12]
        rows = np.broadcast_to(dof[:, :, None], (dof.shape[0], 12, 12))
        cols = np.broadcast_to(dof[:, None, :], (dof.shape[0], 12, 12))
        K = K + _assemble(rows, cols, ke.reshape(-1, 12, 12), n3)
    return ((K + K.T) * 0.5).tocsr()


def lumped_volume(tm: TetMesh) -> np.ndarray:
    """(n,) lumped nodal volumes (units of the nodes cubed, m^3 for metres): a quarter of every incident tet's
    |volume| (sums to the mesh volume). Raises nothing (nodes in no tet get 0)."""
    vol = np.abs(tet_volumes(tm.nodes, tm.tets))
    return np.bincount(tm.tets.reshape(-1), weights=np.repeat(vol / 4.0, 4), minlength=tm.num_nodes)


def lumped_mass(tm: TetMesh, density: float) -> np.ndarray:
    """(n,) lumped node masses (kg for m and kg/m^3), density * vol / 4 per incident tet (sums to
    density * volume). Raises ValueError if density <= 0."""
    if not density > 0:
        raise ValueError(f"density must be > 0, got {density}")
    return float(density) * lumped_volume(tm)


def mass_matrix_diag(tm: TetMesh, density: float) -> np.ndarray:
    """(3n,) diagonal of the lumped mass matrix (kg) in node-major DOF order (each node mass of
    :func:`lumped_mass` repeated 3 times). Raises ValueError if density <= 0."""
    return np.repeat(lumped_mass(tm, density), 3)


def scalar_laplacian(tm: TetMesh) -> sp.csr_matrix:
    """(n, n) csr P1 stiffness of the scalar Laplacian, L_ij = sum_tets V g_i . g_j (symmetric PSD,
    constants in its null space; units of length, V / length^2). Raises ValueError for inverted tets
    (:func:`shape_gradients`)."""
    g, vol = shape_gradients(tm)
    n = tm.num_nodes
    L = sp.csr_matrix((n, n))
    for s in range(0, tm.num_tets, _CHUNK):
        gs, ts = g[s : s + _CHUNK], tm.tets[s : s + _CHUNK]
        le = np.einsum("tid,tjd->tij", gs, gs) * vol[s : s + _CHUNK, None, None]  # [t, 4, 4]
        rows = np.broadcast_to(ts[:, :, None], le.shape)
        cols = np.broadcast_to(ts[:, None, :], le.shape)
        L = L + _assemble(rows, cols, le, n)
    return ((L + L.T) * 0.5).tocsr()


def spd_factor(A: sp.spmatrix):
    """SuperLU factorisation of a sparse symmetric positive definite matrix, with a symmetric (minimum degree on
    A + A^T) ordering and diagonal pivots (stable for SPD; about 1.5x faster and 20 % less fill than scipy's
    default COLAMD on tet stiffness matrices). A: (m, m). Returns the ``SuperLU`` object (``.solve(b)`` for b
    (m,) or (m, k), in the units of b / A). Raises RuntimeError when A is exactly singular (SuperLU)."""
    return splu(sp.csc_matrix(A), permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
                options={"SymmetricMode": True})


def _shift(A: sp.spmatrix, mdiag: np.ndarray, rel: float = 1e-6) -> float:
    """A small negative shift, -rel * (typical diagonal ratio A_ii / M_ii): (A - sigma M) is then SPD and the
    near-zero (rigid / constant) eigenpairs come first in shift-invert order whatever the spectrum's scale."""
    d = A.diagonal()
    return -rel * float(np.median(d / mdiag))


def _gen_eig_lowest(A: sp.spmatrix, mdiag: np.ndarray, count: int,
                    sigma: Optional[float]) -> Tuple[np.ndarray, np.ndarray]:
    n = A.shape[0]
    if count >= n:
        raise ValueError(f"asked for {count} eigenpairs of a {n} x {n} problem")
    sig = _shift(A, mdiag) if sigma is None else float(sigma)
    v0 = np.random.default_rng(0).standard_normal(n)
    Mmat = sp.diags(mdiag).tocsc()
    lu = spd_factor(A - sig * sp.diags(mdiag))
    op = LinearOperator((n, n), matvec=lu.solve, dtype=np.float64)
    vals, vecs = eigsh(A.tocsc(), k=count, M=Mmat, sigma=sig, which="LM", v0=v0, OPinv=op)
    order = np.argsort(vals)
    vals, vecs = vals[order], vecs[:, order]
    vecs = vecs / np.sqrt((mdiag[:, None] * vecs * vecs).sum(0))[None]  # exactly M-normalised
    return vals, vecs


def fem_modes(K: sp.spmatrix, Mdiag: np.ndarray, k: int = 10, rigid: int = 6,
              sigma: Optional[float] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Lowest ``k`` non-rigid eigenpairs of K phi = lambda M phi (free-free, M = diag(Mdiag)).

    Shift-invert Lanczos (scipy ``eigsh``) at a slightly negative ``sigma`` (default -1e-6 x the median of
    K_ii / M_ii): K - sigma M is SPD, and rigid modes (eigenvalue ~ 0) come first; the lowest ``rigid`` pairs
    are dropped. Eigenvectors are M-normalised (phi^T M phi = 1).

    Returns:
        (eigvals (k,) ascending, in (rad/s)^2 for SI inputs; modes (3n, k)).
    Raises ValueError if k + rigid >= 3n."""
    Mdiag = np.asarray(Mdiag, np.float64)
    vals, vecs = _gen_eig_lowest(K, Mdiag, int(k) + int(rigid), sigma)
    return vals[rigid:], vecs[:, rigid:]


def pin_diagonal(Mdiag: np.ndarray, pinned_nodes: Sequence[int], kappa: float) -> np.ndarray:
    """(3n,) diagonal of the pin springs kappa * M on the three DOFs of every pinned node (kappa in 1/s^2; the
    simulator's pin model, a spring of stiffness kappa m_v pulling node v to its rest position), in N/m for
    Mdiag (3n,) in kg. pinned_nodes: node indices; raises IndexError for an index outside 0..n-1."""
    p = np.zeros_like(np.asarray(Mdiag, np.float64))
    idx = np.asarray(pinned_nodes, np.int64).reshape(-1)
    dof = (3 * idx[:, None] + np.arange(3)[None]).reshape(-1)
    p[dof] = float(kappa) * Mdiag[dof]
    return p


def static_deflection(K: sp.spmatrix, Mdiag: np.ndarray, pinned_nodes: Sequence[int], load: np.ndarray,
                      kappa: float) -> np.ndarray:
    """(3n,) static displacement solving (K + P) u = f with P = kappa M on the pinned nodes' DOFs
    (:func:`pin_diagonal`); sparse LU (SuperLU).

    Args:
        K: (3n, 3n) stiffness. Mdiag: (3n,) lumped mass diagonal. pinned_nodes: node indices (>= 3 nodes not on
        a line are needed for a non-singular system). load: (3n,) nodal forces (N). kappa: pin stiffness per
        unit mass (1/s^2), > 0.
    Raises ValueError for no pinned node or kappa <= 0."""
    if len(np.atleast_1d(pinned_nodes)) == 0:
        raise ValueError("static_deflection needs at least one pinned node (free-free K is singular)")
    if not kappa > 0:
        raise ValueError(f"kappa must be > 0, got {kappa}")
    A = K + sp.diags(pin_diagonal(Mdiag, pinned_nodes, kappa))
    return spd_factor(A).solve(np.asarray(load, np.float64))


def laplacian_eigenbasis(tm: TetMesh, m: int = 16) -> np.ndarray:
    """(n, m + 1) skinning weights: the first ``m`` non-constant eigenvectors of L w = lambda V w
    (:func:`scalar_laplacian`, :func:`lumped_volume`; Laplacian / skinning-eigenmode baseline, method.md 13),
    each scaled to unit volume-weighted RMS (sum_v V_v w_v^2 = total volume), then a column of ones last.
    Raises ValueError if m + 1 >= n."""
    L = scalar_laplacian(tm)
    vol = lumped_volume(tm)
    _, vecs = _gen_eig_lowest(L, vol, int(m) + 1, None)  # V-normalised; the first is the constant
    W = vecs[:, 1:] * np.sqrt(vol.sum())
    return np.concatenate([W, np.ones((tm.num_nodes, 1))], axis=1)


#: Modes whose eigenvalues lie within this fraction of each other are one cluster in :func:`elastic_mode_weights`
#: (a square beam's two bendings, any symmetric shape's pairs): their fields are taken together, never split.
MODE_CLUSTER_RTOL = 0.03


def _add_mode_fields(lam: np.ndarray, phi: np.ndarray, sq: np.ndarray, Q: np.ndarray, total: int) -> np.ndarray:
    """Q (n, q) with the scalar fields of modes (lam (k,), phi (3n, k)) appended, cluster by cluster, until it has
    ``total`` columns (:func:`elastic_mode_weights`); columns are sqrt(V)-scaled, so orthonormal."""
    n = sq.shape[0]
    count = lam.shape[0]
    j = 0
    while j < count and Q.shape[1] < total:
        e = j + 1  # the cluster [j, e): eigenvalues within MODE_CLUSTER_RTOL of the first
        while e < count and lam[e] <= lam[j] * (1.0 + MODE_CLUSTER_RTOL):
            e += 1
        S = sq[:, None] * phi[:, j:e].reshape(n, 3 * (e - j))  # [n, 3c] node-major: columns are (mode, axis)
        S = S - Q @ (Q.T @ S)
        S = S - Q @ (Q.T @ S)  # twice: Gram-Schmidt against the kept fields to round-off
        U, s, _ = np.linalg.svd(S, full_matrices=False)
        live = int((s > 1e-6 * max(float(s[0]) if s.size else 0.0, 1e-300)).sum())
        take = min(live, total - Q.shape[1])
        while 0 < take < live and s[take] >= s[take - 1] * (1.0 - MODE_CLUSTER_RTOL):
            take -= 1  # the cut would split fields of equal strength (a symmetry's pair): stop before them
        if take == 0 and Q.shape[1] == 1:
            take = min(live, total - 1)  # nothing kept yet: better a pair cut than no field
        if take:
            Q = np.concatenate([Q, U[:, :take]], 1)
        if take < live:
            break
        j = e
    return Q


def elastic_mode_weights(tm: TetMesh, m: int = 16, nu: float = 0.45, extra_modes: int = 4,
                         tet_stiffness: Optional[np.ndarray] = None,
                         node_density: Optional[np.ndarray] = None) -> np.ndarray:
    """(n, H) skinning weights, H <= m + 1: the displacement fields of the object's lowest linear-elastic vibration
    modes, as scalar fields, then a column of ones last (modal analysis, Pentland & Williams 1989; the ``modes``
    basis, issue 23).

    Why: a handle i moves the points by W_i(x) (A_i x + b_i), so a translation-only handle already carries the
    displacement W_i(x) b_i; when the three components of a mode's displacement phi(x) lie in span(W), that mode is
    exactly in the LBS subspace (and its frequency exact in Rayleigh-Ritz on this mesh); the affine part of every
    handle adds more. The Laplacian's eigenvectors (:func:`laplacian_eigenbasis`) are smooth regions, blind to how a
    shape bends and twists.

    Construction: K (unit Young's modulus, Poisson ratio ``nu``; mode shapes do not depend on E or density) and the
    lumped mass give the lowest ceil(m / 3) + ``extra_modes`` non-rigid free-free modes (:func:`fem_modes`). In
    ascending frequency, each cluster of modes within :data:`MODE_CLUSTER_RTOL` (taken whole: a pair of equal
    bendings has no preferred axis) contributes its displacement components (n, 3 per mode), minus their
    volume-weighted projection onto the constant and the fields already kept; the residual's principal fields
    (volume-weighted SVD: independent of the frame's axes and of a cluster's internal mixing) are kept in order of
    strength while above 1e-6 of the strongest; where the next field would split fields of equal strength (within
    :data:`MODE_CLUSTER_RTOL`: a symmetry's pair), it stops before them.

    Limitation: free-free modes of a shape with free appendages are mostly those appendages swinging (a chair's
    legs: its 5 lowest modes), which say little about the shape held at its feet; there a static deflection with the
    feet pinned can be stiffer than with the Laplacian's regions (docs/skinning.md). Holding the base for a share of
    the fields fixed some such shapes and broke others (measured; not done).

    Every kept field has unit volume-weighted RMS over the mesh (sum_v V_v w_v^2 = total volume) and is
    V-orthogonal to the constant and the others; signs make each field's largest-magnitude node positive.

    Parts of several materials (``--region``): ``tet_stiffness`` (T,) each tet's Young's modulus and
    ``node_density`` (n,) each node's density, as multiples of the object's; the modes are those of that body, so a
    stiff part moves nearly rigidly in them while the soft parts bend. With one material's modes a wood base under a
    rubber body locked the whole body (the smooth fields strain the base too): a head dragged on a pinned cow moved
    3x less with its pinned base made wood, which should change nothing.

    Args: tm: the tet mesh (normalised frame). m: learned handles asked for (>= 1). nu: Poisson ratio of the mode
    shapes (-1 < nu < 0.5). extra_modes: modes computed beyond ceil(m / 3). tet_stiffness, node_density: see above
    (None: one material).
    Returns: W (n, k + 1) float64 with k <= m (fewer where a pair would be split, or the modes computed hold fewer
    independent fields).
    Raises ValueError for m < 1, a bad nu, inverted tets, or a mesh too small for the modes."""
    if int(m) < 1:
        raise ValueError(f"elastic_mode_weights needs m >= 1, got {m}")
    m = int(m)
    n = tm.num_nodes
    vol = lumped_volume(tm)
    sq = np.sqrt(vol)
    count = min(-(-m // 3) + int(extra_modes), 3 * n - 7)
    # unit density: masses = volumes. Lanczos to round-off: at 1e-8 the vectors of nearly equal modes (the scorpion's
    # 1.00 / 1.04) come out mixed differently and the basis lost a tenth (frequency ratio 1.415 -> 1.563) to save a
    # fifth of the solve
    mass = vol if node_density is None else vol * np.asarray(node_density, dtype=np.float64)
    ts = None if tet_stiffness is None else np.asarray(tet_stiffness, dtype=np.float64)
    lam, phi = fem_modes(stiffness_matrix(tm, 1.0, nu, tet_scale=ts), np.repeat(mass, 3), k=count)
    Q = (sq / np.sqrt(vol.sum()))[:, None]  # [n, 1]: the constant, sqrt(V)-scaled (unit norm)
    Q = _add_mode_fields(lam, phi, sq, Q, 1 + m)  # [n, 1 + k]
    if Q.shape[1] == 1:
        raise ValueError("elastic_mode_weights: the modes hold no field beyond the constant")
    W = Q[:, 1:] / sq[:, None] * np.sqrt(vol.sum())  # [n, k] unit V-weighted RMS
    big = np.abs(W).argmax(0)
    W = W * np.sign(W[big, np.arange(W.shape[1])])[None]
    return np.concatenate([W, np.ones((n, 1))], axis=1)
