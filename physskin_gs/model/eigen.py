"""Classical skinning-eigenmode basis on a point cloud, without a tet mesh (``--skinning eigen``).

The basis is the low end of the spectrum of a Dirichlet (homogeneous elastic-like) operator discretised with
meshless shape functions (method.md section 13, "Laplacian eigenbasis" and "FreeForm / RKPM"):

1. **Nodes.** About ``n = min(num_nodes, V)`` nodes ``x_n``, one per occupied cell of a cubic grid over the
   object's volume points (:func:`cell_nodes`: the cell's centroid, moved out to the cell's outermost point in
   boundary cells so the nodes reach the surface). The grid has cell faces on the bounding box's mid-planes,
   so a mirror-symmetric point set gives mirror-symmetric nodes, and hence a basis whose span is closed under
   the mirror: a symmetric object under a symmetric load then stays symmetric (kaolin's cantilever: sideways
   drift 0.00 mm, was 0.7-14 mm with farthest-point nodes). ``nodes="fps"`` keeps the farthest-point nodes
   of earlier versions (seeded start, not symmetric). On the five held-out FEM shapes both rules give the
   same physics to about 1 % (frequency ratio 1.383 vs 1.388, static tip ratio 0.696 vs 0.705).
2. **Kernels.** A C2 cubic B-spline ``w_n(x) = w(|x - x_n| / r_n)`` with compact support ``r_n`` per node,
   ``w(q) = 1 - 6 q^2 + 6 q^3`` on [0, 1/2], ``2 (1 - q)^3`` on [1/2, 1], 0 beyond (w(0) = 1).
   Radius rule: ``r_n = max(radius_factor * d_k(n), min_spacing_factor * s)`` with ``d_k(n)`` the distance from
   node n to its k-th nearest other node (k = ``radius_k``) and ``s`` the mean nearest-neighbour spacing of the
   volume points, then capped at ``radius_cap`` times the median radius. The defaults (k = 4, factor 1.8,
   3 s, cap 4) give about 22 nodes per volume point. The support thus follows the node spacing (the point
   cloud's own connectivity), not a fraction of the bounding box.
3. **First-order correction** (reproducing kernel particle method, Liu, Jun & Zhang 1995, "Reproducing kernel
   particle methods", IJNMF 20; equivalently moving least squares with a linear basis). With Shepard weights
   ``s_n = w_n / S0``, ``S0 = sum_n w_n``, offsets ``P_n = [1, (x_n - x) / h]`` (h = the median radius, a
   fixed length that only conditions the systems) and ``D = diag(0, 1, 1, 1)``:

       A(x) = sum_n s_n P_n P_n^T + eps D,   beta = A^{-1} e_1,   Phi^RK_n = s_n P_n^T beta.

   ``Phi^RK`` reproduces 1 exactly (D has a zero first row) and x up to the ridge ``eps = 1e-10`` (~1e-9).
   In centred form ``Phi^RK_n = s_n [1 + (x - xbar)^T Cov^{-1} (x_n - xbar)]`` (xbar, Cov: the s-weighted mean
   and covariance of the covering nodes), so by Cauchy-Schwarz ``sum_n |Phi^RK_n| <= 1 + sqrt(3 kappa)`` with
   ``kappa = (x - xbar)^T Cov^{-1} (x - xbar)``, the squared Mahalanobis distance of x from its nodes. MLS only
   blows up where kappa is large (extrapolation: the fringe of the supports outside the object, off a thin
   shell of nodes), so the field blends to the Shepard functions there:

       Phi_n = gamma Phi^RK_n + (1 - gamma) s_n,   gamma = 1 - smooth5((kappa - kappa_lo) / (kappa_hi - kappa_lo)),

   ``smooth5(t) = 6t^5 - 15t^4 + 10t^3`` on t clipped to [0, 1], ``kappa_lo = 9``, ``kappa_hi = 25``. Hence
   ``sum_n |Phi_n| <= 1 + sqrt(75) < 10`` everywhere (W is bounded by 10 max |C|), the partition of unity holds
   everywhere and affine reproduction is exact wherever kappa <= 9. Measured: kappa <= 4 on the volume points
   of a filled procedural shape and <= 8.1 on the 10k centres of a surface-only splat (gamma = 1 on all of
   them), gamma = 1 on 98-100 % of near-object queries. kappa comes from the same 4x4 solve
   (``a = A[0, 1:] = (xbar - x) / h``, ``Cov^{-1} = [A^{-1}]_{1:, 1:}``).
   Gradients are analytic, with the basis centre c = x held fixed in ``P_n`` (exact because the fitted
   polynomial does not depend on c): ``d_k beta = A^{-1} (e_{k+1} / h - d_k A beta)``,
   ``d_k s_n = (d_k w_n - s_n d_k S0) / S0``, ``d_k kappa = 2 Cov^{-1} a . (d_k a) - a^T Cov^{-1} d_k Cov Cov^{-1} a``
   with ``d_k a = (d_k xbar - e_k) / h`` and ``d_k Cov = d_k B - d_k xbar a^T / h - a d_k xbar^T / h`` (B the
   second-moment block), and ``d_k Phi_n = d_k s_n (1 + gamma (P_n.beta - 1)) + s_n (gamma P_n.d_k beta +
   d_k gamma (P_n.beta - 1))``.
4. **Energy.** Over the V volume points with quadrature volumes ``v_p`` summing to 1 (``quadrature``: local
   k-nearest-neighbour volumes by default, or equal volumes ``1 / V``; :func:`quadrature_weights`):
   stiffness ``K = (lambda + 4 mu) sum_p v_p grad Phi(p)^T grad Phi(p)`` (E = 1, Poisson ratio nu; a constant
   factor for a homogeneous material, so it does not change the eigenvectors) and mass
   ``M = sum_p v_p Phi(p)^T Phi(p)`` (both sparse). The lowest m + 1 eigenpairs of ``K c = lambda M c`` come
   from ARPACK shift-invert Lanczos (dense ``scipy.linalg.eigh`` for small n or as a fallback); the constant
   (``c = 1``, exactly in the null space because of the partition of unity) is M-projected out of that
   subspace and a Rayleigh-Ritz step gives m M-orthonormal fields orthogonal to the constant. **Clusters:**
   ``CLUSTER_EXTRA`` more eigenpairs are computed, and if the m-th and (m+1)-th eigenvalues lie within
   ``cluster_tol`` (1.5 %) of each other, the count moves down to the start of their cluster (at most
   ``CLUSTER_EXTRA`` modes; or up to its end if it is the first cluster; :func:`cluster_cutoff`):
   a symmetric object has equal eigenvalues (the y and z bending of a square beam, the three l = 1 modes of
   a ball), and keeping part of such a cluster keeps an arbitrary mixture of its modes, a preferred direction
   the object does not have. The field may therefore have another handle count than asked for
   (``num_handles`` tells). These are the
   skinning eigenmodes of Benchekroun et al. 2023 ("Fast complementary dynamics via skinning eigenmodes",
   ACM TOG 42(4)) for a homogeneous material, computed meshlessly as FreeForm (CVPR 2026) does with RKPM
   nodes.
5. **Units** (field.py, method.md section 5): each learned column is divided by its RMS over the build's
   volume points (``col_scale``; 1 up to rounding with uniform quadrature, where ``c^T M c`` is that mean
   square), so every learned column has RMS 1 there; the constant handle is appended last and is exactly 1.

Field evaluation: ``W_j(x) = sum_n Phi_n(x) C_nj`` with the analytic gradient, computed in float64 and
returned as float32. Two implementations of the same sums: a C kernel (:mod:`physskin_gs.model._rkpm_native`,
default when a C compiler is available: about 0.6-1.6 us per point on one core, and K and M of the build by dense
accumulation) and the numpy / scipy reference (:meth:`EigenSkinningField.shape_functions` with
``scipy.spatial.cKDTree`` neighbour lists, 5-15 us per point), which the tests hold the kernel to.

**Outside every support** (``S0(x) = 0``: farther than r_n from every node, i.e. well outside the object) the
field is defined as ``W(x) = C[n*]`` with ``n* = argmin_n |x - x_n| / r_n`` and zero gradient. This is
continuous at the edge of the covered region (there only n* covers x, so Phi_{n*} = 1). Values are always
finite.

**Thin shapes** (a plate, a rod: a principal width 2 sqrt(3) sigma of the volume points below ``FLAT_FRACTION``
= 1/2 of the median kernel radius, :func:`thin_axes`): the nodes cannot resolve the thickness (the grid's
mid-plane puts a node layer on each face of a plate, 2e-4 apart for a 1 x 1 x 1e-4 box against 0.13 radii), and
the linear correction across that spread gives ``dW/dz ~ 1 / thickness`` (measured RMS 56-90 against 4-7 along
the plate, the lowest eigenvalue 547 instead of the Neumann 11.1), so every handle's ``(A x + b) grad W^T`` term
shears the plate through its thickness and the LBS subspace cannot bend (frequency ratio 9.5 against the FEM at
300 nodes, 2.3 for RBF bumps). The build then works on the mid-surface: the points are projected onto the plane
(plate) or line (rod) through the middle of the thin extents, the nodes are chosen on that flat set (in its
principal frame, the grid one cell thick there: :func:`cell_nodes`), the field is that of the projected point
(``W(x) = W(P x)``, gradients projected, ``flat_axes`` / ``flat_center``), so it is exactly constant through the
thickness, and the quadrature volumes use the flattened dimension (:func:`quadrature_weights`, ``dim``).
Measured on that plate: frequency ratio 2.81 (300 nodes) / 10.99 (3000), RBF 2.30 / 10.64, and the exact
Neumann eigenfunctions of the square 2.39 / 10.6 (the P1 reference locks in bending: only the mesh's own
Laplacian basis follows it, 1.28 / 2.69); on a 1 x 1e-3 x 1e-3 rod 1.10 / 1.54 (was 1.14 / 2.48). Shapes that
are thin only locally (a curved shell, a fin, the ant's legs) are not flattened; no shared mesh is (the thinnest
principal width is 0.95 radii, pybullet_concave_box).

Limitations: connectivity is only that of the kernel supports, so two parts of a thin multi-part shape closer
than about one support radius (1.8x the 4th-nearest-node distance) are coupled as if glued, and a detached
fragment with fewer than k + 1 nodes gets a larger radius (up to the cap) that may reach its neighbours;
parts farther apart than the radii are decoupled and give near-zero-energy piecewise-constant modes. Parts
thinner than the node spacing get exact linear reproduction along them but only for points near the node
layer (off it, the blend falls back to Shepard, constant-reproducing, functions). Gradients grow like
1 / (1 - q) in the thin fringe where only the edges of two or three supports overlap. The basis is scalar
(one weight field per handle) and ignores material heterogeneity.
"""

