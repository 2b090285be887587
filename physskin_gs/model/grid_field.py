"""A sparse-grid interpolant of any skinning field, for evaluating W and grad W at millions of Gaussians (issue #13).

Why: the pipeline needs W (N, H) and grad W (N, H, 3) at every moving Gaussian centre once. Directly that costs
20-65 us per centre for the network (7 evaluations: central differences) and 5-15 us for the eigen field's numpy
reference, on 2 cores; the fields are smooth at the scale of a few Gaussian spacings, so a grid of 20-40k nodes
around the object, evaluated once, plus an interpolation of about 1.7 us per centre gives the same numbers. (The
eigen field's C kernel, about 1 us per centre, is cheaper than any interpolation: the pipeline's "auto" mode then
evaluates it directly.)

:class:`GridSkinningField` is built once per object from a base :class:`~physskin_gs.model.field.SkinningField`
(eigen, network, fit, RBF) and the points it will be queried at (the moving Gaussian centres, normalised frame):

1. **Cells.** Cubic cells of edge ``cell`` (normalised units) on a lattice anchored below the points. The
   *occupied* cells hold at least one build point; the *active* cells are the occupied ones dilated by
   ``margin`` cells (26-neighbourhood, default 1). Only active cells exist: the grid is sparse, stored as sorted
   int64 keys of the integer cell coordinates (no dense 3D array at any resolution); a query finds its cell by
   binary search (:func:`torch.searchsorted`). Memory: (8 H + 2) floats per node plus 8 ints per cell (about
   22 MiB for 40k nodes and H = 17).
2. **Nodes.** The lattice nodes of the active cells' stencils are evaluated once with the base field, in chunks
   shared by the torch threads (:func:`evaluate_field`).
3. **Interpolation** in the cell of each query point, with the *analytic gradient of the interpolant* (not an
   interpolation of node gradients), so grad W is exactly the derivative of the W that moves the means, and the
   deformation gradient F of the Gaussians is that of the interpolated map. Schemes (``scheme``):

   * ``"hermite"`` (default): tricubic Hermite on the 8 corners with, per node, the value, the three first
     derivatives (from the base field, which returns them anyway), the three mixed second derivatives
     ``f_xy, f_xz, f_yz`` and ``f_xyz``, the mixed ones by central differences of the node gradients over the
     neighbouring nodes (one-sided at the edge of the node set, 0 where no neighbour exists). Node data are
     shared by the cells around a node, so the interpolant is C1 across cells (values and the full gradient
     are continuous); error O(h^4) in W and O(h^3) in grad W for smooth fields (h = ``cell``).
   * ``"catmull-rom"``: tricubic Catmull-Rom on the 4x4x4 nodes around the cell, values only (the base field's
     ``weights``: cheaper nodes where gradients cost extra, as for the network). C1; error O(h^3) in W and
     O(h^2) in grad W; 1.5x the nodes of ``hermite`` (the stencil reaches one node beyond the active cells).
   * ``"trilinear"``: the 8 corner values; the gradient is the derivative of the trilinear interpolant,
     piecewise constant along each axis and discontinuous across cell faces; error O(h^2) in W, O(h) in grad W.

   Per query point, with the node data of the whole grid as one (nodes x DOFs, H) table, the 64 (8 for
   trilinear) weighted rows are summed by :func:`torch.nn.functional.embedding_bag` (no per-point copy of the
   node data), the points processed in cell order (2x faster than random order), on min(torch threads, 8)
   Python threads with single-threaded torch ops (on a shared 2-core machine OpenMP's parallel regions were
   5-10x slower than one thread for these small memory-bound ops).

**Check and refinement.** The eigen field has a few sub-cell features (its RKPM-to-Shepard blend fringe, where
W can change by 2 RMS over 0.01 normalised units; gradients up to 70x their RMS). So after the build the
interpolant is compared with the base field at the centre of every occupied cell (one base evaluation per
occupied cell, about a quarter of the node count); a cell whose error exceeds ``check_tol`` = (1e-2 RMS(W),
0.1 RMS(|grad W|)) is dropped. The build points in dropped cells get a child grid of half the cell (margin 0,
same check) when they outnumber :data:`REFINE_GAIN` times its nodes + checks; the rest are evaluated directly.

**Points outside the grid** (not in an active cell of the grid or of its child, or non-finite) are evaluated by
the base field directly: the result there is the base field's own. Across the boundary of a dropped cell the
field jumps by at most the local interpolation error (the interpolant is C1 everywhere else).

**Resolution rule** (:func:`plan_grid`, :func:`choose_cell`): ``cell = length / CELLS_PER_LENGTH`` with the
field's length scale ``length = RMS(W) / RMS(|grad W|)`` over a pilot sample of 2000 build points (learned
columns only; a sine of wavelength L has length L / 2 pi) and ``CELLS_PER_LENGTH = 8``; then the cell is grown
until the grid has at most ``max_nodes`` nodes (:data:`MAX_NODES` = 200k; the pipeline also caps it at the
number of centres). On the 1M bench capture this gives cell 0.0245 for the eigen field (length 0.196; 40k
nodes) and 0.033 for the network (length 0.265; 22k nodes). Error / cost behind the choice (1M capture of
``scripts/bench_prepare.py --scheme-study``, 198k moving centres, errors on 20k random centres relative to
RMS(W) and RMS(|grad W|)):

  ============================  =======  =================  ==================  ===========
  field, scheme, cell           nodes    W mean / p99       grad W mean / p99   grad W max
  ============================  =======  =================  ==================  ===========
  eigen hermite 0.0245          39.8k    1.9e-4 / 2.4e-3    1.0e-2 / 0.11       19 (fringe)
  eigen hermite 0.0245 + check  39.8k    1.2e-4 / 1.4e-3    5.2e-3 / 5.2e-2     0.37
  eigen catmull-rom 0.0245      59.9k    7.5e-4 / 7.5e-3    2.9e-2 / 0.25       19
  eigen trilinear 0.0245        39.8k    2.0e-3 / 1.6e-2    5.5e-2 / 0.37       18
  eigen hermite 0.015 + check   104k     1.7e-5 / 2.0e-4    1.1e-3 / 1.3e-2     0.14
  network hermite 0.04          15.0k    5.3e-5 / 2.9e-4    1.9e-3 / 8.1e-3     3.7e-2
  network catmull-rom 0.04      22.5k    2.7e-4 / 1.3e-3    8.0e-3 / 2.9e-2     0.10
  network trilinear 0.04        15.0k    2.0e-3 / 9.2e-3    4.0e-2 / 0.15       0.38
  ============================  =======  =================  ==================  ===========

At equal nodes hermite is 10-40x (W) and 5-20x (grad W) more accurate than trilinear and C1 instead of
discontinuous, for 2x trilinear's interpolation time (1.7 us vs 0.9 us per centre, 2 cores); catmull-rom needs
only values at the nodes (1 network evaluation instead of 7) but 1.5x the nodes and is 3-5x less accurate than
hermite at the same cell. Hermite's grad error falls about like h^3 with the check (0.0245 -> 0.015: 5x), the
node count like h^-2; 8 cells per length scale keeps the grid at a quarter of the 198k centres.

Output dtype: float32 from :meth:`GridSkinningField.weights_and_grads` (the interface); :meth:`interpolate`
also computes in float64 (node data are kept float32; used by the gradient tests).

:func:`grid_interpolate_reference` is a plain per-point version of the same interpolation (dictionary lookups,
explicit 1D basis products) that the tests hold the vectorised one to; the *accuracy* reference is always the
base field itself (``direct`` evaluation, :func:`grid_error_report`). :func:`deformation_difference` measures
what the interpolation changes in the deformed Gaussians.

Source: tensor-product cubic Hermite interpolation (e.g. F. Lekien and J. Marsden 2005, "Tricubic
interpolation in three dimensions", IJNME 63, which uses the same 8 values per node); Catmull-Rom splines
(E. Catmull and R. Rom 1974).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import numpy as np
import torch

from physskin_gs.model.field import SkinningField
from physskin_gs._threads import MAX_WORKERS, run_on_workers, single_thread

__all__ = ["GridSkinningField", "GridPlan", "Pilot", "pilot_sample", "plan_grid", "grid_error_report",
           "grid_interpolate_reference", "deformation_difference", "evaluate_field", "choose_cell",
           "field_length_scale", "SCHEMES"]

SCHEMES = ("hermite", "catmull-rom", "trilinear")
#: Cells per field length scale of the resolution rule (module docstring).
CELLS_PER_LENGTH = 8.0
#: Default node budget of the resolution rule.
MAX_NODES = 200_000
#: A rejected cell's points get a refined child grid when they outnumber this times its nodes + checks.
REFINE_GAIN = 1.5
_PAD = 3  # integer-coordinate padding inside the key encoding (stencils reach -1 .. +2 around a cell)


def evaluate_field(field: SkinningField, x: torch.Tensor, grads: bool = True, chunk: Optional[int] = None,
                   parallel: bool = True) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Direct evaluation of a field at many points, in chunks, shared by min(torch threads, 8) Python threads.

    Args:
        field: any SkinningField; with ``parallel`` its ``weights_and_grads`` / ``weights`` are called from
            several threads at once on disjoint chunks (true of the eigen, network, fit and RBF fields, which keep
            no per-call state; pass ``parallel=False`` for a field that does).
        x: (N, 3) points, normalised frame. grads: also dW/dX (else ``field.weights`` and G is None).
        chunk: points per call (default: N split in 4 pieces per thread, clamped to [2048, 65536]).
    Returns:
        (W (N, H) float32, G (N, H, 3) float32 or None) on CPU, identical to one call per chunk in order (each
        chunk is evaluated by exactly one call). Raises what the field raises.

    Each worker evaluates with single-threaded torch ops (2 workers on 2 cores were as fast as or faster than
    torch's own 2 intra-op threads, and much faster on a loaded machine); NumPy / SciPy code such as the eigen
    field's releases the GIL in its kernels."""
    x = torch.as_tensor(x).detach().cpu().float()
    N, H = int(x.shape[0]), int(field.num_handles)
    T = min(MAX_WORKERS, torch.get_num_threads()) if parallel else 1
    if chunk is None:
        chunk = int(min(65536, max(2048, math.ceil(N / max(1, 4 * T)))))
    W = torch.empty(N, H)
    G = torch.empty(N, H, 3) if grads else None

    def block(s: int) -> None:
        xs = x[s:s + chunk]
        if grads:
            w, g = field.weights_and_grads(xs)
            G[s:s + chunk] = g.detach().cpu().float()
        else:
            w = field.weights(xs)
        W[s:s + chunk] = w.detach().cpu().float()

    starts = range(0, N, chunk)
    if T <= 1 or len(starts) <= 1:
        for s0 in starts:
            block(s0)
    else:
        _parallel(block, starts)
    return W, G


