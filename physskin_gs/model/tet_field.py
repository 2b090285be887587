"""Skinning fields on a tetrahedral mesh: weights at the nodes of the object's own tet mesh (the scalar Laplacian's
lowest eigenmodes for ``tet`` / ``voxel``, the displacement fields of its elastic modes for ``modes``), piecewise
linear (P1) over its tets (issue 23: a basis whose coupling follows the material's connectivity).

For a mesh input the tet mesh comes from its surface (:func:`physskin_gs.geometry.tetmesh.tetmesh_for_shape`:
TetGen, a boolean union of touching bodies, or a glued voxel fill, whichever holds the whole object in one
face-connected piece), so two parts that nearly touch in space (a chair's legs and seat, an ant's legs) are coupled
only where the material joins them, exactly as in the FEM reference of ``evaluate --reference fem``. The weights are
:func:`physskin_gs.physics.fem.laplacian_eigenbasis` (``L w = lambda V w``, the first m non-constant modes, unit
volume-weighted RMS, then the constant column) or :func:`physskin_gs.physics.fem.elastic_mode_weights`.

Evaluation at any point: the tet that holds it (barycentric coordinates >= -1e-9). On a mesh of Kuhn-split cubes of
one grid (the ``voxel`` and ``modes`` bases' voxel meshes, :func:`physskin_gs.geometry.tetmesh.voxel_tetmesh`) it is
found by arithmetic: the cube from the point's grid index, the tet from the order of its coordinates inside the cube
(Freudenthal's rule: the Kuhn tet of the path 000 -> 111 that steps along the largest coordinate first; in a cube of
a mirrored split the path runs from the cube's own start corner, the coordinates measured from it). Otherwise,
and for points in no occupied cube, it is found among the 6, then 16 tets whose centroids are nearest; a point
outside every candidate (a Gaussian slightly off the surface) takes the linear extension of the candidate it is
least outside of (its barycentric coordinates, some negative, still sum to 1, so the constant handle stays 1). W is
continuous inside the mesh; grad W is constant per tet (the P1 gradient; outside, that of the tet extended, so a
Gaussian a little off the surface deforms like its neighbours inside).
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch
from scipy.spatial import cKDTree

from physskin_gs.model.field import SkinningField

__all__ = ["TetSkinningField"]

#: Tets with the nearest centres looked at first (:meth:`TetSkinningField.locate`).
FIRST_CANDIDATES = 6
#: Candidate tets per query point (nearest centroids) for the points none of the first ones holds.
CANDIDATES = 16


class TetSkinningField(SkinningField):
    """P1 skinning field on a tet mesh (module docstring).

    Args:
        nodes: (n, 3) node positions, normalised frame. tets: (t, 4) int node indices.
        weights: (n, H) weights at the nodes (the last column constant 1 for the Laplacian basis).
    Raises ValueError for inconsistent shapes or degenerate tets (zero volume).
    """

    kind = "tet"

    def __init__(self, nodes, tets, weights) -> None:
        self.nodes = np.asarray(nodes, np.float64)
        self.tets = np.asarray(tets, np.int64)
        self.W_nodes = np.asarray(weights, np.float64)
        if self.nodes.ndim != 2 or self.nodes.shape[1] != 3 or self.tets.ndim != 2 or self.tets.shape[1] != 4 \
                or self.W_nodes.shape[0] != self.nodes.shape[0]:
            raise ValueError(f"tet field: nodes {self.nodes.shape}, tets {self.tets.shape}, weights "
                             f"{self.W_nodes.shape} do not fit")
        P = self.nodes[self.tets]  # [t, 4, 3]
        A = (P[:, 1:] - P[:, :1]).transpose(0, 2, 1)  # [t, 3, 3] columns: edges from node 0
        det = np.linalg.det(A)
        if np.any(np.abs(det) < 1e-300):
            raise ValueError("tet field: a tet has zero volume")
        self._Ainv = np.linalg.inv(A)  # [t, 3, 3]: bary_{1..3} = Ainv (x - P0)
        self._P0 = P[:, 0]  # [t, 3]
        self._tree = cKDTree(P.mean(1))
        # grad of each node's barycentric coordinate per tet: rows of Ainv, and -(sum) for node 0
        g = self._Ainv  # [t, 3 (bary 1..3), 3 (x)]
        self._gbar = np.concatenate([-g.sum(1, keepdims=True), g], 1)  # [t, 4, 3]
        self._gradW = np.einsum("tka,tkh->tha", self._gbar, self.W_nodes[self.tets])  # [t, H, 3]
        self._lattice = _kuhn_lattice(self.nodes, self.tets)

    @property
    def num_handles(self) -> int:
        """H, the columns of W (the learned handles and the constant one)."""
        return int(self.W_nodes.shape[1])

    def locate(self, x: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tet index (N,), barycentric coordinates (N, 4) in it (negative ones outside), inside (N,) bool) of
        points x (N, 3), normalised frame."""
        x = np.asarray(x, np.float64)
        if self._lattice is not None:
            tet, b, inside = self._locate_on_lattice(x)
            if not inside.all():
                out = np.flatnonzero(~inside)
                tet[out], b[out], inside[out] = self._locate_by_centres(x[out])
            return tet, b, inside
        return self._locate_by_centres(x)

    def _locate_on_lattice(self, x: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`locate` by Freudenthal's rule on a Kuhn lattice (module docstring); inside is False for points in
        no occupied cube (their tet index 0 and coordinates are placeholders)."""
        origin, h, table, start = self._lattice
        u = (x - origin) / h  # [N, 3] grid coordinates
        c = np.floor(u).astype(np.int64)
        f = u - c
        ok = np.all((c >= 0) & (c < np.asarray(table.shape[:3])), axis=1)
        cc = c[ok]
        s = np.zeros(x.shape[0], np.int64)
        s[ok] = start[cc[:, 0], cc[:, 1], cc[:, 2]]  # the cube's path start corner (0 for a plain Kuhn split)
        flip = ((s[:, None] >> np.arange(3)[None]) & 1).astype(bool)  # [N, 3]
        f = np.where(flip, 1.0 - f, f)  # coordinates from the start corner
        order = np.argsort(-f, axis=1, kind="stable")  # the path steps along the largest coordinate first
        code = _PERM_CODE[order[:, 0] * 3 + order[:, 1]]
        tet = np.full(x.shape[0], -1, np.int64)
        tet[ok] = table[cc[:, 0], cc[:, 1], cc[:, 2], code[ok]]
        found = tet >= 0
        tet[~found] = 0
        b123 = np.einsum("nab,nb->na", self._Ainv[tet], x - self._P0[tet])  # [N, 3]
        bary = np.concatenate([1.0 - b123.sum(-1, keepdims=True), b123], -1)  # [N, 4]
        return tet, bary, found & (bary.min(-1) >= -1e-9)

    def _locate_by_centres(self, x: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`locate` among the tets with the nearest centres (any mesh; the plain reference of the lattice
        path)."""
        # the few nearest tet centres hold most points; only the points none of them holds look further (the
        # same answer as looking at CANDIDATES for all: a point lies in one tet, up to shared faces, where W agrees)
        tet, b, inside = self._locate_among(x, min(FIRST_CANDIDATES, self.tets.shape[0]))
        if self.tets.shape[0] > FIRST_CANDIDATES and not inside.all():
            out = np.flatnonzero(~inside)
            tet[out], b[out], inside[out] = self._locate_among(x[out], min(CANDIDATES, self.tets.shape[0]))
        return tet, b, inside

    def _locate_among(self, x: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`locate` among the k tets with the nearest centres (the best of them for a point in none)."""
        _, cand = self._tree.query(x, k=k)
        cand = cand.reshape(x.shape[0], k)
        rel = x[:, None, :] - self._P0[cand]  # [N, k, 3]
        b123 = np.einsum("nkab,nkb->nka", self._Ainv[cand], rel)  # [N, k, 3]
        bary = np.concatenate([1.0 - b123.sum(-1, keepdims=True), b123], -1)  # [N, k, 4]
        worst = bary.min(-1)  # [N, k]: >= 0 inside
        best = worst.argmax(1)
        rows = np.arange(x.shape[0])
        return cand[rows, best], bary[rows, best], worst[rows, best] >= -1e-9

    def _eval(self, x: torch.Tensor, grads: bool):
        xn = x.detach().cpu().numpy().astype(np.float64)
        tet, b, inside = self.locate(xn)
        W = np.einsum("nk,nkh->nh", b, self.W_nodes[self.tets[tet]])  # [N, H]
        out_W = torch.from_numpy(W).to(torch.float32)
        if not grads:
            return out_W
        dW = self._gradW[tet]  # [N, H, 3] the (nearest) tet's P1 gradient
        return out_W, torch.from_numpy(dW).to(torch.float32)

    def voxel_cells(self) -> Optional[Tuple[np.ndarray, float, torch.Tensor, torch.Tensor]]:
        """A one-point-per-cube quadrature of a voxel mesh (every tet a Kuhn tet of one grid, all 6 tets of each
        occupied cube present), else None: (centres (C, 3) float64 normalised frame, cube volume h^3 (normalised
        units^3), W at the centres (C, H) float32, grad W (C, H, 3) float32: the mean of the cube's 6 P1 gradients,
        which is its exact average over the cube as the 6 tets have equal volume). The centres of a mirror-symmetric
        mesh (:func:`physskin_gs.geometry.tetmesh.voxel_tetmesh` ``mirrored``) are mirror-symmetric, and so are
        these gradients: the cubature points of the ``voxel`` and ``modes`` bases on a splat."""
        got = self._occupied_cubes()
        if got is None:
            return None
        occupied, cubes = got
        origin, h = self._lattice[:2]
        centres = origin + h * (np.argwhere(occupied) + 0.5)  # [C, 3]
        grad = self._gradW[cubes].mean(1)  # [C, H, 3]
        return centres, h ** 3, self.weights(torch.from_numpy(centres)), torch.from_numpy(grad).to(torch.float32)

    def _occupied_cubes(self):
        """(occupied (R0, R1, R2) bool, cubes (C, 6) int64: the tets of each occupied cube, in the grid's order) when
        the mesh is a whole-cube Kuhn lattice, else None."""
        if self._lattice is None:
            return None
        table = self._lattice[2]
        occupied = (table >= 0).any(-1)
        cubes = table[occupied]  # [C, 6]
        if cubes.shape[0] == 0 or np.any(cubes < 0):
            return None
        return occupied, cubes

    def voxel_tets(self) -> Optional[Tuple[np.ndarray, torch.Tensor, torch.Tensor, np.ndarray]]:
        """The tets of :meth:`voxel_cells`' cubes, cube by cube in the same order, else None: (centroids (6C, 3)
        float64 normalised frame, W there (6C, H) float32, each tet's grad W (6C, H, 3) float32, owner (6C,) int64:
        the index of its cube among :meth:`voxel_cells`). Each tet holds 1/6 of its cube; the one-point-per-cube
        quadrature's sub-points (``SubspaceSimulator`` ``stabilization``)."""
        got = self._occupied_cubes()
        if got is None:
            return None
        cubes = got[1]
        tets = cubes.reshape(-1)  # [6C]
        centroids = self.nodes[self.tets[tets]].mean(1)  # [6C, 3]
        owner = np.repeat(np.arange(cubes.shape[0]), 6)
        W = self.weights(torch.from_numpy(centroids))
        return centroids, W, torch.from_numpy(self._gradW[tets]).to(torch.float32), owner

    def weights(self, x: torch.Tensor) -> torch.Tensor:
        """x (N, 3) normalised -> W (N, H) float32 (P1 interpolation; continuous)."""
        return self._eval(x, False)

    def weights_and_grads(self, x: torch.Tensor):
        """x (N, 3) -> (W (N, H), grad W (N, H, 3)) float32; grad W constant per tet (module docstring)."""
        return self._eval(x, True)

    def state(self):
        """Tensors to save (:func:`physskin_gs.model.bases.save_field`)."""
        return {"nodes": torch.from_numpy(self.nodes), "tets": torch.from_numpy(self.tets),
                "weights": torch.from_numpy(self.W_nodes)}

    @classmethod
    def from_state(cls, tensors) -> "TetSkinningField":
        """The field of :meth:`state`'s tensors (nodes (n, 3), tets (t, 4), weights (n, H)). Raises ValueError as
        the constructor."""
        return cls(tensors["nodes"].numpy(), tensors["tets"].numpy(), tensors["weights"].numpy())


# the 6 orders of the axes (first, second step of the path 000 -> 111) -> 0..5; code = first * 3 + second
_PERM_CODE = np.full(9, -1, np.int64)
_PERM_CODE[[1, 2, 3, 5, 6, 7]] = np.arange(6)  # (0,1) (0,2) (1,0) (1,2) (2,0) (2,1)


def _kuhn_lattice(nodes: np.ndarray, tets: np.ndarray):
    """(origin (3,), cell size h, table (R0, R1, R2, 6) int64: the tet of each cube and path order, -1 for none,
    start (R0, R1, R2) int64: the corner code bx + 2 by + 4 bz each cube's paths start from) when every tet is a
    Kuhn tet of one cubic grid (a path from a corner to the opposite one along the edges of one cube: the meshes of
    :func:`physskin_gs.geometry.tetmesh.voxel_tetmesh`, plain (every path from 000) or mirrored, and
    ``box_tetmesh``), else None. Of a path's two ends the one with bz = 0 is its start (a path read backwards is the
    same tet). Two tets claiming the same cube and order (overlapping meshes), or a cube whose tets start from
    different corners, also give None."""
    if tets.shape[0] == 0:
        return None
    P = nodes[tets]  # [t, 4, 3]
    lo = P.min(1)  # [t, 3] each tet's cube corner
    ext = P.max(1) - lo
    h = float(ext.max())
    if not h > 0 or np.abs(ext - h).max() > 1e-9 * h:
        return None  # not all tets span one cube of one size
    origin = nodes.min(0)
    loc = (P - lo[:, None]) / h  # [t, 4, 3] corners of the unit cube
    bits = np.rint(loc)
    grid = (lo - origin) / h
    if np.abs(loc - bits).max() > 1e-6 or np.abs(grid - np.rint(grid)).max() > 1e-6:
        return None
    bits = bits.astype(np.int64)
    corner = bits[..., 0] | (bits[..., 1] << 1) | (bits[..., 2] << 2)  # [t, 4] corner codes
    opposite = (corner[:, :, None] ^ corner[:, None, :]) == 7  # [t, 4, 4]
    if np.any(opposite.sum((1, 2)) != 2):
        return None  # no corner pair spans the cube's diagonal
    ends = np.where(opposite.any(2), corner, 8)  # [t, 4] the diagonal's two ends, 8 elsewhere
    start = np.where(ends < 4, ends, 8).min(1)  # [t] the end with bz = 0
    rel = bits ^ ((start[:, None] >> np.arange(3)[None]) & 1)[:, None, :]  # [t, 4, 3] bits from the start
    level = rel.sum(-1)  # [t, 4] 0..3 along the path
    if np.any(np.sort(level, axis=1) != np.arange(4)):
        return None
    path = np.take_along_axis(rel, np.argsort(level, axis=1)[:, :, None], axis=1)  # [t, 4, 3] from the start
    step = np.argmax(np.diff(path, axis=1), axis=-1)  # [t, 3] the axis of each step
    if np.any(np.sort(step, axis=1) != np.arange(3)):
        return None
    cube = np.rint(grid).astype(np.int64)  # [t, 3]
    dims = tuple(cube.max(0) + 1)
    table = np.full(dims + (6,), -1, np.int64)
    code = _PERM_CODE[step[:, 0] * 3 + step[:, 1]]
    table[cube[:, 0], cube[:, 1], cube[:, 2], code] = np.arange(tets.shape[0])
    if np.unique(np.ravel_multi_index((cube[:, 0], cube[:, 1], cube[:, 2], code), table.shape)).size != tets.shape[0]:
        return None  # two tets of the same cube and order: not one conforming lattice
    starts = np.zeros(dims, np.int64)
    starts[cube[:, 0], cube[:, 1], cube[:, 2]] = start
    if np.any(starts[cube[:, 0], cube[:, 1], cube[:, 2]] != start):
        return None  # tets of one cube starting from different corners: not a Kuhn split
    return origin, h, table, starts