from __future__ import annotations

import itertools
from typing import Dict, List, Optional, Tuple, Union

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import torch
from scipy.sparse.linalg import ArpackError, ArpackNoConvergence, LinearOperator, eigsh, splu
from scipy.spatial import cKDTree

from physskin_gs import interrupts
from physskin_gs.geometry.sampling import cell_centroids, farthest_point_sampling, grid_cells
from physskin_gs.model import _rkpm_native
from physskin_gs.model.field import SkinningField

ArrayLike = Union[np.ndarray, torch.Tensor]

#: Ridge on the linear block of the S0-normalised RKPM moment matrix, in units of h^2 (module docstring, step 3).
RIDGE = 1e-10
#: Blend band of the squared Mahalanobis distance kappa (module docstring, step 3).
KAPPA_LO = 9.0
KAPPA_HI = 25.0
#: Relative eigenvalue gap below which neighbouring eigenpairs form one cluster (module docstring, step 4):
#: sampling noise splits a mirror pair of a square beam by 0.3-0.9 % (16k random points), distinct modes of
#: that beam are 2.5 % or more apart.
CLUSTER_TOL = 0.015
#: Eigenpairs computed beyond the requested ones, to see whether the cut-off splits a cluster.
CLUSTER_EXTRA = 4
#: Query points are processed in chunks of this many (bounds memory; results do not depend on it).
CHUNK = 16384
#: A principal width 2 sqrt(3) sigma of the build points below this fraction of the median kernel radius is
#: flattened (module docstring, "Thin shapes"; :func:`thin_axes`): measured 0.003 for a 1 x 1 x 1e-4 plate, 0.23
#: for 1 x 1 x 0.01, 0.32 for a 1 x 1e-3 x 1e-3 rod; 0.59 for 1 x 1 x 0.03 and >= 0.95 on every shared mesh but the
#: zero-thickness alligator (>= 2.5 on the held-out ones) are not.
FLAT_FRACTION = 0.5

_STATE_KEYS = ("nodes", "radius", "coeffs", "col_scale", "eigenvalues", "length_scale", "ridge", "kappa_band")
_IU, _JU = np.triu_indices(4)
_IU3, _JU3 = np.triu_indices(3)
_D = np.diag([0.0, 1.0, 1.0, 1.0])