# ------------------------------------------------------------------------------------------------ 1D bases
def _basis_1d(scheme: str, t: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-axis weights and their t-derivatives for t (n,) in [0, 1]: (B (n, A, D), dB (n, A, D)), A stencil
    nodes along the axis (offsets 0..A-1 relative to the first), D values per node (1, or 2 = value and h df/dx)."""
    t2, t3 = t * t, t * t * t
    if scheme == "trilinear":
        B = torch.stack([1 - t, t], 1)[..., None]
        dB = torch.stack([-torch.ones_like(t), torch.ones_like(t)], 1)[..., None]
    elif scheme == "hermite":
        h00, h10, h01, h11 = 2 * t3 - 3 * t2 + 1, t3 - 2 * t2 + t, -2 * t3 + 3 * t2, t3 - t2
        d00, d10, d01, d11 = 6 * t2 - 6 * t, 3 * t2 - 4 * t + 1, -6 * t2 + 6 * t, 3 * t2 - 2 * t
        B = torch.stack([torch.stack([h00, h10], 1), torch.stack([h01, h11], 1)], 1)
        dB = torch.stack([torch.stack([d00, d10], 1), torch.stack([d01, d11], 1)], 1)
    else:  # catmull-rom, nodes at -1, 0, 1, 2
        B = torch.stack([(-t3 + 2 * t2 - t) / 2, (3 * t3 - 5 * t2 + 2) / 2, (-3 * t3 + 4 * t2 + t) / 2,
                         (t3 - t2) / 2], 1)[..., None]
        dB = torch.stack([(-3 * t2 + 4 * t - 1) / 2, (9 * t2 - 10 * t) / 2, (-9 * t2 + 8 * t + 1) / 2,
                          (3 * t2 - 2 * t) / 2], 1)[..., None]
    return B, dB


def _stencil(scheme: str) -> Tuple[int, int]:
    """(first offset, nodes per axis) of a cell's stencil."""
    return (-1, 4) if scheme == "catmull-rom" else (0, 2)


# ------------------------------------------------------------------------------------------------ helpers
def _parallel(fn, items) -> None:
    """Run ``fn(item)`` for every item on min(torch threads, 8) Python threads, each running single-threaded
    torch ops (torch releases the GIL inside ops); the caller's torch thread count is restored. ``fn`` must
    write disjoint outputs. Exceptions propagate.

    Single-threaded also with one thread: the grid's element-wise and gather ops are small and memory-bound; on
    a 2-core machine shared with other work, OpenMP's parallel regions were measured 5-10x slower than one
    thread (threads waiting at barriers)."""
    items = list(items)
    T = min(MAX_WORKERS, torch.get_num_threads(), len(items))
    with single_thread():
        run_on_workers("grid", lambda _slot, it: fn(it), items, T)


def field_length_scale(W: torch.Tensor, G: torch.Tensor) -> float:
    """Length scale RMS(W) / RMS(|grad W|) over the non-constant columns of W (N, H), G (N, H, 3) (normalised
    units; inf when the gradients vanish). A column is constant when W == 1 and G == 0 at every point."""
    const = (W == 1).all(0) & (G == 0).all(2).all(0)
    keep = ~const
    if not bool(keep.any()):
        return math.inf
    w = W[:, keep].double()
    g = G[:, keep].double()
    w_rms = float(w.pow(2).mean().sqrt())
    g_rms = float(g.pow(2).sum(-1).mean().sqrt())
    return w_rms / g_rms if g_rms > 0 else math.inf


def _cell_coords(x: torch.Tensor, origin: torch.Tensor, cell: float) -> torch.Tensor:
    return torch.floor((x.double() - origin) / cell).long()


class _Keys:
    """Integer lattice coordinates (n, 3) in [-_PAD, dims + _PAD) <-> int64 keys (bijective there)."""

    def __init__(self, dims: torch.Tensor) -> None:
        self.S = int(dims.max()) + 2 * _PAD + 1

    def __call__(self, ijk: torch.Tensor) -> torch.Tensor:
        S = self.S
        q = ijk + _PAD
        return (q[..., 0] * S + q[..., 1]) * S + q[..., 2]

    def decode(self, key: torch.Tensor) -> torch.Tensor:
        S = self.S
        return torch.stack([key // (S * S), (key // S) % S, key % S], -1) - _PAD


def _unique(keys: torch.Tensor, return_inverse: bool = False):
    """Sorted unique int64 keys (and the inverse indices), through NumPy: its sort is about 10x faster than
    ``torch.unique`` on CPU, whose multi-threaded path was measured at 150 ms for 80k keys on 2 cores."""
    a = keys.detach().cpu().numpy().reshape(-1)
    if return_inverse:
        u, inv = np.unique(a, return_inverse=True)
        return torch.from_numpy(u), torch.from_numpy(inv.reshape(-1)).to(torch.int64)
    srt = np.sort(a)
    if srt.size:
        keep = np.empty(srt.size, dtype=bool)
        keep[0] = True
        np.not_equal(srt[1:], srt[:-1], out=keep[1:])
        srt = srt[keep]
    return torch.from_numpy(srt)


def _lookup(sorted_keys: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Index of each key in sorted_keys (int64, unique ascending), -1 where absent."""
    if sorted_keys.numel() == 0:
        return torch.full_like(keys, -1)
    pos = torch.searchsorted(sorted_keys, keys).clamp_max(sorted_keys.numel() - 1)
    return torch.where(sorted_keys[pos] == keys, pos, torch.full_like(pos, -1))


def _offsets(lo: int, n: int) -> torch.Tensor:
    r = torch.arange(lo, lo + n)
    return torch.stack(torch.meshgrid(r, r, r, indexing="ij"), -1).reshape(-1, 3)  # [n^3, 3], x-major


def _kron_layout(A: int, D: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """For each entry of the Kronecker layout (ax, dx, ay, dy, az, dz) of a cell's weights: its stencil corner
    ((ax * A + ay) * A + az) and its node DOF ((dx * D + dy) * D + dz): (A^3 D^3,) int64 and int32 tensors."""
    corner, dof = [], []
    for ax in range(A):
        for dx in range(D):
            for ay in range(A):
                for dy in range(D):
                    for az in range(A):
                        for dz in range(D):
                            corner.append((ax * A + ay) * A + az)
                            dof.append((dx * D + dy) * D + dz)
    return torch.tensor(corner, dtype=torch.long), torch.tensor(dof, dtype=torch.int32)


def _count_nodes(x: torch.Tensor, cell: float, scheme: str, margin: int) -> Tuple[int, int, int]:
    """(occupied cells, active cells, nodes) of a grid of edge ``cell`` around points x (N, 3)."""
    origin = x.double().min(0).values - (margin + 1e-3) * cell
    c = _cell_coords(x, origin, cell)
    keys = _Keys(c.max(0).values + margin + 1)
    occ = _unique(keys(c))
    act = _unique((occ[:, None] + keys(_offsets(-margin, 2 * margin + 1))[None] - keys(torch.zeros(3).long()))
                       .flatten())
    lo, n = _stencil(scheme)
    st = keys(_offsets(lo, n)) - keys(torch.zeros(3).long())
    nodes = _unique((act[:, None] + st[None]).flatten())
    return int(occ.numel()), int(act.numel()), int(nodes.numel())


def choose_cell(x: torch.Tensor, length: float, *, scheme: str = "hermite", margin: int = 1,
                cells_per_length: float = CELLS_PER_LENGTH, max_nodes: int = MAX_NODES,
                max_passes: int = 6) -> Tuple[float, int]:
    """Cell edge of the resolution rule (module docstring) for build points x (N, 3) and a field length scale
    ``length`` (normalised units): ``length / cells_per_length``, grown until the grid has at most ``max_nodes``
    nodes. Returns (cell, node count). Raises ValueError for a non-positive length or budget."""
    if not length > 0 or not max_nodes > 0:
        raise ValueError(f"length scale and node budget must be positive, got {length}, {max_nodes}")
    ext = float((x.double().max(0).values - x.double().min(0).values).max())
    cell = min(length / cells_per_length, max(ext, 1e-6))  # a constant field: one cell over the object
    cell = max(cell, ext / 4096.0)  # bounded key range
    # cheap pre-pass on the occupied cells only (N keys), so the full count below never materialises the
    # dilated key sets (27 and 8 keys per cell) of a far too fine grid; a grid has more nodes than occupied cells
    # (about 4x on a surface, 1.3x in a solid), so this never coarsens a grid that fits the budget by much
    for _ in range(max_passes):
        origin = x.double().min(0).values - (margin + 1e-3) * cell
        c = _cell_coords(x, origin, cell)
        occ = int(_unique(_Keys(c.max(0).values + margin + 1)(c)).numel())
        if occ <= max_nodes / 2:
            break
        cell *= (occ / (max_nodes / 2)) ** 0.5 * 1.02
    nodes = _count_nodes(x, cell, scheme, margin)[2]
    for _ in range(max_passes):
        if nodes <= max_nodes:
            break
        cell *= (nodes / max_nodes) ** 0.5 * 1.02
        nodes = _count_nodes(x, cell, scheme, margin)[2]
    return cell, nodes


# ------------------------------------------------------------------------------------------------ the field
@dataclass
class GridPlan:
    """The resolution rule's choice for one object (:func:`plan_grid`).

    Attributes: cell (normalised units), num_nodes and num_occupied (of that grid), length_scale (of the pilot
    sample, normalised units; inf for a constant field), pilot_points (P, 3) float32 and the base field there,
    pilot_W (P, H) and pilot_G (P, H, 3) float32 (direct evaluation: reusable as a reference), seconds (of the
    plan), seconds_per_point (the pilot's direct evaluation time per point, on the torch threads as
    :func:`evaluate_field` runs it: the cost model of the pipeline's "auto" choice)."""

    cell: float
    num_nodes: int
    num_occupied: int
    length_scale: float
    pilot_points: torch.Tensor
    pilot_W: torch.Tensor
    pilot_G: torch.Tensor
    seconds: float
    seconds_per_point: float = 0.0


def _finite_points(points: torch.Tensor) -> torch.Tensor:
    x = torch.as_tensor(points).detach().cpu()
    if x.ndim != 2 or x.shape[1] != 3:
        raise ValueError(f"build points must be (N, 3), got {tuple(x.shape)}")
    x = x[torch.isfinite(x).all(1)].float()
    if x.shape[0] == 0:
        raise ValueError("no finite build point for the grid")
    return x


@dataclass
class Pilot:
    """Direct evaluation of a field at a random sample of build points (:func:`pilot_sample`): points (P, 3)
    float32 normalised frame, W (P, H) and G (P, H, 3) float32, seconds_per_point (wall-clock seconds per point
    on the torch threads, as :func:`evaluate_field` runs it)."""

    points: torch.Tensor
    W: torch.Tensor
    G: torch.Tensor
    seconds_per_point: float


def pilot_sample(base: SkinningField, points: torch.Tensor, pilot: int = 2000, seed: int = 0) -> Pilot:
    """Evaluate ``base`` directly at max(16, ``pilot``) random rows of the finite build points (N, 3) (seeded;
    all of them when fewer), timed after an untimed warm-up call on 64 of them (first-call costs: worker threads,
    a compiled kernel's tables). Raises ValueError for bad points and what the field raises."""
    x = _finite_points(points)
    g = torch.Generator().manual_seed(int(seed))
    sel = torch.randperm(x.shape[0], generator=g)[: max(16, int(pilot))]
    xp = x[sel]
    T = min(MAX_WORKERS, torch.get_num_threads())
    evaluate_field(base, xp[:64], chunk=max(1, math.ceil(min(64, xp.shape[0]) / T)))  # warm-up, not timed
    tp = time.perf_counter()
    Wp, Gp = evaluate_field(base, xp, chunk=max(1, math.ceil(xp.shape[0] / T)))  # as the direct path runs
    return Pilot(xp, Wp, Gp, (time.perf_counter() - tp) / max(1, xp.shape[0]))


def plan_grid(base: SkinningField, points: torch.Tensor, *, scheme: str = "hermite", margin: int = 1,
              max_nodes: Optional[int] = None, cells_per_length: Optional[float] = None, pilot: int = 2000,
              seed: int = 0, pilot_data: Optional[Pilot] = None) -> GridPlan:
    """Resolution rule (module docstring): evaluate the base field directly at ``pilot`` random build points
    (normalised frame, (N, 3); :func:`pilot_sample`, or ``pilot_data`` when already made), take its length scale
    (:func:`field_length_scale`) and :func:`choose_cell` (``max_nodes`` None: :data:`MAX_NODES`;
    ``cells_per_length`` None: :data:`CELLS_PER_LENGTH`, both read at call time). Costs ``pilot`` base
    evaluations plus a few passes of cell counting. Raises ValueError for bad points."""
    t0 = time.perf_counter()
    max_nodes = MAX_NODES if max_nodes is None else int(max_nodes)
    cells_per_length = CELLS_PER_LENGTH if cells_per_length is None else float(cells_per_length)
    x = _finite_points(points)
    pil = pilot_data if pilot_data is not None else pilot_sample(base, x, pilot, seed)
    xp, Wp, Gp = pil.points, pil.W, pil.G
    length = field_length_scale(Wp, Gp)
    ext = float((x.max(0).values - x.min(0).values).max())
    use = length if math.isfinite(length) else max(ext, 1e-6) * cells_per_length
    with single_thread():
        cell, nodes = choose_cell(x, use, scheme=scheme, margin=margin, max_nodes=max_nodes,
                                  cells_per_length=cells_per_length)
        origin = x.double().min(0).values - (margin + 1e-3) * cell
        c = _cell_coords(x, origin, cell)
        occ = int(_unique(_Keys(c.max(0).values + margin + 1)(c)).numel())
    return GridPlan(cell=cell, num_nodes=nodes, num_occupied=occ, length_scale=length, pilot_points=xp,
                    pilot_W=Wp, pilot_G=Gp, seconds=time.perf_counter() - t0,
                    seconds_per_point=pil.seconds_per_point)


class GridSkinningField(SkinningField):
    """Sparse-grid interpolant of a base skinning field (module docstring).

    Args:
        base: the SkinningField to interpolate (normalised frame).
        points: (N, 3) float build points, normalised frame (the moving Gaussian centres); cells are made
            around them. Non-finite rows are ignored.
        cell: cell edge in normalised units; None = the resolution rule (``plan`` if given, else
            :func:`plan_grid` with ``max_nodes``, ``pilot`` and ``seed``). An explicit cell is not checked against
            a node budget (memory grows like the number of active cells times 8, or 64 for catmull-rom).
        scheme: 'hermite' (default), 'catmull-rom' or 'trilinear'.
        margin: cells of dilation around the occupied cells (>= 0).
        check_tol: (tol_W, tol_grad) or None. A posteriori check: the interpolant is compared with the base field
            at the centre of every occupied cell (one base evaluation per occupied cell); a cell whose error
            exceeds tol_W * RMS(W) or tol_grad * RMS(|grad W|) (RMS over those centres) is dropped from the grid,
            so its points go to the refined grid (``refine``) or are evaluated directly (default (0.01, 0.1)).
            Catches the few places where the base field varies on a scale below the cell (the eigen field's
            RKPM/Shepard blend fringe).
        node_chunk: nodes per base-field call (None: :func:`evaluate_field`'s default); chunk: query points per
            interpolation block.
        parallel: evaluate the base field on several threads (:func:`evaluate_field`); the interpolation always
            runs on min(torch threads, 8) Python threads with single-threaded torch ops.
        refine: levels of refinement of the rejected cells (default 1): the build points in rejected cells get a
            child grid of half the cell (margin 0, same check), built only when those points outnumber
            :data:`REFINE_GAIN` times the child's nodes + checks (else they are evaluated directly); the
            child's rejected cells are evaluated directly.

    Attributes: base, scheme, cell, origin ((3,) float64), dims ((3,) cells per axis), num_occupied,
    num_cells (active cells kept), num_rejected (occupied cells dropped by the check), num_nodes, num_handles,
    length_scale (None when ``cell`` was given), build_seconds, node_seconds (base-field time at the nodes),
    check_seconds, child (the refined grid of the rejected cells, or None) and refine_reason (why / why not),
    last_refined and last_fallback (rows of the last :meth:`weights_and_grads` call served by the child grid /
    evaluated directly).

    Raises ValueError for an unknown scheme, a bad cell / margin / tolerance, or no finite build point.
    """

    def __init__(self, base: SkinningField, points: torch.Tensor, cell: Optional[float] = None,
                 scheme: str = "hermite", margin: int = 1, check_tol: Optional[Tuple[float, float]] = (0.01, 0.1),
                 max_nodes: Optional[int] = None, plan: Optional[GridPlan] = None, node_chunk: Optional[int] = None,
                 chunk: int = 8192, pilot: int = 2000, seed: int = 0, parallel: bool = True,
                 refine: int = 1) -> None:
        t0 = time.perf_counter()
        if scheme not in SCHEMES:
            raise ValueError(f"unknown grid scheme {scheme!r}; use one of {', '.join(SCHEMES)}")
        if int(margin) < 0:
            raise ValueError(f"margin must be >= 0, got {margin}")
        if check_tol is not None and not (len(check_tol) == 2 and all(v > 0 for v in check_tol)):
            raise ValueError(f"check_tol must be None or two positive tolerances, got {check_tol}")
        x = _finite_points(points)
        self.base = base
        self.scheme = scheme
        self.margin = int(margin)
        self.chunk = max(1, int(chunk))
        self.num_handles = int(base.num_handles)
        self.length_scale = None
        self.last_fallback = 0
        self.last_refined = 0
        self.parallel = bool(parallel)
        if cell is None:
            if plan is None:
                plan = plan_grid(base, x, scheme=scheme, margin=self.margin, max_nodes=max_nodes, pilot=pilot,
                                 seed=seed)
            cell, self.length_scale = plan.cell, plan.length_scale
        cell = float(cell)
        if not (cell > 0 and math.isfinite(cell)):
            raise ValueError(f"cell must be a positive finite number, got {cell}")
        with single_thread():
            occ, xn, ijk = self._build_cells(x, cell, scheme)
        t1 = time.perf_counter()
        Wn, Gn = evaluate_field(base, xn, grads=scheme == "hermite", chunk=node_chunk, parallel=parallel)
        self.node_seconds = time.perf_counter() - t1
        del xn
        with single_thread():
            # exactly constant columns (the constant handle): returned exactly, not interpolated
            const = (Wn == Wn[:1]).all(0)
            if Gn is not None:
                const &= (Gn == 0).all(2).all(0)
            self._const_cols = torch.nonzero(const).flatten()
            self._const_vals = Wn[0, self._const_cols].clone()
            self._data = self._hermite_data(ijk, Wn, Gn) if Gn is not None else Wn[:, None, :].contiguous()
        del Wn, Gn, ijk
        # a posteriori check at the occupied cells' centres
        t2 = time.perf_counter()
        self.num_rejected = 0
        self._rejected = occ[:0]
        if check_tol is not None:
            self._check(occ, check_tol, node_chunk)
        self.check_seconds = time.perf_counter() - t2
        self.num_cells = int(self._cells.numel())
        # refinement of the rejected cells: a child grid of half the cell over their build points, when it is
        # cheaper than evaluating those points directly (its own rejected cells are evaluated directly)
        self.child: Optional["GridSkinningField"] = None
        self.refine_reason = "no rejected cell" if self.num_rejected == 0 else "refinement off"
        if self.num_rejected and int(refine) > 0:
            with single_thread():
                inrej = _lookup(self._rejected, self._keys(_cell_coords(x, self.origin, cell))) >= 0
                xr = x[inrej]
                occ_r, _, nodes_r = _count_nodes(xr, 0.5 * cell, scheme, 0) if xr.shape[0] else (0, 0, 0)
            if xr.shape[0] > REFINE_GAIN * (nodes_r + occ_r):
                self.child = GridSkinningField(base, xr, cell=0.5 * cell, scheme=scheme, margin=0,
                                               check_tol=check_tol, refine=int(refine) - 1, node_chunk=node_chunk,
                                               chunk=chunk, parallel=parallel)
                self.refine_reason = (f"{xr.shape[0]} points in rejected cells > {REFINE_GAIN:g} x ({nodes_r} nodes "
                                      f"+ {occ_r} checks) of a refined grid")
            else:
                self.refine_reason = (f"{xr.shape[0]} points in rejected cells <= {REFINE_GAIN:g} x ({nodes_r} "
                                      f"nodes + {occ_r} checks) of a refined grid: evaluated directly")
        self.build_seconds = time.perf_counter() - t0

    def _build_cells(self, x: torch.Tensor, cell: float, scheme: str):
        """Lattice, occupied / active cells, stencil table and nodes; returns (occupied keys, node positions
        (Nn, 3) float32, node integer coordinates (Nn, 3))."""
        self.cell = cell
        self.origin = x.double().min(0).values - (self.margin + 1e-3) * cell  # [3]
        c = _cell_coords(x, self.origin, cell)
        self.dims = c.max(0).values + self.margin + 1  # cells per axis: indices 0 .. dims - 1
        self._keys = _Keys(self.dims)
        zero = self._keys(torch.zeros(3, dtype=torch.long))
        occ = _unique(self._keys(c))
        del c
        self.num_occupied = int(occ.numel())
        dil = self._keys(_offsets(-self.margin, 2 * self.margin + 1)) - zero
        self._cells = _unique((occ[:, None] + dil[None]).flatten())  # [Nc] sorted keys of the active cells
        lo, n = _stencil(scheme)
        st = self._keys(_offsets(lo, n)) - zero  # [n^3]
        allkeys = (self._cells[:, None] + st[None])  # [Nc, n^3]
        self._nodes, inv = _unique(allkeys, return_inverse=True)
        self._table = inv.reshape(allkeys.shape).to(torch.int32)  # [Nc, n^3] node index per stencil slot
        self.num_nodes = int(self._nodes.numel())
        del allkeys, inv
        A, D = n, (2 if scheme == "hermite" else 1)
        self._kron_corner, self._kron_dof = _kron_layout(A, D)
        ijk = self._keys.decode(self._nodes)
        xn = (self.origin + ijk.double() * cell).float()  # [Nn, 3]
        return occ, xn, ijk

    def _check(self, occ: torch.Tensor, tol: Tuple[float, float], chunk: Optional[int]) -> None:
        """Drop the occupied cells whose centre error exceeds the tolerances (class docstring)."""
        ctr = (self.origin + (self._keys.decode(occ).double() + 0.5) * self.cell).float()  # [No, 3]
        Nc, H = ctr.shape[0], self.num_handles
        keep = torch.ones(H, dtype=torch.bool)
        keep[self._const_cols] = False
        Wb, Gb = evaluate_field(self.base, ctr, chunk=chunk, parallel=self.parallel)
        Wi, Gi, _ = self.interpolate(ctr)
        with single_thread():
            Wb, Gb, Wi, Gi = Wb[:, keep], Gb[:, keep], Wi[:, keep], Gi[:, keep]
            if Wb.shape[1]:
                ew = (Wi - Wb).abs().amax(1)
                eg = (Gi - Gb).norm(dim=-1).amax(1)
            else:
                ew = eg = torch.zeros(Nc)
            sw = Wb.double().pow(2).sum()
            sg = Gb.double().pow(2).sum()
        m = max(int(keep.sum()), 1)
        w_rms = float((sw / (Nc * m)).sqrt())
        g_rms = float((sg / (Nc * m)).sqrt())
        bad = (ew > tol[0] * max(w_rms, 1e-30)) | (eg > tol[1] * max(g_rms, 1e-30))
        bad |= ~torch.isfinite(ew) | ~torch.isfinite(eg)
        self.num_rejected = int(bad.sum())
        self._rejected = occ[bad]  # sorted keys of the rejected occupied cells
        if self.num_rejected:
            rows = _lookup(self._cells, occ[bad])
            keep_cells = torch.ones(self._cells.numel(), dtype=torch.bool)
            keep_cells[rows[rows >= 0]] = False
            self._cells = self._cells[keep_cells]
            self._table = self._table[keep_cells]

    # -------------------------------------------------------------------------------- build
    def _hermite_data(self, ijk: torch.Tensor, Wn: torch.Tensor, Gn: torch.Tensor) -> torch.Tensor:
        """(Nn, 8, H) float32 node data, DOF index dx*4 + dy*2 + dz (bit = derivative along that axis), each
        scaled by cell^(order): [f, h f_z, h f_y, h^2 f_yz, h f_x, h^2 f_xz, h^2 f_xy, h^3 f_xyz]."""
        h = self.cell
        nb = {}
        for a in range(3):
            for s in (-1, 1):
                e = torch.zeros(3, dtype=torch.long)
                e[a] = s
                nb[(a, s)] = _lookup(self._nodes, self._keys(ijk + e))  # [Nn], -1 where absent

        def diff(f: torch.Tensor, axis: int) -> Tuple[torch.Tensor, torch.Tensor]:
            """(d f / d x_axis (Nn, H) by central / one-sided differences over the nodes, available (Nn,))."""
            ip, im = nb[(axis, 1)], nb[(axis, -1)]
            hp, hm = ip >= 0, im >= 0
            fp = f[ip.clamp_min(0)]
            fm = f[im.clamp_min(0)]
            fp = torch.where(hp[:, None], fp, f)
            fm = torch.where(hm[:, None], fm, f)
            span = (hp.float() + hm.float()) * h
            ok = span > 0
            return (fp - fm) / span.clamp_min(h)[:, None], ok

        def mixed(fa: torch.Tensor, a: int, fb: torch.Tensor, b: int) -> torch.Tensor:
            """Symmetrised d^2 f / dx_a dx_b from the first derivatives fa = df/dx_a, fb = df/dx_b."""
            d1, o1 = diff(fa, b)
            d2, o2 = diff(fb, a)
            cnt = (o1.float() + o2.float())[:, None]
            return (d1 * o1[:, None] + d2 * o2[:, None]) / cnt.clamp_min(1.0)

        gx, gy, gz = Gn[..., 0], Gn[..., 1], Gn[..., 2]
        fxy, fxz, fyz = mixed(gx, 0, gy, 1), mixed(gx, 0, gz, 2), mixed(gy, 1, gz, 2)
        d_a, o_a = diff(fyz, 0)
        d_b, o_b = diff(fxz, 1)
        d_c, o_c = diff(fxy, 2)
        cnt = (o_a.float() + o_b.float() + o_c.float())[:, None]
        fxyz = (d_a * o_a[:, None] + d_b * o_b[:, None] + d_c * o_c[:, None]) / cnt.clamp_min(1.0)
        data = torch.stack([Wn, h * gz, h * gy, h * h * fyz, h * gx, h * h * fxz, h * h * fxy, h ** 3 * fxyz], 1)
        return data.float().contiguous()

    # -------------------------------------------------------------------------------- queries
    def locate(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """(cell index (N,) int64 into the active cells, -1 outside the grid or non-finite; local coordinates
        t (N, 3) in [0, 1) within the cell, float64) for x (N, 3) normalised coordinates."""
        xd = x.detach().cpu().double()
        u = (xd - self.origin) / self.cell
        finite = torch.isfinite(u).all(1)
        u = torch.where(finite[:, None], u, torch.zeros_like(u))
        c = torch.floor(u)
        ok = finite & (c >= 0).all(1) & (c < self.dims.double()).all(1)
        ci = torch.where(ok[:, None], c, torch.zeros_like(c)).long()
        idx = _lookup(self._cells, self._keys(ci))
        idx = torch.where(ok, idx, torch.full_like(idx, -1))
        return idx, u - c

    def _interp_block(self, cidx: torch.Tensor, t: torch.Tensor, dtype: torch.dtype
                      ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Interpolate in cells cidx (n,) at local coordinates t (n, 3): (W (n, H), G (n, H, 3)) in dtype.

        The 3D weights are Kronecker products of the per-axis bases, laid out (ax, dx, ay, dy, az, dz); the
        matching rows of the node-data table (node * D^3 + DOF) are summed with those weights by
        :func:`torch.nn.functional.embedding_bag` (no per-point copy of the node data)."""
        n = cidx.shape[0]
        t = t.to(dtype)
        Bs, dBs = zip(*(_basis_1d(self.scheme, t[:, k]) for k in range(3)))  # each (n, A, D)
        A, D = Bs[0].shape[1], Bs[0].shape[2]
        AD = A * D
        inv_h = 1.0 / self.cell
        bx, by, bz = (b.reshape(n, AD) for b in Bs)
        dx, dy, dz = ((b * inv_h).reshape(n, AD) for b in dBs)  # d/dx = (1/h) d/dt
        Wt = torch.empty(n, 4, AD * AD, AD, dtype=dtype)  # rows: point-major, then value / d_x / d_y / d_z
        bxy = (bx[:, :, None] * by[:, None, :]).reshape(n, AD * AD, 1)
        torch.mul(bxy, bz[:, None, :], out=Wt[:, 0])
        torch.mul((dx[:, :, None] * by[:, None, :]).reshape(n, AD * AD, 1), bz[:, None, :], out=Wt[:, 1])
        torch.mul((bx[:, :, None] * dy[:, None, :]).reshape(n, AD * AD, 1), bz[:, None, :], out=Wt[:, 2])
        torch.mul(bxy, dz[:, None, :], out=Wt[:, 3])
        Wt = Wt.view(4 * n, AD ** 3)
        nodes = self._table[cidx]  # (n, A^3) int32
        rows = nodes[:, self._kron_corner] * (D ** 3) + self._kron_dof  # (n, K) int32 table rows, Kronecker order
        rows = rows[:, None, :].expand(n, 4, rows.shape[1]).reshape(4 * n, -1)
        out = torch.nn.functional.embedding_bag(rows, self._table_rows(dtype), per_sample_weights=Wt,
                                                mode="sum").view(n, 4, -1)  # (n, 4, H)
        return out[:, 0], out[:, 1:].transpose(1, 2)

    def _table_rows(self, dtype: torch.dtype) -> torch.Tensor:
        """The node data as a (Nn * D^3, H) table in ``dtype`` (float32 kept; other dtypes cached on first use)."""
        if dtype == self._data.dtype:
            return self._data.view(-1, self._data.shape[-1])
        if getattr(self, "_data_cast", None) is None or self._data_cast.dtype != dtype:
            self._data_cast = self._data.to(dtype).view(-1, self._data.shape[-1])
        return self._data_cast

    def interpolate(self, x: torch.Tensor, dtype: torch.dtype = torch.float32
                    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Grid-only evaluation: (W (N, H), dW/dX (N, H, 3), inside (N,) bool) in ``dtype`` on CPU; rows outside
        the grid are zero (see :meth:`weights_and_grads` for the full field). Exactly constant columns of the
        base field (W = c, grad W = 0 at every node, e.g. the constant handle) are returned exactly."""
        with single_thread():
            idx, t = self.locate(x)
            N, H = idx.shape[0], self.num_handles
            inside = idx >= 0
            # blocks follow the cells (points sorted by cell), so the node rows a block reads stay in cache:
            # measured 2x faster than the input order for randomly ordered Gaussians
            order = torch.from_numpy(np.argsort(idx.numpy(), kind="stable"))
            first = int(N - int(inside.sum()))  # the points outside (index -1) sort first
            W = torch.zeros(N, H, dtype=dtype)
            G = torch.zeros(N, H, 3, dtype=dtype)
        cc = self._const_cols

        def block(s: int) -> None:
            r = order[s:min(N, s + self.chunk)]
            w, g = self._interp_block(idx[r], t[r], dtype)
            if cc.numel():
                w[:, cc] = self._const_vals.to(dtype)
                g[:, cc] = 0.0
            W[r] = w
            G[r] = g

        _parallel(block, range(first, N, self.chunk))
        return W, G, inside

    def weights_and_grads(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """x (N, 3) normalised coordinates -> (W (N, H), dW/dX (N, H, 3)) float32 on x's device: the grid
        interpolant inside the grid, the base field (exactly) outside. Errors: as the base field's for the rows
        it evaluates (e.g. ValueError for non-finite points with the eigen field)."""
        xt = torch.as_tensor(x)
        W, G, inside = self.interpolate(xt, torch.float32)
        if not bool(inside.all()):
            out = torch.nonzero(~inside).flatten()
            xo = xt.detach().cpu()[out].float()
            if self.child is not None:
                Wb, Gb = self.child.weights_and_grads(xo)
                self.last_refined = int(out.numel()) - self.child.last_fallback
                self.last_fallback = self.child.last_fallback
            else:
                Wb, Gb = evaluate_field(self.base, xo, parallel=self.parallel)
                self.last_refined, self.last_fallback = 0, int(out.numel())
            W[out] = Wb
            G[out] = Gb
        else:
            self.last_refined, self.last_fallback = 0, 0
        return W.to(xt.device), G.to(xt.device)

    def facts(self) -> Dict:
        """JSON-ready dict: ``scheme``; ``cell`` (edge, normalised units); ``margin`` (cells); the counts
        ``num_occupied``, ``num_cells``, ``num_rejected``, ``num_nodes``; ``length_scale`` (normalised units, None
        when the cell was given); wall-clock seconds ``build_seconds`` (the whole constructor: the plan when made
        there, the child grid included), ``node_seconds`` (base field at the nodes) and ``check_seconds``;
        ``memory_mib`` (node data, stencil table, node and cell keys, child included; MiB = 2^20 bytes);
        ``refine`` (why / why not refined) and ``refined`` (the child grid's facts, or None)."""
        return {"scheme": self.scheme, "cell": self.cell, "margin": self.margin, "num_occupied": self.num_occupied,
                "num_cells": self.num_cells, "num_rejected": self.num_rejected, "num_nodes": self.num_nodes,
                "length_scale": self.length_scale, "build_seconds": self.build_seconds,
                "node_seconds": self.node_seconds, "check_seconds": self.check_seconds,
                "memory_mib": (self._data.numel() * 4 + self._table.numel() * 4 + self._nodes.numel() * 8
                               + self._cells.numel() * 8) / 2 ** 20 + (self.child.facts()["memory_mib"]
                                                                       if self.child is not None else 0.0),
                "refine": self.refine_reason, "refined": self.child.facts() if self.child is not None else None}


# ------------------------------------------------------------------------------------------------ reference
def grid_interpolate_reference(grid: GridSkinningField,
                               x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Plain per-point version of :meth:`GridSkinningField.interpolate` in float64 (for tests; slow): the cell
    and its stencil nodes by dictionary lookup of integer coordinates, the weights as explicit products of the
    1D bases. Returns (W (N, H), G (N, H, 3), inside (N,) bool) with zero rows outside."""
    node_of = {tuple(int(v) for v in k): i for i, k in enumerate(grid._keys.decode(grid._nodes).tolist())}
    cells = {tuple(int(v) for v in k) for k in grid._keys.decode(grid._cells).tolist()}
    lo, n = _stencil(grid.scheme)
    N, H = x.shape[0], grid.num_handles
    W = torch.zeros(N, H, dtype=torch.float64)
    G = torch.zeros(N, H, 3, dtype=torch.float64)
    inside = torch.zeros(N, dtype=torch.bool)
    data = grid._data.double()
    for p in range(N):
        u = (x[p].double() - grid.origin) / grid.cell
        if not bool(torch.isfinite(u).all()):
            continue
        c = tuple(int(math.floor(float(v))) for v in u)
        if c not in cells:
            continue
        inside[p] = True
        t = [float(u[k]) - c[k] for k in range(3)]
        B = [_basis_1d(grid.scheme, torch.tensor([tk], dtype=torch.float64)) for tk in t]
        for a in range(n):
            for b in range(n):
                for cc in range(n):
                    node = node_of[(c[0] + lo + a, c[1] + lo + b, c[2] + lo + cc)]
                    D = data.shape[1]
                    dofs = [(0, 0, 0)] if D == 1 else [(i, j, k) for i in (0, 1) for j in (0, 1) for k in (0, 1)]
                    for dof, (i, j, k) in enumerate(dofs):
                        bx, by, bz = B[0][0][0, a, i], B[1][0][0, b, j], B[2][0][0, cc, k]
                        dx, dy, dz = B[0][1][0, a, i], B[1][1][0, b, j], B[2][1][0, cc, k]
                        v = data[node, dof]
                        W[p] += bx * by * bz * v
                        G[p, :, 0] += dx * by * bz * v / grid.cell
                        G[p, :, 1] += bx * dy * bz * v / grid.cell
                        G[p, :, 2] += bx * by * dz * v / grid.cell
    return W, G, inside


# ------------------------------------------------------------------------------------------------ errors
def grid_error_report(base: SkinningField, grid: SkinningField, x: torch.Tensor,
                      reference: Optional[Tuple[torch.Tensor, torch.Tensor]] = None) -> Dict:
    """Error of ``grid`` against ``base`` (the direct evaluation, the reference) at points x (N, 3), normalised.

    Over the non-constant columns of the base field at x: ``w_max_rel`` / ``w_mean_rel`` = max / mean |dW|
    divided by RMS(W); ``g_max_rel`` / ``g_mean_rel`` = max / mean |d grad W| (Euclidean norm of the 3-vector per
    point and handle) divided by RMS(|grad W|); ``*_p99_rel`` the 99th percentiles; plus ``w_rms``, ``g_rms``
    (normalised units), ``num_points``, ``inside_fraction`` (share of points the grid interpolated, when it is a
    :class:`GridSkinningField`) and ``seconds``. ``reference``: the base field's (W (N, H), G (N, H, 3)) at x when
    already known (saves the direct evaluation). Raises nothing beyond the fields' own errors; N = 0 gives NaNs."""
    t0 = time.perf_counter()
    x = torch.as_tensor(x).detach().cpu().float()
    Wb, Gb = reference if reference is not None else base.weights_and_grads(x)
    Wg, Gg = grid.weights_and_grads(x)
    Wb, Gb, Wg, Gg = Wb.double().cpu(), Gb.double().cpu(), Wg.double().cpu(), Gg.double().cpu()
    const = (Wb == 1).all(0) & (Gb == 0).all(2).all(0) if x.shape[0] > 0 else torch.zeros(Wb.shape[1], dtype=bool)
    keep = ~const
    nan = float("nan")
    out = {"num_points": int(x.shape[0])}
    if x.shape[0] == 0 or not bool(keep.any()):
        out.update(w_max_rel=nan, w_mean_rel=nan, w_p99_rel=nan, g_max_rel=nan, g_mean_rel=nan, g_p99_rel=nan,
                   w_rms=nan, g_rms=nan)
    else:
        dW = (Wg - Wb)[:, keep].abs()
        dG = (Gg - Gb)[:, keep].norm(dim=-1)
        w_rms = float(Wb[:, keep].pow(2).mean().sqrt())
        g_rms = float(Gb[:, keep].pow(2).sum(-1).mean().sqrt())
        ws, gs = max(w_rms, 1e-30), max(g_rms, 1e-30)
        out.update(w_max_rel=float(dW.max()) / ws, w_mean_rel=float(dW.mean()) / ws,
                   w_p99_rel=float(torch.quantile(dW.flatten()[:1 << 24], 0.99)) / ws,
                   g_max_rel=float(dG.max()) / gs, g_mean_rel=float(dG.mean()) / gs,
                   g_p99_rel=float(torch.quantile(dG.flatten()[:1 << 24], 0.99)) / gs, w_rms=w_rms, g_rms=g_rms)
    if isinstance(grid, GridSkinningField):
        idx, _ = grid.locate(x)
        out["inside_fraction"] = float((idx >= 0).double().mean()) if x.shape[0] else nan
    out["seconds"] = time.perf_counter() - t0
    return out


def deformation_difference(means_ref: torch.Tensor, covars_ref: torch.Tensor, means: torch.Tensor,
                           covars: torch.Tensor, size: float) -> Dict:
    """How far deformed Gaussians (means (N, 3), covars (N, 3, 3), scene units) are from a reference deformation
    of the same Gaussians (e.g. direct vs grid weights under the same handle transforms).

    Returns ``mean_max_rel`` / ``mean_mean_rel`` (max / mean |d mean| divided by ``size``, the object's size in
    scene units), ``cov_max_rel`` / ``cov_p99_rel`` / ``cov_mean_rel`` (per Gaussian |d Sigma|_F / |Sigma_ref|_F)
    and ``num``. Raises ValueError for mismatched shapes or a non-positive size."""
    if means.shape != means_ref.shape or covars.shape != covars_ref.shape or not size > 0:
        raise ValueError("deformation_difference: shapes differ or size <= 0")
    dm = (means.double() - means_ref.double()).norm(dim=1) / float(size)
    ref = covars_ref.double().flatten(1).norm(dim=1).clamp_min(1e-300)
    dc = (covars.double() - covars_ref.double()).flatten(1).norm(dim=1) / ref
    if dm.numel() == 0:
        nan = float("nan")
        return {"num": 0, "mean_max_rel": nan, "mean_mean_rel": nan, "cov_max_rel": nan, "cov_p99_rel": nan,
                "cov_mean_rel": nan}
    return {"num": int(dm.numel()), "mean_max_rel": float(dm.max()), "mean_mean_rel": float(dm.mean()),
            "cov_max_rel": float(dc.max()), "cov_p99_rel": float(torch.quantile(dc[:1 << 24].float(), 0.99)),
            "cov_mean_rel": float(dc.mean())}
