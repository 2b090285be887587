"""Tetrahedral meshes for the finite-element reference (method.md 13): a structured box (Kuhn split of a hex
grid), and (see below) tetrahedralisation of surface meshes.

A :class:`TetMesh` holds ``nodes`` (n, 3) float64 and ``tets`` (t, 4) int64, every tet positively oriented
(det[x1 - x0, x2 - x0, x3 - x0] > 0). Pure geometry: no I/O beyond what the mesher libraries do in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence, Tuple

import numpy as np

__all__ = ["TetMesh", "box_tetmesh", "tet_volumes"]


@dataclass
class TetMesh:
    """A tetrahedral mesh. nodes: (n, 3) float64 (units of the caller); tets: (t, 4) int64, positive volume;
    method: how it was made (e.g. 'box', 'tetgen', 'voxel'); info: free-form facts (counts, quality)."""

    nodes: np.ndarray
    tets: np.ndarray
    method: str = "unknown"
    info: dict = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return int(self.nodes.shape[0])

    @property
    def num_tets(self) -> int:
        return int(self.tets.shape[0])


def tet_volumes(nodes: np.ndarray, tets: np.ndarray) -> np.ndarray:
    """(t,) signed volumes of tets (t, 4) over nodes (n, 3): det[x1-x0, x2-x0, x3-x0] / 6."""
    x = nodes[tets]  # [t, 4, 3]
    d = x[:, 1:] - x[:, :1]  # [t, 3, 3]
    return np.linalg.det(d) / 6.0


# the six tets of the Kuhn (Freudenthal) split of a unit cube, as corner indices i + 2 j + 4 k; every tet
# runs along the main diagonal 0 -> 7, so neighbouring cubes share conforming face diagonals
_KUHN = np.array([[0, 1, 3, 7], [0, 3, 2, 7], [0, 2, 6, 7], [0, 6, 4, 7], [0, 4, 5, 7], [0, 5, 1, 7]], np.int64)


def box_tetmesh(size: Sequence[float], divisions: Sequence[int], origin: Sequence[float] = (0.0, 0.0, 0.0)) -> TetMesh:
    """Structured tet mesh of the box [origin, origin + size], ``divisions`` (nx, ny, nz) cells per axis, each
    cell split into 6 Kuhn tets (conforming). Nodes are ordered x fastest: index i + (nx+1)(j + (ny+1) k).

    Raises ValueError for a non-positive size or fewer than one division."""
    size = np.asarray(size, np.float64)
    div = np.asarray(divisions, np.int64)
    if size.shape != (3,) or div.shape != (3,) or np.any(size <= 0) or np.any(div < 1):
        raise ValueError(f"box_tetmesh needs 3 positive sizes and divisions, got {size.tolist()}, {div.tolist()}")
    nx, ny, nz = (int(v) for v in div)
    axes = [np.linspace(0.0, size[a], div[a] + 1) + float(origin[a]) for a in range(3)]
    gz, gy, gx = np.meshgrid(axes[2], axes[1], axes[0], indexing="ij")
    nodes = np.stack([gx.ravel(), gy.ravel(), gz.ravel()], 1)  # x fastest

    def nid(i, j, k):
        return i + (nx + 1) * (j + (ny + 1) * k)

    k, j, i = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    i, j, k = i.ravel(), j.ravel(), k.ravel()
    corners = np.stack([nid(i + (c & 1), j + ((c >> 1) & 1), k + ((c >> 2) & 1)) for c in range(8)], 1)  # [cells, 8]
    tets = corners[:, _KUHN].reshape(-1, 4)
    vol = tet_volumes(nodes, tets)
    neg = vol < 0
    tets[neg] = tets[neg][:, [0, 2, 1, 3]]
    return TetMesh(nodes, tets.astype(np.int64), "box", {"divisions": [nx, ny, nz], "size": size.tolist()})