def cubic_spline(q: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """C2 cubic B-spline kernel of support 1 and its derivative divided by q.

    Args:
        q: (...) float64, normalised distances |x - x_n| / r_n (>= 0).

    Returns:
        (w, g): w(q) with w(0) = 1 and w = 0 for q >= 1, and g = w'(q) / q (finite at q = 0: -12), both (...).
    """
    q = np.asarray(q, dtype=np.float64)
    inner = q <= 0.5
    u = np.clip(1.0 - q, 0.0, None)
    w = np.where(inner, 1.0 - 6.0 * q * q + 6.0 * q * q * q, 2.0 * u * u * u)
    qs = np.where(q > 0, q, 1.0)
    g = np.where(inner, -12.0 + 18.0 * q, -6.0 * u * u / qs)
    return w, g


def _smooth5(t: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Quintic smoothstep 6t^5 - 15t^4 + 10t^3 on t clipped to [0, 1], and its derivative in t."""
    t = np.clip(t, 0.0, 1.0)
    return t * t * t * (t * (6.0 * t - 15.0) + 10.0), 30.0 * t * t * (t - 1.0) ** 2


def _moments(m: np.ndarray, xq: np.ndarray) -> np.ndarray:
    """Moment matrices sum_n c_n P_n P_n^T, P_n = [1, xn_n - xq], from node-feature sums.

    Args:
        m: (N, 10) sums of c_n [1, xn_n (3), upper triangle of xn_n xn_n^T (6)].
        xq: (N, 3) the query points in the same (shifted, scaled) coordinates.

    Returns:
        (N, 4, 4) symmetric matrices.
    """
    N = m.shape[0]
    m0, m1 = m[:, 0], m[:, 1:4]  # [N], [N, 3]
    m2 = np.empty((N, 3, 3))
    m2[:, _IU3, _JU3] = m[:, 4:]
    m2[:, _JU3, _IU3] = m[:, 4:]
    s1 = m1 - m0[:, None] * xq  # [N, 3] sum c (xn - xq)
    xm = xq[:, :, None] * m1[:, None, :]  # [N, 3, 3] xq m1^T
    out = np.empty((N, 4, 4))
    out[:, 0, 0] = m0
    out[:, 0, 1:] = s1
    out[:, 1:, 0] = s1
    out[:, 1:, 1:] = m2 - xm - xm.transpose(0, 2, 1) + m0[:, None, None] * xq[:, :, None] * xq[:, None, :]
    return out


def _flatten_points(x: np.ndarray, axes: np.ndarray, center: np.ndarray) -> np.ndarray:
    """(N, 3) float64: x (N, 3) projected along the orthonormal rows ``axes`` (k, 3) onto the plane / line
    through ``center`` (3,); coordinate axes are set to the centre's coordinates exactly. k = 0: x itself."""
    x = np.asarray(x, dtype=np.float64)
    if axes.shape[0] == 0:
        return x
    if np.all(np.isin(axes, (0.0, 1.0))):  # coordinate axes: the coordinates, exactly
        dims = np.flatnonzero(axes.sum(0))
        out = x.copy()
        out[:, dims] = center[dims]
        return out
    return x - ((x - center) @ axes.T) @ axes


class EigenSkinningField(SkinningField):
    """Skinning-eigenmode field on RKPM nodes (see the module docstring for the method and its sources).

    Attributes:
        kind: ``"eigen"``.
        num_handles: H = m + 1 (m eigenmode columns, then the constant handle).
        nodes: (n, 3) float64 node positions, normalised frame.
        radius: (n,) float64 kernel support radii.
        coeffs: (n, m) float64 nodal coefficients C, already divided by ``col_scale``.
        col_scale: (m,) float64 RMS of the raw eigenmode columns over the build's volume points.
        eigenvalues: (m,) float64 generalised eigenvalues of the learned columns (K c = lambda M c with
            E = 1, normalised-frame lengths), ascending.
        length_scale: float, the h of the linear basis [1, (x_n - x) / h].
        ridge: float, the ridge eps of the normalised moment matrices.
        kappa_band: (kappa_lo, kappa_hi) of the RKPM-to-Shepard blend.
        flat_axes: (k, 3) float64 orthonormal rows, k = 0 (a solid), 1 (a plate: its normal) or 2 (a rod: its
            cross-section): the field is evaluated at x projected along them onto the nodes' plane or line
            through ``flat_center`` (3,) float64, and its gradient has no component along them (module docstring,
            "Thin shapes").
    """

    kind = "eigen"

    def __init__(self, nodes: np.ndarray, radius: np.ndarray, coeffs: np.ndarray, col_scale: np.ndarray,
                 eigenvalues: np.ndarray, length_scale: float, ridge: float = RIDGE,
                 kappa_band: Tuple[float, float] = (KAPPA_LO, KAPPA_HI), flat_axes: Optional[np.ndarray] = None,
                 flat_center: Optional[np.ndarray] = None) -> None:
        self.nodes = np.ascontiguousarray(nodes, dtype=np.float64)  # [n, 3]
        self.radius = np.ascontiguousarray(radius, dtype=np.float64)  # [n]
        self.coeffs = np.ascontiguousarray(coeffs, dtype=np.float64)  # [n, m]
        self.col_scale = np.ascontiguousarray(col_scale, dtype=np.float64)  # [m]
        self.eigenvalues = np.ascontiguousarray(eigenvalues, dtype=np.float64)  # [m]
        self.length_scale = float(length_scale)
        self.ridge = float(ridge)
        self.kappa_band = (float(kappa_band[0]), float(kappa_band[1]))
        n = self.nodes.shape[0]
        if self.nodes.ndim != 2 or self.nodes.shape[1] != 3 or self.radius.shape != (n,) or \
                self.coeffs.ndim != 2 or self.coeffs.shape[0] != n or n == 0:
            raise ValueError(f"inconsistent eigen field arrays: nodes {self.nodes.shape}, radius "
                             f"{self.radius.shape}, coeffs {self.coeffs.shape}")
        if not (np.all(self.radius > 0) and self.length_scale > 0 and self.kappa_band[1] > self.kappa_band[0] >= 0):
            raise ValueError("eigen field radii, length scale and blend band must be positive")
        if not (np.isfinite(self.nodes).all() and np.isfinite(self.radius).all() and np.isfinite(self.coeffs).all()
                and np.isfinite(self.length_scale)):
            raise ValueError("eigen field nodes, radii, coefficients and length scale must be finite")
        fa = np.zeros((0, 3)) if flat_axes is None else np.asarray(flat_axes, np.float64).reshape(-1, 3)
        fc = self.nodes.mean(0) if flat_center is None else np.asarray(flat_center, np.float64).reshape(3)
        if fa.shape[0] > 2 or not (np.isfinite(fa).all() and np.isfinite(fc).all()) or \
                not np.allclose(fa @ fa.T, np.eye(fa.shape[0]), atol=1e-9):
            raise ValueError(f"flat_axes must be 0-2 orthonormal rows of 3 and flat_center finite, got {fa.tolist()}")
        self.flat_axes = np.ascontiguousarray(fa)  # [k, 3]
        self.flat_center = np.ascontiguousarray(fc)  # [3]
        self.num_handles = int(self.coeffs.shape[1]) + 1
        self._c0 = self.nodes.mean(0)  # [3] fixed centre, so values do not depend on how queries are batched
        self._xn = (self.nodes - self._c0) / self.length_scale  # [n, 3]
        self._feat = np.concatenate([np.ones((n, 1)), self._xn, self._xn[:, _IU3] * self._xn[:, _JU3]], 1)  # [n, 10]

    # ------------------------------------------------------------------ thin shapes
    def flatten(self, x: np.ndarray) -> np.ndarray:
        """(N, 3) float64: x (N, 3) projected along ``flat_axes`` onto the nodes' plane / line (x itself, as a
        float64 array, for a solid)."""
        return _flatten_points(x, self.flat_axes, self.flat_center)

    def _flatten_grad(self, G: np.ndarray) -> np.ndarray:
        """Gradients (..., 3) with their components along ``flat_axes`` removed (the chain rule of
        :meth:`flatten`)."""
        if self.flat_axes.shape[0] == 0:
            return G
        return G - (G @ self.flat_axes.T) @ self.flat_axes

    # ------------------------------------------------------------------ shape functions
    def shape_functions(self, x: np.ndarray) -> Tuple[sp.csc_matrix, List[sp.csc_matrix], np.ndarray, np.ndarray]:
        """Blended RKPM shape functions and their gradients at query points, as sparse matrices.

        Args:
            x: (N, 3) float, normalised coordinates (finite).

        Returns:
            (Phi, dPhi, covered, gamma): Phi (N, n) scipy CSC float64; dPhi a list of 3 CSC (N, n),
            d Phi / d x_k with the same sparsity; covered (N,) bool, False where no kernel support contains the
            point (those rows are empty); gamma (N,) float64 in [0, 1], the RKPM share of the blend (1: affine
            reproduction is exact; 0 there and wherever not covered: Shepard). A flattened field (``flat_axes``)
            gives the shape functions of the projected points and gradients without the flattened components.
        """
        if self.flat_axes.shape[0]:
            Phi, dPhi, covered, gamma = self.shape_functions_flat(self.flatten(x))
            a = self.flat_axes
            along = [sum(float(a[i, j]) * dPhi[j] for j in range(3)) for i in range(a.shape[0])]
            dPhi = [(dPhi[k] - sum(float(a[i, k]) * along[i] for i in range(a.shape[0]))).tocsc() for k in range(3)]
            return Phi, dPhi, covered, gamma
        return self.shape_functions_flat(x)

    def shape_functions_flat(self, x: np.ndarray) -> Tuple[sp.csc_matrix, List[sp.csc_matrix], np.ndarray,
                                                            np.ndarray]:
        """:meth:`shape_functions` at x (N, 3) as given (no projection along ``flat_axes``): the raw RKPM sums."""
        x = np.ascontiguousarray(x, dtype=np.float64)
        N, n = x.shape[0], self.nodes.shape[0]
        if N == 0:
            empty = sp.csc_matrix((0, n))
            return empty, [empty.copy() for _ in range(3)], np.zeros(0, dtype=bool), np.zeros(0)
        # Pairs grouped by node (CSC order). Every per-point sum runs over ascending nodes, so the values do
        # not depend on chunking or on the tree layout.
        lists = cKDTree(x).query_ball_point(self.nodes, self.radius, return_sorted=False)
        lens = np.fromiter(map(len, lists), dtype=np.int64, count=n)
        cols = np.repeat(np.arange(n, dtype=np.int64), lens)  # [P]
        rows = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(lens.sum()))  # [P]
        d = self.nodes[cols] - x[rows]  # [P, 3], x_n - x
        r = self.radius[cols]  # [P]
        q = np.sqrt(np.einsum("pj,pj->p", d, d)) / r
        keep = q < 1.0
        if not keep.all():
            rows, cols, d, r, q = rows[keep], cols[keep], d[keep], r[keep], q[keep]
        P = rows.shape[0]
        w, g = cubic_spline(q)  # [P]
        dw = (-g / (r * r))[:, None] * d  # [P, 3] d w_n / d x
        S0 = np.bincount(rows, weights=w, minlength=N)  # [N]
        dS0 = np.stack([np.bincount(rows, weights=dw[:, k], minlength=N) for k in range(3)], 1)  # [N, 3]
        covered = S0 > 0
        S0 = np.where(covered, S0, 1.0)
        inv = (1.0 / S0)[rows]  # [P]
        sw = w * inv  # [P] Shepard weights
        dsw = (dw - sw[:, None] * dS0[rows]) * inv[:, None]  # [P, 3]
        indptr = np.concatenate([[0], np.cumsum(np.bincount(cols, minlength=n))])
        Sm = sp.csc_matrix((sw, rows, indptr), shape=(N, n))
        Dm = [sp.csc_matrix((dsw[:, k].copy(), rows, indptr), shape=(N, n)) for k in range(3)]

        # moments of P_n = [1, (x_n - x) / h] from node features (coordinates about the node centroid, in h)
        xn, feat = self._xn, self._feat
        xq = (x - self._c0) / self.length_scale  # [N, 3]
        A = _moments(np.asarray(Sm @ feat), xq) + self.ridge * _D  # [N, 4, 4]
        A[~covered] = np.eye(4)
        Ainv = np.linalg.inv(A)  # [N, 4, 4]
        beta = Ainv[:, :, 0]  # [N, 4]
        # kappa = a^T Cov^{-1} a: squared Mahalanobis distance of x from the weighted node cloud, with
        # a = (xbar - x) / h = A[0, 1:] and Cov^{-1} = [A^{-1}]_{1:, 1:} (Schur complement; sum_n s_n = 1)
        av = A[:, 0, 1:]  # [N, 3]
        Cia = np.einsum("nij,nj->ni", Ainv[:, 1:, 1:], av)  # [N, 3]
        kappa = (av * Cia).sum(1)  # [N]
        lo, hi = self.kappa_band
        t, dt = _smooth5((kappa - lo) / (hi - lo))  # [N]
        gamma = 1.0 - t
        dbeta = np.empty((N, 3, 4))  # [N, 3, 4]
        dkappa = np.empty((N, 3))  # [N, 3]
        for k in range(3):
            dA = _moments(np.asarray(Dm[k] @ feat), xq)  # [N, 4, 4] d_k A (P_n and the ridge held fixed)
            rhs = -np.einsum("nij,nj->ni", dA, beta)
            rhs[:, k + 1] += 1.0 / self.length_scale
            dbeta[:, k] = np.einsum("nij,nj->ni", Ainv, rhs)
            da = dA[:, 0, 1:]  # [N, 3] d xbar / h
            dcov = dA[:, 1:, 1:] - da[:, :, None] * av[:, None, :] - av[:, :, None] * da[:, None, :]
            dda = da.copy()
            dda[:, k] -= 1.0 / self.length_scale  # total derivative of a (x moves too)
            dkappa[:, k] = 2.0 * (Cia * dda).sum(1) - np.einsum("ni,nij,nj->n", Cia, dcov, Cia)
        dgamma = (-dt / (hi - lo))[:, None] * dkappa  # [N, 3]
        # Phi_n = s_n (a + bv . xn_n) with P_n . beta - 1 = beta_0 - 1 + beta_l . (xn_n - xq); table T holds
        # [a, bv] (row 0) and their x_k-derivatives [da_k, dbv_k] (rows 1..3) per point
        base = beta[:, 0] - 1.0 - np.einsum("nj,nj->n", beta[:, 1:], xq)  # [N]
        T = np.empty((N, 4, 4))  # [N, 4, 4]
        T[:, 0, 0] = 1.0 + gamma * base
        T[:, 0, 1:] = gamma[:, None] * beta[:, 1:]
        T[:, 1:, 0] = dgamma * base[:, None] + gamma[:, None] * (
            dbeta[:, :, 0] - np.einsum("nkj,nj->nk", dbeta[:, :, 1:], xq))
        T[:, 1:, 1:] = dgamma[:, :, None] * beta[:, None, 1:] + gamma[:, None, None] * dbeta[:, :, 1:]
        xc = np.empty((P, 4))  # [P, 4] = [1, xn_n]
        xc[:, 0] = 1.0
        xc[:, 1:] = xn[cols]
        e = np.einsum("pij,pj->pi", T[rows], xc)  # [P, 4]: fac, then d_k of the bracket
        phi = sw * e[:, 0]
        dphi = [dsw[:, k] * e[:, 0] + sw * e[:, k + 1] for k in range(3)]
        Phi = sp.csc_matrix((phi, rows, indptr), shape=(N, n))
        dPhi = [sp.csc_matrix((v, rows, indptr), shape=(N, n)) for v in dphi]
        return Phi, dPhi, covered, np.where(covered, gamma, 0.0)

    # ------------------------------------------------------------------ field
    def nearest_scaled(self, x: np.ndarray) -> np.ndarray:
        """(N,) int64 index of the node minimising |x - x_n| / r_n (exact; chunked brute force with one GEMM)."""
        x = np.ascontiguousarray(x, dtype=np.float64)
        inv_r2 = 1.0 / (self.radius * self.radius)  # [n]
        yn = self.nodes * inv_r2[:, None]  # [n, 3]
        cn = (self.nodes * yn).sum(1)  # [n]
        best = np.empty(x.shape[0], dtype=np.int64)
        for s in range(0, x.shape[0], 4096):
            xu = x[s:s + 4096]  # [c, 3]
            score = np.outer((xu * xu).sum(1), inv_r2) - 2.0 * (xu @ yn.T) + cn  # [c, n] |x - x_n|^2 / r_n^2
            best[s:s + 4096] = score.argmin(1)
        return best

    def evaluate(self, x: np.ndarray, native: Optional[bool] = None,
                 dtype=np.float64) -> Tuple[np.ndarray, np.ndarray]:
        """Float64 field: x (N, 3) -> (W (N, H), dW/dX (N, H, 3)), constant handle last (see the module doc).

        ``native``: None (default) uses the C kernel of :mod:`physskin_gs.model._rkpm_native` when it is available
        (about 9x faster; equal to rounding, held by the tests), False the numpy / scipy reference
        (:meth:`shape_functions`), True requires the kernel. ``dtype``: of the returned arrays (np.float64 or
        np.float32; the sums are float64 either way).

        Raises:
            ValueError: x is not (N, 3) or has non-finite entries.
            RuntimeError: ``native=True`` and the kernel is unavailable.
        """
        x = np.ascontiguousarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != 3:
            raise ValueError(f"query points must be (N, 3), got {tuple(x.shape)}")
        if not np.isfinite(x).all():
            raise ValueError("query points must be finite")
        N, m = x.shape[0], self.coeffs.shape[1]
        if self.flat_axes.shape[0]:
            x = np.ascontiguousarray(self.flatten(x))
        if native is not False:
            res = _rkpm_native.evaluate(self, x, dtype)
            if res is None and native:
                raise RuntimeError("the native RKPM kernel is unavailable (no C compiler, or PHYSSKIN_NATIVE=0)")
            if res is not None:
                W, G, covered, _ = res
                if not covered.all():
                    out = np.flatnonzero(~covered)
                    W[out, :m] = self.coeffs[self.nearest_scaled(x[out])]
                if self.flat_axes.shape[0]:
                    G = self._flatten_grad(G).astype(G.dtype, copy=False)
                return W, G
        W = np.zeros((N, m + 1))
        G = np.zeros((N, m + 1, 3))
        W[:, m] = 1.0
        for s in range(0, N, CHUNK):
            xs = x[s:s + CHUNK]
            Phi, dPhi, covered, _ = self.shape_functions(xs)  # x is flattened already: a no-op projection
            W[s:s + CHUNK, :m] = Phi @ self.coeffs
            for k in range(3):
                G[s:s + CHUNK, :m, k] = dPhi[k] @ self.coeffs
            if not covered.all():
                out = np.flatnonzero(~covered)
                W[s + out, :m] = self.coeffs[self.nearest_scaled(xs[out])]
        return W.astype(dtype, copy=False), G.astype(dtype, copy=False)

    def weights_and_grads(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """x: (N, 3) normalised coordinates -> (W (N, H), dW/dX (N, H, 3)) float32 on x's device.

        Raises:
            ValueError: x is not (N, 3) or has non-finite entries.
        """
        xt = torch.as_tensor(x)
        W, G = self.evaluate(xt.detach().cpu().double().numpy(), dtype=np.float32)
        return (torch.from_numpy(W.astype(np.float32, copy=False)).to(xt.device),
                torch.from_numpy(G.astype(np.float32, copy=False)).to(xt.device))

    # ------------------------------------------------------------------ save / load
    def state(self) -> Dict[str, torch.Tensor]:
        """Every array needed to evaluate the field, as float64 CPU tensors (the round trip is bit-identical)."""
        return {
            "nodes": torch.from_numpy(self.nodes.copy()),
            "radius": torch.from_numpy(self.radius.copy()),
            "coeffs": torch.from_numpy(self.coeffs.copy()),
            "col_scale": torch.from_numpy(self.col_scale.copy()),
            "eigenvalues": torch.from_numpy(self.eigenvalues.copy()),
            "length_scale": torch.tensor(self.length_scale, dtype=torch.float64),
            "ridge": torch.tensor(self.ridge, dtype=torch.float64),
            "kappa_band": torch.tensor(self.kappa_band, dtype=torch.float64),
            **({"flat_axes": torch.from_numpy(self.flat_axes.copy()),
                "flat_center": torch.from_numpy(self.flat_center.copy())} if self.flat_axes.shape[0] else {}),
        }

    @classmethod
    def from_state(cls, d: Dict[str, torch.Tensor]) -> "EigenSkinningField":
        """Inverse of :meth:`state` (``flat_axes`` / ``flat_center`` optional: absent in solids' and older files).
        Raises ValueError when a key is missing or the arrays disagree."""
        missing = [k for k in _STATE_KEYS if k not in d]
        if ("flat_axes" in d) != ("flat_center" in d):
            missing.append("flat_center" if "flat_axes" in d else "flat_axes")
        if missing:
            raise ValueError(f"eigen field state lacks {missing}")
        keys = _STATE_KEYS + (("flat_axes", "flat_center") if "flat_axes" in d else ())
        a = {k: torch.as_tensor(d[k]).detach().cpu().to(torch.float64).numpy() for k in keys}
        return cls(a["nodes"], a["radius"], a["coeffs"], a["col_scale"], a["eigenvalues"],
                   float(a["length_scale"]), float(a["ridge"]), (float(a["kappa_band"][0]), float(a["kappa_band"][1])),
                   a.get("flat_axes"), a.get("flat_center"))


def _lame_factor(nu: float) -> float:
    """lambda + 4 mu for E = 1 and Poisson ratio nu (the constant stiffness factor)."""
    mu = 1.0 / (2.0 * (1.0 + nu))
    lam = nu / ((1.0 + nu) * (1.0 - 2.0 * nu))
    return lam + 4.0 * mu


def _lowest_modes(K: sp.csr_matrix, M: sp.csr_matrix, k: int, seed: Optional[int]) -> np.ndarray:
    """(n, k) basis of the k lowest eigenvectors of K c = lambda M c (K PSD, M PD, both sparse symmetric).

    ARPACK shift-invert Lanczos (``scipy.sparse.linalg.eigsh``, sigma slightly below 0, a symmetric-mode sparse
    LU of K - sigma M, a seeded start vector) for speed and because it needs no multi-threaded BLAS-3 (OpenBLAS
    threads were 10x slower than one on a loaded 2-core machine); a dense ``scipy.linalg.eigh`` for small n or
    if ARPACK fails.
    """
    n = K.shape[0]
    if n > 8 * k:
        sigma = -1e-4 * float(K.diagonal().sum()) / float(M.diagonal().sum())
        v0 = np.random.default_rng(0 if seed is None else seed).standard_normal(n)
        try:
            # K - sigma M is symmetric positive definite (sigma < 0): a symmetric-mode LU on the minimum-degree
            # ordering of A + A^T, without pivoting, has about half the cost of eigsh's own (COLAMD) one
            lu = splu((K - sigma * M).tocsc(), permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
                      options={"SymmetricMode": True})
            op_inv = LinearOperator((n, n), matvec=lu.solve, dtype=np.float64)
            _, Q = eigsh(K.tocsc(), k=k, M=M.tocsc(), sigma=sigma, which="LM", v0=v0, OPinv=op_inv)
            if np.isfinite(Q).all():
                return Q
        except (ArpackNoConvergence, ArpackError, RuntimeError):
            pass
    _, Q = scipy.linalg.eigh(K.toarray(), M.toarray(), subset_by_index=[0, k - 1], driver="gvx")
    return Q


#: neighbours of the ``knn`` quadrature rule (:func:`quadrature_weights`)
QUADRATURE_K = 16


def quadrature_weights(points: np.ndarray, rule: str = "uniform", k: int = QUADRATURE_K,
                       distances: Optional[np.ndarray] = None, dim: int = 3) -> np.ndarray:
    """(V,) float64 quadrature volumes of the build points (V, 3) float (any length unit), summing to 1
    (dimensionless fractions of the total volume).

    ``uniform``: 1 / V each (the points sample the volume uniformly). ``knn``: proportional to the ``dim``-th
    power (3: the cube) of the distance to the k-th nearest point (a local volume per point; ``dim`` 2 or 1 for
    points on a plane or a line, the flattened thin shapes of :func:`build_eigen_field`), normalised; for samples
    that crowd some regions (area-uniform surface samples mixed with a coarser interior fill) this keeps those
    regions from weighing more than their volume. ``distances``: the points' ascending nearest-neighbour
    distances (V, >= k + 1) (column 0 the point itself, as ``cKDTree.query`` gives them) when the caller has
    them; computed otherwise. Raises ValueError for another rule or a dim outside 1..3."""
    if dim not in (1, 2, 3):
        raise ValueError(f"dim must be 1, 2 or 3, got {dim}")
    V = points.shape[0]
    if rule == "uniform":
        return np.full(V, 1.0 / V)
    if rule == "knn":
        kk = int(min(k, V - 1))
        if distances is not None and distances.shape[1] > kk:
            d = distances
        else:
            with interrupts.deferred():  # its threads joined before an interrupt leaves (else: a crash at exit)
                d, _ = cKDTree(points).query(points, k=kk + 1, workers=-1)
        w = np.maximum(d[:, kk], 1e-12) ** dim
        w = np.minimum(w, 8.0 * np.median(w))  # isolated points cannot take over
        return w / w.sum()
    raise ValueError(f"unknown quadrature rule {rule!r} (use 'uniform' or 'knn')")


def cell_nodes(points: np.ndarray, n: int, max_iter: int = 24) -> Optional[np.ndarray]:
    """About ``n`` RKPM nodes, one per occupied cell of a cubic grid over the points' bounding box (module
    docstring, step 1).

    points: (V, 3) float64, finite, any length unit. n: target count (>= 1); the grid is
    :func:`physskin_gs.geometry.sampling.grid_cells` (count within 5 % of n where the grid allows). The node
    of an inner cell (all 26 neighbours occupied) is the centroid of its points; the node of a boundary cell is its
    centroid moved outward (along the direction from the centroid of its 3 x 3 x 3 neighbourhood's points to
    its own centroid) as far as the cell's outermost point along that direction, clipped to the bounding box of
    the cell's points, so the nodes reach the object's surface as farthest-point nodes do (the RKPM correction
    needs every point inside its nodes, module docstring step 3). Deterministic, memory O(V) (neighbours are
    found among the occupied cells only), and, the grid having cell faces on the box's mid-planes, a point set
    that is mirror-symmetric about a mid-plane gives nodes with the same symmetry (farthest-point nodes from a
    random start do not; points lying exactly on the plane are the exception). Along an axis where the grid is
    one cell thick (a flat or linear point set: the flattened plates and rods of :func:`build_eigen_field`) no
    neighbour can exist, so the neighbourhood is that of the other axes (3 x 3 or 3 cells): only the rim of a
    plate or the ends of a rod are boundary cells (else every cell would be, and noise in the push direction
    would move each node to a random edge of its cell, leaving near-coincident nodes and gaps).
    Returns (k, 3) float64 rows, k <= V, or None when the grid is too large to index (far outliers; the caller
    then uses farthest points). Raises ValueError for empty, non-(V, 3) or non-finite points (:func:`grid_cells`)."""
    g = grid_cells(points, n, tol=0.05, max_iter=max_iter)
    key, dims, inv, c, size = g.key, g.dims, g.cell, g.count, g.size  # inv: [V] cell of each point
    dp = dims.astype(np.int64) + 2  # padded by one cell on each side, so neighbour keys never wrap
    if float(np.prod(dp.astype(np.float64))) >= 2.0 ** 62:
        return None
    per, cen_c = cell_centroids(points, g)  # [C] points per cell, [C, 3] their centroids
    sums = cen_c * per[:, None]  # [C, 3]
    ckey = np.zeros((c, 3), np.int64)
    ckey[inv] = key + 1
    flat = (ckey[:, 0] * dp[1] + ckey[:, 1]) * dp[2] + ckey[:, 2]  # [C] ascending (cells are in key order)
    nb_occ = np.zeros(c)
    nb_cnt = np.zeros(c)
    nb_sum = np.zeros((c, 3))
    steps = [(-1, 0, 1) if int(dims[a]) > 1 else (0,) for a in range(3)]  # one layer thick: no neighbour there
    full = int(np.prod([len(t) for t in steps]))  # 27 for a solid
    for dx, dy, dz in itertools.product(*steps):  # the 3 x 3 x 3 neighbourhood, by binary search
        f = flat + (dx * dp[1] + dy) * dp[2] + dz
        j = np.minimum(np.searchsorted(flat, f), c - 1)
        hit = flat[j] == f
        nb_occ += hit
        nb_cnt[hit] += per[j[hit]]
        nb_sum[hit] += sums[j[hit]]
    out = cen_c.copy()  # [C, 3] centroids, moved out below in boundary cells
    boundary = (nb_occ < full)[inv]  # [V] the point's cell misses a neighbour
    if boundary.any():
        # outward direction of a boundary cell: from its neighbourhood's centroid to its own centroid
        cen = out[inv]  # [V, 3] the centroid of each point's cell
        nrm = cen - (nb_sum / nb_cnt[:, None])[inv]
        ln = np.linalg.norm(nrm, axis=1, keepdims=True)
        nrm = np.where(ln > 1e-9 * size, nrm / np.maximum(ln, 1e-300), 0.0)  # no direction: no push
        reach = np.where(boundary, ((points - cen) * nrm).sum(1), 0.0)  # [V] outward reach of each point
        far = np.full(c, -np.inf)
        np.maximum.at(far, inv, reach)
        cells_b = np.zeros(c, bool)
        cells_b[inv[boundary]] = True
        first = np.zeros(c, np.int64)
        first[inv] = np.arange(inv.shape[0])  # any point of each cell (for its direction)
        out[cells_b] += far[cells_b, None] * nrm[first[cells_b]]
        # an oblique direction may leave the cell's points: clip to their bounding box (stays mirror-symmetric)
        bmin, bmax = np.full((c, 3), np.inf), np.full((c, 3), -np.inf)
        np.minimum.at(bmin, inv, points)
        np.maximum.at(bmax, inv, points)
        np.clip(out, bmin, bmax, out=out)
    return out


def thin_axes(points: np.ndarray, radius: float, fraction: float = FLAT_FRACTION) -> Tuple[np.ndarray, np.ndarray]:
    """The directions in which a point set is too thin for RKPM nodes of support ``radius`` (module docstring,
    "Thin shapes").

    points: (V, 3) float64, finite (any length unit); radius: the median kernel radius (same unit, > 0). The
    principal axes of the points (eigenvectors of their covariance) whose width 2 sqrt(3) sigma (sigma^2 the
    variance along the axis: the width of a uniform spread; it does not depend on how the axes of a round or
    square rod's cross-section come out) is below ``fraction * radius`` are thin; at most 2 (all three thin: a
    blob smaller than one support, nothing to flatten). When the thin axes span a coordinate axis or plane to
    1e-3 (sampling noise tilts an axis-aligned plate's by ~1e-6) they are those coordinate axes exactly.
    Returns (axes (k, 3) float64 orthonormal rows, k = 0..2; center (3,) float64, the points' mean moved to the
    middle of their range along the thin axes: a point of the mid-plane or mid-line)."""
    p = np.asarray(points, np.float64)
    mean = p.mean(0)
    d = p - mean
    cov = d.T @ d / max(p.shape[0], 1)
    var, vec = np.linalg.eigh(cov)
    width = 2.0 * np.sqrt(3.0 * np.clip(var, 0.0, None))
    thin = [a for a in range(3) if width[a] < fraction * float(radius)]
    if len(thin) == 3 or not thin:
        return np.zeros((0, 3)), mean
    axes = vec.T[thin]  # [k, 3] rows
    proj = axes.T @ axes  # [3, 3] projector onto their span
    snap = np.round(np.diag(proj))
    if np.abs(proj - np.diag(snap)).max() < 1e-3 and int(snap.sum()) == len(thin):
        axes = np.eye(3)[snap > 0.5]  # the coordinate axes
    t = d @ axes.T  # [V, k]
    center = mean + (0.5 * (t.min(0) + t.max(0))) @ axes
    return np.ascontiguousarray(axes), center


def cluster_cutoff(eigenvalues: np.ndarray, m: int, tol: float, max_shift: int = CLUSTER_EXTRA) -> int:
    """The number of leading eigenpairs to keep so that the cut-off does not split a cluster of near-equal
    eigenvalues (module docstring, step 4).

    eigenvalues: (k,) ascending, k >= m (k > m to see past the cut-off). Consecutive eigenvalues whose gap
    ``l[i+1] - l[i]`` is below ``tol l[i+1]`` belong to one cluster. If the cut after mode m - 1 splits one, the
    count moves down to the start of that cluster when that drops at most ``max_shift`` modes and leaves at
    least one; otherwise up to its end when that end lies among the k computed eigenvalues and adds at most
    ``max_shift`` modes; otherwise m is kept (a dense spectrum with small gaps everywhere has no cluster worth
    keeping whole). tol = 0, or nothing computed beyond m, returns m."""
    lam = np.asarray(eigenvalues, np.float64)
    k_all = lam.shape[0]

    def same(i: int) -> bool:  # modes i - 1 and i are in one cluster
        return lam[i] - lam[i - 1] < tol * abs(lam[i])

    if tol <= 0 or m <= 0 or k_all <= m or not same(m):
        return m
    k = m
    while k > 0 and same(k):
        k -= 1
    if k > 0 and m - k <= max_shift:
        return k
    e = m
    while e < k_all and same(e):
        e += 1
    if e < k_all and e - m <= max_shift:
        return e
    return m


def build_eigen_field(volume: ArrayLike, num_handles: int = 16, *, seed: Optional[int] = 0, num_nodes: int = 1024,
                      nu: float = 0.45, radius_k: int = 4, radius_factor: float = 1.8,
                      min_spacing_factor: float = 3.0, radius_cap: float = 4.0,
                      quadrature: str = "knn", nodes: str = "cells",
                      cluster_tol: float = CLUSTER_TOL, native: Optional[bool] = None,
                      flatten: bool = True) -> EigenSkinningField:
    """Build the skinning-eigenmode field of an object from its volume points (module docstring, steps 1-5).

    Args:
        volume: (V, 3) float numpy array or tensor, the object's volume (interior + surface) points in the
            normalised frame; also the quadrature points of K and M and the reference set of the column units.
        num_handles: H = m + 1, constant handle included (>= 2); the field may have fewer (or, when the
            first cluster straddles the cut, up to ``CLUSTER_EXTRA`` more) so that the cut does not split a
            cluster of near-equal eigenvalues (``cluster_tol``, :func:`cluster_cutoff`).
        seed: seed of the ARPACK start vector and, with ``nodes="fps"``, of the first farthest-point node (the
            build is deterministic for a given seed).
        num_nodes: number of RKPM nodes n (clipped to V; must exceed m + 1); with ``nodes="cells"`` the count
            comes out within about 5 % of it (:func:`cell_nodes`).
        nu: Poisson ratio in (-1, 0.5); only scales the eigenvalues (homogeneous material).
        radius_k, radius_factor, min_spacing_factor, radius_cap: radius rule (module docstring, step 2).
        quadrature: volumes of the quadrature points, ``"knn"`` (default) or ``"uniform"``
            (:func:`quadrature_weights`).
        nodes: node rule (module docstring, step 1): ``"cells"`` (default; :func:`cell_nodes`, mirror-symmetric
            for a mirror-symmetric point set) or ``"fps"`` (farthest points).
        cluster_tol: eigenvalues within this relative gap of their neighbour form one cluster, and the handle
            count is lowered so that no cluster is split (module docstring, step 4); 0 keeps m + 1 exactly.
        native: None (default) assembles K and M with the C kernel of :mod:`physskin_gs.model._rkpm_native` when it
            is available and the nodes fit its dense accumulators (6-8x faster; equal to rounding), False with
            scipy's sparse products over :meth:`EigenSkinningField.shape_functions` (the reference), True
            requires the kernel.
        flatten: build a plate or a rod (principal widths below ``FLAT_FRACTION`` of the median kernel radius,
            :func:`thin_axes`) on its mid-surface (module docstring, "Thin shapes"; the field's ``flat_axes``);
            False keeps the solid build for every shape. Other shapes are built the same way either way.

    Returns:
        :class:`EigenSkinningField`.

    Raises:
        ValueError: bad shapes, non-finite points, too few points or nodes for the requested handles, an
            out-of-range parameter, or an unknown ``quadrature`` or ``nodes`` rule.
        RuntimeError: ``native=True`` and the kernel is unavailable.
    """
    pts = volume.detach().cpu().double().numpy() if isinstance(volume, torch.Tensor) else np.asarray(volume)
    pts = np.ascontiguousarray(pts, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[1] != 3:
        raise ValueError(f"volume points must be (V, 3), got {tuple(pts.shape)}")
    if not np.isfinite(pts).all():
        raise ValueError("volume points must be finite")
    m = int(num_handles) - 1
    if m < 1:
        raise ValueError(f"num_handles must be >= 2, got {num_handles}")
    if not (-1.0 < nu < 0.5):
        raise ValueError(f"Poisson ratio must lie in (-1, 0.5), got {nu}")
    if radius_k < 1 or radius_factor <= 0 or min_spacing_factor < 0 or radius_cap < 1:
        raise ValueError("invalid radius rule parameters")
    V = pts.shape[0]
    n = int(min(num_nodes, V))
    if n < m + 2 or n <= radius_k:
        raise ValueError(f"{n} nodes (from {V} points, num_nodes={num_nodes}) are too few for {num_handles} "
                         "handles")

    if nodes not in ("cells", "fps"):
        raise ValueError(f"unknown node rule {nodes!r} (use 'cells' or 'fps')")
    if not (0.0 <= cluster_tol < 1.0):
        raise ValueError(f"cluster_tol must lie in [0, 1), got {cluster_tol}")

    node_rule = nodes

    def nodes_and_radii(pts, frame=None, flat=()):  # 1. nodes (their grid in ``frame``: rows); 2. radii
        n_want = int(min(num_nodes, pts.shape[0]))
        node_pts = None
        if node_rule == "cells":
            y = pts if frame is None else pts @ frame.T
            if flat:  # exactly constant there (rounding would split the grid's mid-plane layer in two)
                y = y.copy()
                y[:, list(flat)] = y[:, list(flat)].mean(0)
            node_pts = cell_nodes(y, n_want)  # [~n, 3]
            if node_pts is not None and frame is not None:
                node_pts = node_pts @ frame
            if node_pts is not None and (node_pts.shape[0] < m + 2 or node_pts.shape[0] <= radius_k):
                node_pts = None
        if node_pts is None:  # farthest points (or a few clustered points: too few cells)
            node_pts = pts[farthest_point_sampling(pts, n_want, seed=seed)]  # [n, 3]
        nd = np.unique(node_pts, axis=0)  # farthest points repeat once n exceeds the distinct points
        if nd.shape[0] < m + 2 or nd.shape[0] <= radius_k:
            raise ValueError(f"{nd.shape[0]} distinct nodes (from {V} points, {len(np.unique(pts, axis=0))} "
                             f"distinct) are too few for {num_handles} handles")
        dn, _ = cKDTree(nd).query(nd, k=radius_k + 1)  # [n, k+1], column 0 is the node itself
        # [V, 17] (the knn quadrature's neighbours) or [V, 2]; column 1: the nearest other point
        with interrupts.deferred():  # as in quadrature_weights
            dp, _ = cKDTree(pts).query(pts, k=min(QUADRATURE_K, V - 1) + 1 if quadrature == "knn" else 2,
                                       workers=-1)
        spacing = float(dp[:, 1].mean())
        rad = np.maximum(radius_factor * dn[:, radius_k], min_spacing_factor * spacing)
        rad = np.minimum(rad, radius_cap * float(np.median(rad)))
        if not np.all(rad > 0):
            raise ValueError("volume points are degenerate (all coincident)")
        return nd, rad, dp

    nodes, radius, dp = nodes_and_radii(pts)
    flat_axes, flat_center = (thin_axes(pts, float(np.median(radius))) if flatten
                              else (np.zeros((0, 3)), pts.mean(0)))
    if flat_axes.shape[0]:  # a plate or a rod: build on its mid-surface (module docstring, "Thin shapes")
        flat = _flatten_points(pts, flat_axes, flat_center)
        frame = None  # the node grid: the coordinate axes, or the principal axes of a plate / rod at an angle
        if np.all(np.isin(flat_axes, (0.0, 1.0))):
            flat_dims = tuple(int(a) for a in np.flatnonzero(flat_axes.sum(0)))
        else:
            d = flat - flat.mean(0)
            frame = np.linalg.eigh(d.T @ d)[1].T  # ascending: the k flattened directions first
            flat_dims = tuple(range(flat_axes.shape[0]))
        try:
            nodes, radius, dp = nodes_and_radii(flat, frame, flat_dims)
            pts = np.ascontiguousarray(flat)
        except ValueError:  # too few distinct nodes once flattened: keep the solid build
            flat_axes = np.zeros((0, 3))
    n = nodes.shape[0]
    h = float(np.median(radius))
    proto = EigenSkinningField(nodes, radius, np.zeros((n, m)), np.ones(m), np.zeros(m), h,
                               flat_axes=flat_axes, flat_center=flat_center)

    # 3. shape functions at the quadrature points; 4. K and M
    vol = quadrature_weights(pts, quadrature, QUADRATURE_K, distances=dp, dim=3 - flat_axes.shape[0])  # [V], sum 1
    dense = _rkpm_native.gram(proto, pts, vol) if native is not False else None
    if dense is None and native:
        raise RuntimeError("the native RKPM kernel is unavailable (no C compiler, PHYSSKIN_NATIVE=0, or more than "
                           f"{_rkpm_native.MAX_GRAM_NODES} nodes)")
    if dense is not None:  # the C kernel's dense accumulation (module _rkpm_native), same sums
        M, K, covered = sp.csr_matrix(dense[0]), sp.csr_matrix(dense[1]) * _lame_factor(nu), dense[2]
        Phi = None
    else:
        Phi, dPhi, covered, _ = proto.shape_functions(pts)
        Vw = sp.diags(vol)
        M = (Phi.T @ Vw @ Phi).tocsr()  # [n, n] sparse
        K = sum((D.T @ Vw @ D) for D in dPhi).tocsr() * _lame_factor(nu)  # [n, n] sparse
    M = 0.5 * (M + M.T)
    K = 0.5 * (K + K.T)
    # a tiny diagonal keeps M definite even if a node barely sees any point
    M = M + sp.identity(n, format="csr") * (1e-12 * float(M.diagonal().sum()) / n)
    extra = (min(CLUSTER_EXTRA, n - m - 2) if cluster_tol > 0 else 0)  # to see the cluster past the cut-off
    Q = _lowest_modes(K, M, m + 1 + extra, seed)  # [n, m+1+extra]

    # drop the constant: M-project it out of the subspace, then Rayleigh-Ritz in what is left
    one = np.ones(n)
    Mone = M @ one
    Qp = Q - np.outer(one, (Mone @ Q) / (one @ Mone))  # [n, m+1+extra]
    gram = Qp.T @ (M @ Qp)
    s, U = np.linalg.eigh(0.5 * (gram + gram.T))  # ascending; s[0] ~ 0 is the removed constant
    B = Qp @ (U[:, 1:] / np.sqrt(s[1:]))  # [n, m+extra] M-orthonormal, M-orthogonal to 1
    kr = B.T @ (K @ B)
    lam, Y = np.linalg.eigh(0.5 * (kr + kr.T))
    m = cluster_cutoff(lam, m, cluster_tol)  # never split a cluster of (near-)equal eigenvalues
    lam, Y = lam[:m], Y[:, :m]
    C = B @ Y  # [n, m]
    flip = np.sign(C[np.abs(C).argmax(0), np.arange(m)])  # make the largest-magnitude coefficient positive
    C *= np.where(flip == 0, 1.0, flip)

    # 5. units: RMS 1 over the build points (Phi @ C: zero rows where no support covers a point)
    if Phi is not None:
        Wb = Phi @ C  # [V, m]
    else:
        tmp = EigenSkinningField(nodes, radius, C, np.ones(m), lam, h, flat_axes=flat_axes, flat_center=flat_center)
        tmp._bucket_table = getattr(proto, "_bucket_table", None)  # same nodes and radii
        Wb = _rkpm_native.evaluate(tmp, pts)[0][:, :m]
        Wb[~covered] = 0.0
    col_scale = np.sqrt((Wb * Wb).mean(0))
    field = EigenSkinningField(nodes, radius, C / col_scale, col_scale, lam, h, flat_axes=flat_axes,
                               flat_center=flat_center)
    if getattr(proto, "_bucket_table", None) is not None:  # same nodes and radii: the kernel's table carries over
        field._bucket_table = proto._bucket_table
    return field
