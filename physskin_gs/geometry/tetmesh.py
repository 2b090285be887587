"""Tetrahedral meshes for the finite-element reference (method.md 13).

* :func:`box_tetmesh` - a structured box, every hex cell split into 6 Kuhn tets (conforming).
* :func:`voxel_tetmesh` - the same split of the occupied voxels of a bool grid.
* :func:`tetrahedralize_surface` - TetGen quality meshing of a closed surface (run in a child process, since
  TetGen can abort the interpreter on self-intersecting input).
* :func:`voxel_fill_tetmesh` - a voxel fill of the inside of a surface at a given resolution, glued into one
  piece by :func:`glue_occupancy` (parts that nearly touch are joined, as in the volume-point fill).
* :func:`tetmesh_for_shape` - TetGen; for several closed bodies, TetGen on their boolean union (manifold3d) when
  that is one body; otherwise (open, self-intersecting or disjoint parts) the glued voxel fill with about the
  wanted node count; ``info['path']`` says which, ``info['path_reason']`` why. A thin shape (a plate, a rod) is
  meshed stretched along its thin principal axes and mapped back (:func:`thin_shape_stretch`), so the node count
  stays near the wanted one instead of growing with (size / thickness)^2 under TetGen's quality bounds.
* :func:`clean_tetmesh` / :func:`tet_components` - orientation, degenerate tets, largest face-connected component.

A :class:`TetMesh` holds ``nodes`` (n, 3) float64 and ``tets`` (t, 4) int64, every tet positively oriented
(det[x1 - x0, x2 - x0, x3 - x0] > 0). Pure geometry: no file I/O (the meshers work in memory).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Optional, Sequence, Tuple

import numpy as np

__all__ = [
    "TetMesh", "TetrahedralizationError", "box_tetmesh", "clean_tetmesh", "tet_components", "tet_volumes",
    "tetmesh_for_shape", "tetrahedralize_surface", "voxel_tetmesh", "glue_occupancy", "voxel_fill_tetmesh",
    "thin_shape_stretch", "ThinStretch",
]


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
        """n, the number of nodes."""
        return int(self.nodes.shape[0])

    @property
    def num_tets(self) -> int:
        """t, the number of tets."""
        return int(self.tets.shape[0])


def tet_volumes(nodes: np.ndarray, tets: np.ndarray) -> np.ndarray:
    """(t,) signed volumes of tets (t, 4) int over nodes (n, 3): det[x1-x0, x2-x0, x3-x0] / 6, in the nodes'
    units cubed. Raises IndexError for a node index outside 0..n-1."""
    x = nodes[tets]  # [t, 4, 3]
    d = x[:, 1:] - x[:, :1]  # [t, 3, 3]
    return np.linalg.det(d) / 6.0


# the six tets of the Kuhn (Freudenthal) split of a unit cube, as corner indices i + 2 j + 4 k; every tet
# runs along the main diagonal 0 -> 7, so neighbouring cubes share conforming face diagonals
_KUHN = np.array([[0, 1, 3, 7], [0, 3, 2, 7], [0, 2, 6, 7], [0, 6, 4, 7], [0, 4, 5, 7], [0, 5, 1, 7]], np.int64)


def box_tetmesh(size: Sequence[float], divisions: Sequence[int], origin: Sequence[float] = (0.0, 0.0, 0.0)) -> TetMesh:
    """Structured tet mesh of the box [origin, origin + size], ``divisions`` (nx, ny, nz) cells per axis, each
    cell split into 6 Kuhn tets (conforming). Nodes are ordered x fastest: index i + (nx+1)(j + (ny+1) k).
    size (3,) and origin (3,) in any length unit (the nodes' unit); divisions (3,) int. Returns a
    :class:`TetMesh` with (nx+1)(ny+1)(nz+1) nodes and 6 nx ny nz tets, method 'box'.

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


# ------------------------------------------------------------------------------------ clean-up helpers
class TetrahedralizationError(RuntimeError):
    """TetGen could not mesh a surface (open, self-intersecting or degenerate input, or a volume mismatch)."""


_TET_FACES = np.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]], np.int64)


def tet_components(tets: np.ndarray) -> Tuple[int, np.ndarray]:
    """Face-connected components of tets (t, 4): (count, (t,) int label). Two tets are connected when they
    share a triangle (three nodes); sharing only an edge or a vertex does not connect them. Raises nothing
    (no tets: (0, empty))."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    t = tets.shape[0]
    if t == 0:
        return 0, np.zeros(0, np.int64)
    faces = np.sort(tets[:, _TET_FACES].reshape(-1, 3), axis=1)  # [4t, 3]
    owner = np.repeat(np.arange(t), 4)
    order = np.lexsort((faces[:, 2], faces[:, 1], faces[:, 0]))
    fs, ow = faces[order], owner[order]
    same = np.all(fs[1:] == fs[:-1], axis=1)  # consecutive equal faces: a shared triangle
    a, b = ow[:-1][same], ow[1:][same]
    g = coo_matrix((np.ones(a.size), (a, b)), shape=(t, t))
    count, labels = connected_components(g, directed=False)
    return int(count), labels.astype(np.int64)


def _edge_quality(nodes: np.ndarray, tets: np.ndarray, vol: np.ndarray) -> np.ndarray:
    """(t,) shape quality 6 sqrt(2) V / l_rms^3 (1 for a regular tet, -> 0 for slivers)."""
    x = nodes[tets]  # [t, 4, 3]
    pairs = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    l2 = np.stack([((x[:, i] - x[:, j]) ** 2).sum(1) for i, j in pairs], 1)  # [t, 6]
    lrms = np.sqrt(l2.mean(1))
    return 6.0 * np.sqrt(2.0) * np.abs(vol) / np.maximum(lrms, 1e-300) ** 3


def clean_tetmesh(nodes: np.ndarray, tets: np.ndarray, method: str, info: dict | None = None) -> TetMesh:
    """Orient every tet positively, drop degenerate tets (|V| <= 1e-12 max |V|), keep the largest face-connected
    component and drop unused nodes (renumbered in their original order). Facts go to ``info``: counts of
    components and degenerate tets, the kept volume fraction, total volume, quality min / mean.

    Raises ValueError when no tet with positive volume is left."""
    nodes = np.ascontiguousarray(nodes, dtype=np.float64)
    tets = np.array(tets, dtype=np.int64).reshape(-1, 4)
    info = dict(info or {})
    vol = tet_volumes(nodes, tets) if tets.size else np.zeros(0)
    keep = np.abs(vol) > 1e-12 * (np.abs(vol).max() if vol.size else 0.0)
    info["degenerate_tets_dropped"] = int((~keep).sum())
    tets, vol = tets[keep], vol[keep]
    if tets.shape[0] == 0:
        raise ValueError("tet mesh has no tet with positive volume")
    neg = vol < 0
    tets[neg] = tets[neg][:, [0, 2, 1, 3]]
    vol = np.abs(vol)
    count, labels = tet_components(tets)
    total = float(vol.sum())
    if count > 1:
        vol_c = np.bincount(labels, weights=vol)
        big = int(np.argmax(vol_c))
        sel = labels == big
        tets, vol = tets[sel], vol[sel]
    info["components"] = count
    info["kept_volume_fraction"] = float(vol.sum() / total)
    used = np.unique(tets.reshape(-1))
    remap = np.full(nodes.shape[0], -1, np.int64)
    remap[used] = np.arange(used.size)
    nodes, tets = nodes[used], remap[tets]
    q = _edge_quality(nodes, tets, vol)
    info.update(num_nodes=int(nodes.shape[0]), num_tets=int(tets.shape[0]), volume=float(vol.sum()),
                quality_min=float(q.min()), quality_mean=float(q.mean()))
    return TetMesh(nodes, tets, method, info)


# ------------------------------------------------------------------------------------ voxel tets
def voxel_tetmesh(occupancy: np.ndarray, origin: Sequence[float], voxel: float, mirrored: bool = False) -> TetMesh:
    """Tet mesh of the occupied voxels of a (R0, R1, R2) bool grid; voxel (i, j, k) spans
    origin + voxel * [i, i+1] x [j, j+1] x [k, k+1]. Each voxel is split into the 6 Kuhn tets of
    :func:`box_tetmesh` (conforming across voxels); shared corner nodes are merged; only the largest
    face-connected component is kept (voxels touching by an edge or a corner only are not connected).
    The total volume is exactly (kept voxels) * voxel^3. method='voxel'.

    ``mirrored``: voxel (i, j, k) takes the Kuhn split mirrored along each axis whose index is odd (the diagonal of
    its 6 tets runs from corner (i mod 2, j mod 2, k mod 2) to the opposite one; still conforming). The plain split's
    diagonals all point along (1, 1, 1), which couples the axes (a square beam's two bending directions become one
    stiff and one soft diagonal direction); the mirrored one maps onto itself under a mirror across a plane between
    cells when the grid has an even number of cells along that axis, so a mirror-symmetric occupancy gives a
    mirror-symmetric mesh.

    Raises ValueError for a grid that is not 3-D, a non-positive voxel size or no occupied voxel."""
    occ = np.asarray(occupancy, dtype=bool)
    if occ.ndim != 3:
        raise ValueError(f"occupancy must be a 3-D bool grid, got shape {occ.shape}")
    if not float(voxel) > 0:
        raise ValueError(f"voxel size must be > 0, got {voxel}")
    ijk = np.argwhere(occ)  # [c, 3]
    if ijk.shape[0] == 0:
        raise ValueError("occupancy grid has no occupied voxel")
    dims = np.asarray(occ.shape, np.int64) + 1
    bits = np.array([[(c >> 0) & 1, (c >> 1) & 1, (c >> 2) & 1] for c in range(8)], np.int64)  # [8, 3]
    corner = ijk[:, None, :] + bits[None]  # [c, 8, 3]
    flat = np.ravel_multi_index((corner[..., 0], corner[..., 1], corner[..., 2]), tuple(dims))  # [c, 8]
    uniq, inv = np.unique(flat.reshape(-1), return_inverse=True)
    corners = inv.reshape(-1, 8)
    gi, gj, gk = np.unravel_index(uniq, tuple(dims))
    nodes = np.asarray(origin, np.float64)[None] + float(voxel) * np.stack([gi, gj, gk], 1).astype(np.float64)
    if mirrored:  # corner code c = bx + 2 by + 4 bz; mirroring along an axis flips its bit
        mask = (ijk[:, 0] & 1) | ((ijk[:, 1] & 1) << 1) | ((ijk[:, 2] & 1) << 2)  # [c]
        local = _KUHN[None] ^ mask[:, None, None]  # [c, 6, 4]
        tets = np.take_along_axis(corners, local.reshape(-1, 24), axis=1).reshape(-1, 4)
    else:
        tets = corners[:, _KUHN].reshape(-1, 4)
    return clean_tetmesh(nodes, tets, "voxel", {"voxel": float(voxel), "grid": list(occ.shape),
                                                "occupied_voxels": int(ijk.shape[0]), "mirrored": bool(mirrored)})


# ------------------------------------------------------------------------------------ TetGen
def _child_prologue(workdir) -> None:
    """First lines of a worker child process: the parent handles Ctrl-C (a terminal sends it to the child too) and
    ends the child with SIGTERM, so the child ignores SIGINT and dies on SIGTERM without Python's handlers (no
    traceback); its stderr goes to /dev/null and faulthandler is off, so an abort in C++ spills no C-level
    traceback into the terminal (the parent reports the crash); it works in ``workdir``."""
    import faulthandler
    import os
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    faulthandler.disable()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.chdir(workdir)


def _tetgen_worker(conn, v, f, kwargs, workdir) -> None:
    """Child-process body: run TetGen and send (nodes, elems) or an error string through ``conn``
    (:func:`_child_prologue`); ``workdir`` (a temporary directory the parent removes) takes the debug files TetGen
    writes on self-intersections (``_skipped.node/.face``)."""
    try:
        _child_prologue(workdir)
        import tetgen

        out = tetgen.TetGen(v, f).tetrahedralize(**kwargs)
        conn.send(("ok", np.asarray(out[0], np.float64), np.asarray(out[1], np.int64)))
    except BaseException as e:  # noqa: BLE001 - everything must reach the parent
        conn.send(("error", f"{type(e).__name__}: {e}", None))
    finally:
        conn.close()


def _in_child(worker, args: tuple, timeout: float, what: str):
    """Run ``worker(conn, *args, workdir)`` in a child process and return what it sends, (status, a, b). The parent
    waits in a poll that Ctrl-C interrupts (a long C++ call in this process would hold the interrupt until it
    returns: QSlim of a 328k-face mesh, 12 s) and ends the child on the way out. Raises TetrahedralizationError
    when the child takes more than ``timeout`` s or dies."""
    import multiprocessing as mp
    import shutil
    import tempfile

    methods = mp.get_all_start_methods()
    ctx = mp.get_context("fork" if "fork" in methods else "spawn")
    workdir = tempfile.mkdtemp(prefix="physskin_child_")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=worker, args=(child, *args, workdir), daemon=True)
    with warnings.catch_warnings():  # Python >= 3.12 warns about fork() with threads; the child only runs C++
        warnings.simplefilter("ignore", DeprecationWarning)
        proc.start()
    child.close()
    try:
        if not parent.poll(timeout):
            raise TetrahedralizationError(f"{what} did not finish within {timeout:.0f} s")
        return parent.recv()
    except EOFError:
        proc.join(5)
        raise TetrahedralizationError(f"{what} crashed (exit code {proc.exitcode})") from None
    finally:
        if proc.is_alive():
            proc.terminate()
        proc.join(5)
        parent.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _run_tetgen(v: np.ndarray, f: np.ndarray, kwargs: dict, timeout: float) -> Tuple[np.ndarray, np.ndarray]:
    """TetGen in a child process: on self-intersecting input TetGen can corrupt the heap and abort the whole
    interpreter (seen with tetgen 0.8.4 on two overlapping spheres), and quality refinement can run away, so the
    parent survives both and raises TetrahedralizationError instead."""
    status, a, b = _in_child(_tetgen_worker, (v, f, kwargs), timeout, "TetGen")
    if status != "ok":
        raise TetrahedralizationError(f"TetGen failed: {a}")
    return a, b


def _clean_surface(vertices: np.ndarray, faces: np.ndarray):
    """trimesh copy with duplicate vertices merged, degenerate / duplicate faces and unused vertices removed and
    the winding made consistent and outward. Raises ValueError for malformed arrays."""
    import trimesh

    v = np.asarray(vertices, np.float64)
    f = np.asarray(faces, np.int64)
    if v.ndim != 2 or v.shape[1] != 3 or f.ndim != 2 or f.shape[1] != 3 or f.shape[0] == 0:
        raise ValueError(f"need vertices (V, 3) and faces (F, 3), got {v.shape} and {f.shape}")
    if f.min() < 0 or f.max() >= v.shape[0]:
        raise ValueError("face indices out of range")
    if not np.isfinite(v).all():
        raise ValueError("vertices contain NaN or inf")
    m = trimesh.Trimesh(v, f, process=True, validate=True)
    m.remove_unreferenced_vertices()
    trimesh.repair.fix_normals(m, multibody=True)
    return m


#: seconds TetGen may take on a surface before it counts as failed (quality refinement can run away)
TETGEN_TIMEOUT = 120.0


def tetrahedralize_surface(vertices: np.ndarray, faces: np.ndarray, *, target_nodes: int = 3000, quality: bool = True,
                           timeout: float = TETGEN_TIMEOUT) -> TetMesh:
    """Quality tet mesh of the solid bounded by a closed triangle surface, with TetGen (method.md 13).

    The surface is welded and cleaned (trimesh), checked to be watertight, and meshed with a maximum tet volume
    chosen from its enclosed volume so that the mesh has about ``target_nodes`` nodes (up to two corrective re-runs
    while the count is off by more than 25 %; every surface vertex is kept, so a dense surface gives more nodes).
    ``quality`` adds TetGen's radius-edge <= 1.5 and min dihedral >= 10 deg bounds. The largest face-connected
    component is kept, tets are oriented positively, method='tetgen'; ``info`` holds the TetGen settings, the
    surface's enclosed volume and the mesh's, and the counts.

    Args:
        vertices: (V, 3) float, any units. faces: (F, 3) int.
        target_nodes: wanted node count (> 0).
        quality: add the quality bounds above.
        timeout: seconds TetGen may run (it runs in a child process).

    Raises:
        TetrahedralizationError: open or non-manifold surface, TetGen failure / crash / timeout, or a tet volume
            that differs from the surface's enclosed volume by more than 2 % (self-intersections).
        ValueError: malformed arrays or target_nodes < 1.
    """
    if target_nodes < 1:
        raise ValueError(f"target_nodes must be >= 1, got {target_nodes}")
    m = _clean_surface(vertices, faces)
    if not m.is_watertight:
        raise TetrahedralizationError("surface is not watertight (open boundary or non-manifold edges)")
    vol_surf = float(m.volume)
    if not vol_surf > 0:
        raise TetrahedralizationError(f"surface encloses no positive volume ({vol_surf:g})")
    v = np.ascontiguousarray(m.vertices, np.float64)
    f = np.ascontiguousarray(m.faces, np.int32)
    # measured on spheres and blobs: a quality mesh has about 1.4 V / maxvolume nodes (mean tet ~ maxvolume / 5)
    maxvol = 1.4 * vol_surf / float(target_nodes)
    kwargs = dict(plc=True, quality=bool(quality), minratio=1.5, mindihedral=10.0 if quality else 0.0,
                  maxvolume=maxvol, fixedvolume=True, steinerleft=max(100000, 20 * int(target_nodes)))
    nodes, elems = _run_tetgen(v, f, kwargs, timeout)
    runs = 1
    nv = v.shape[0]
    # interior (Steiner) node count scales like 1 / maxvolume; the surface vertices are all kept
    while runs < 3 and abs(np.log(nodes.shape[0] / float(target_nodes))) > np.log(1.25):
        inner = max(nodes.shape[0] - nv, 1)
        want = max(target_nodes - nv, 0.3 * inner)
        if want >= inner and target_nodes < 1.5 * nv:
            break  # too few nodes because the surface alone is about the target: nothing to gain
        kwargs["maxvolume"] *= inner / want
        prev = nodes.shape[0]
        nodes, elems = _run_tetgen(v, f, kwargs, timeout)
        runs += 1
        if abs(nodes.shape[0] - prev) < 0.1 * prev:
            break  # the count is set by the surface's grading (quality bounds), not by the volume bound
    info = {"path": "tetgen", "tetgen": {k: kwargs[k] for k in ("minratio", "mindihedral", "maxvolume")},
            "tetgen_runs": runs, "surface_vertices": int(v.shape[0]), "surface_faces": int(f.shape[0]),
            "surface_volume": vol_surf, "surface_bodies": int(m.body_count)}
    tm = clean_tetmesh(nodes, elems, "tetgen", info)
    raw = float(np.abs(tet_volumes(nodes, elems)).sum())
    tm.info["tet_volume_raw"] = raw
    if abs(raw - vol_surf) > 0.02 * vol_surf:
        raise TetrahedralizationError(f"tet volume {raw:.6g} differs from the enclosed volume {vol_surf:.6g} "
                                      "by more than 2 % (self-intersecting or inconsistently oriented surface?)")
    return tm


# ------------------------------------------------------------------------------------ voxel fill + glue
#: the voxel path glues its occupancy until the largest face-connected component holds this fraction of it
GLUE_MIN_FRACTION = 0.99
#: ... with at most this many one-voxel (3 x 3 x 3 box) dilations
GLUE_MAX_DILATIONS = 2


def _voxel_fill(vertices: np.ndarray, faces: np.ndarray, resolution: int, method: str = "auto", seed: int = 0):
    """Voxels of the solid of a possibly open / multi-part surface: the shell (dense surface samples) is closed
    and filled by :func:`physskin_gs.geometry.interior.solid_from_shell` with ``method`` ('flood', 'vote', or
    'auto': flood unless it leaks), then every shell voxel is kept only if the generalised winding number at its
    centre is > 0.5 (:func:`physskin_gs.geometry.inside.fast_winding_number`; fractional near holes); raw shell voxels
    (those holding surface samples) with no kept voxel among their 26 neighbours are put back, so parts thinner
    than a voxel (whose voxel centres all lie outside) keep a one-voxel layer. Returns (occupancy, origin, voxel
    size, fill method used, number of voxels put back)."""
    from physskin_gs.geometry.inside import fast_winding_number
    from physskin_gs.geometry.interior import VoxelGrid, close_shell, dilate_box, solid_from_shell
    from physskin_gs.geometry.sampling import sample_surface, triangle_areas_normals

    v = np.asarray(vertices, np.float64)
    f = np.asarray(faces, np.int64)
    used = np.unique(f.reshape(-1))
    lo, hi = v[used].min(0), v[used].max(0)
    # pad 3 (+ the glue): the closing needs 2 empty layers, each glue dilation one more
    grid = VoxelGrid.around(lo, hi, int(resolution), pad=3 + GLUE_MAX_DILATIONS)
    area = float(triangle_areas_normals(v, f)[0].sum())
    n = int(np.clip(8.0 * area / grid.voxel_size ** 2, 20_000, 400_000))
    pts, _ = sample_surface(v, f, n, seed=seed)
    shell0 = grid.rasterize(np.concatenate([pts.astype(np.float64), v[used]]))
    solid, how = solid_from_shell(shell0, dilation=1, method=method)
    shell = close_shell(shell0, 1) & solid
    ijk = np.argwhere(shell)
    w = fast_winding_number(v, f, grid.centers(ijk))
    occ = solid.copy()
    occ[tuple(ijk[w <= 0.5].T)] = False
    # parts thinner than a voxel have no voxel centre inside: the trim empties them (an ant's legs); their raw
    # shell voxels farther than one voxel from every kept voxel come back, so every part keeps voxels
    thin = shell0 & ~dilate_box(occ, 1)
    occ |= thin
    return occ, grid.origin, float(grid.voxel_size), how, int(thin.sum())


def _voxel_components(occ: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Face-connected (6-neighbourhood) components of a 3-D bool grid: (labels, same shape, 0 = empty and
    1..n the components; sizes (n,) int64 voxel counts of components 1..n)."""
    from scipy import ndimage

    labels, n = ndimage.label(occ, structure=ndimage.generate_binary_structure(3, 1))
    return labels, np.bincount(labels.reshape(-1), minlength=n + 1)[1:].astype(np.int64)


_OFFSETS6 = np.array([[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]], np.int64)


def _bridge_components(x: np.ndarray, allowed: np.ndarray) -> Tuple[np.ndarray, int]:
    """:func:`_bridge_components_reference`'s result (the same joined set and count, voxel for voxel: a test holds
    them equal), computed on the graph of ``allowed``'s voxels only: each search is one multi-source breadth-first
    search (unweighted Dijkstra from the joined set) over their face adjacency instead of a full-grid dilation per
    layer. Returns (joined set, bridge voxels added)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import dijkstra

    labels, sizes = _voxel_components(x)
    shape = np.asarray(x.shape)
    node = np.flatnonzero(allowed.ravel() | (labels.ravel() > 0))  # [V] flat indices of the graph's voxels
    V = node.size
    where = np.full(x.size, -1, np.int64)
    where[node] = np.arange(V)
    coords = np.stack(np.unravel_index(node, x.shape), axis=1)  # [V, 3]
    strides = np.array([x.shape[1] * x.shape[2], x.shape[2], 1], np.int64)
    src, dst = [], []
    for a in range(3):  # face neighbours +1 along each axis (the graph is symmetric)
        ok = coords[:, a] + 1 < shape[a]
        nb = where[node[ok] + strides[a]]
        good = nb >= 0
        src.append(np.flatnonzero(ok)[good])
        dst.append(nb[good])
    src, dst = np.concatenate(src), np.concatenate(dst)
    ok = allowed.ravel()[node]  # [V] a search may step into a voxel of ``allowed`` only (the reference's dilation)
    fwd, bwd = ok[dst], ok[src]
    graph = coo_matrix((np.ones(int(fwd.sum() + bwd.sum())), (np.r_[src[fwd], dst[bwd]], np.r_[dst[fwd], src[bwd]])),
                       shape=(V, V)).tocsr()
    lab = labels.ravel()[node]  # [V]
    joined = lab == int(np.argmax(sizes)) + 1
    added = 0
    while True:
        pending = (lab > 0) & ~joined
        if not pending.any():
            break
        dist = dijkstra(graph, directed=True, indices=np.flatnonzero(joined), unweighted=True,
                        min_only=True)  # [V] layers from the joined set, inf: not reached
        reach = dist[pending]
        if not np.isfinite(reach).any():
            break  # the rest is not reachable inside ``allowed``
        t = reach[np.isfinite(reach)].min()
        hit = pending & (dist == t)
        for lv in np.unique(lab[hit]):
            v = int(np.flatnonzero(hit & (lab == lv))[0])  # the first in the grid's C order, as the reference
            joined |= lab == lv
            while dist[v] > 1:  # walk down the layers to the joined set, neighbours in the reference's order
                for off in _OFFSETS6:
                    q = coords[v] + off
                    if np.all(q >= 0) and np.all(q < shape):
                        w = int(where[int(q @ strides)])
                        if w >= 0 and dist[w] == dist[v] - 1:
                            v = w
                            break
                if not joined[v]:
                    joined[v] = True
                    added += 1
    out = np.zeros(x.size, bool)
    out[node[joined]] = True
    return out.reshape(x.shape), added


def _bridge_components_reference(x: np.ndarray, allowed: np.ndarray) -> Tuple[np.ndarray, int]:
    """Join the face-connected components of ``x`` into its largest one by one-voxel-wide paths of voxels of
    ``allowed`` (a superset of x): from the joined set, a breadth-first search over face neighbours inside
    ``allowed`` grows until it reaches other components; each reached component is joined along one shortest
    path (traced back through the search's layers), and the search restarts from the grown set (Prim's order:
    the nearest part joins first, so a chain of fragments joins link by link). Components that ``allowed`` does not
    connect stay out. Returns (joined set, bridge voxels added).

    The plain reference of :func:`_bridge_components`: each search grows by full-grid dilations, one per layer,
    and restarts after each join, which on a scattered cloud (hundreds of fragments in a large, sparse grid) took
    over a minute."""
    from scipy import ndimage

    cross = ndimage.generate_binary_structure(3, 1)
    labels, sizes = _voxel_components(x)
    joined = labels == int(np.argmax(sizes)) + 1
    added = 0
    shape = np.asarray(x.shape)
    while True:
        pending = (labels > 0) & ~joined
        if not pending.any():
            break
        dist = np.full(x.shape, -1, np.int32)
        dist[joined] = 0
        front, t, hit = joined, 0, None
        while hit is None:
            t += 1
            nxt = ndimage.binary_dilation(front, structure=cross) & allowed & (dist < 0)
            if not nxt.any():
                break
            dist[nxt] = t
            if (nxt & pending).any():
                hit = nxt & pending
            front = nxt
        if hit is None:
            break  # the rest is not reachable inside ``allowed``
        for lab in np.unique(labels[hit]):
            p = np.argwhere(hit & (labels == lab))[0]
            joined |= labels == lab
            while dist[tuple(p)] > 1:  # walk down the layers to the joined set
                for q in p[None] + _OFFSETS6:
                    if np.all(q >= 0) and np.all(q < shape) and dist[tuple(q)] == dist[tuple(p)] - 1:
                        p = q
                        break
                if not joined[tuple(p)]:
                    joined[tuple(p)] = True
                    added += 1
    return joined, added


def glue_occupancy(occupancy: np.ndarray, min_fraction: float = GLUE_MIN_FRACTION,
                   max_dilations: int = GLUE_MAX_DILATIONS, shave: bool = True) -> Tuple[np.ndarray, dict]:
    """Join the nearly touching parts of a voxel occupancy, then keep its largest face-connected component.

    Voxels (and so their Kuhn tets, see :func:`voxel_tetmesh`) are connected only through a shared face; parts
    that meet at an edge or a corner of a voxel, or that are a voxel or two apart, would be dropped by keeping
    the largest component. While the largest face-connected component holds less than ``min_fraction`` of the
    occupied voxels, the occupancy is dilated by one voxel with the 3 x 3 x 3 box (a voxel becomes occupied when
    one of its 26 neighbours is, as in the closing of the volume-point fill,
    :func:`physskin_gs.geometry.interior.solid_from_shell`), at most ``max_dilations`` times; the largest
    face-connected component L of the dilated grid decides which parts belong to the object.

    With ``shave`` (the default) the dilation's extra layers are taken off again: the result is the
    morphological closing (the same number of box erosions, never removing an input voxel) inside L, which
    fills the thin gaps between nearly parallel faces, plus one-voxel-wide shortest paths inside L that join the
    pieces the closing leaves apart (point-like contacts: a leg tip near a body, a chain of voxels touching by
    edges); so the parts join without getting fatter. Without ``shave`` the result is L itself (every part one
    voxel thicker per dilation).

    Args:
        occupancy: (R0, R1, R2) bool grid (it needs ``max_dilations`` empty layers at its border for the
            dilations not to be clipped; outside the grid counts as empty).
        min_fraction: wanted share of the largest component, in (0, 1].
        max_dilations: most dilations (>= 0).
        shave: take the dilation layers off again (see above).

    Returns:
        (kept, info): kept (R0, R1, R2) bool, one face-connected component; info with ``dilations`` (how many
        were needed), ``components_before`` / ``components_after`` (face-connected component counts of the input
        and of the glued grid: the dilated one, or with ``shave`` the closing plus the bridges),
        ``largest_fraction_before`` (voxel share of the input's largest component), ``kept_volume_fraction``
        (share of the glued grid's voxels that are kept), ``original_covered_fraction`` (share of the input's
        voxels that are kept), ``voxels_before`` / ``voxels_kept``, ``bridge_voxels`` (path voxels added, shave
        only) and ``shave``.

    Raises:
        ValueError: a grid that is not 3-D, no occupied voxel, min_fraction outside (0, 1] or max_dilations < 0.
    """
    from scipy import ndimage

    occ = np.asarray(occupancy, dtype=bool)
    if occ.ndim != 3:
        raise ValueError(f"occupancy must be a 3-D bool grid, got shape {occ.shape}")
    if not 0.0 < float(min_fraction) <= 1.0 or int(max_dilations) < 0:
        raise ValueError(f"need 0 < min_fraction <= 1 and max_dilations >= 0, got {min_fraction}, {max_dilations}")
    total0 = int(occ.sum())
    if total0 == 0:
        raise ValueError("occupancy grid has no occupied voxel")
    labels, sizes = _voxel_components(occ)
    n0, frac0 = int(sizes.size), float(sizes.max() / total0)
    cur, frac, k = occ, frac0, 0
    box = np.ones((3, 3, 3), bool)
    while frac < min_fraction and k < int(max_dilations):
        cur = ndimage.binary_dilation(cur, structure=box)
        k += 1
        labels, sizes = _voxel_components(cur)
        frac = float(sizes.max() / sizes.sum())
    big = labels == int(np.argmax(sizes)) + 1
    info = {"dilations": k, "components_before": n0, "shave": bool(shave and k > 0)}
    if shave and k > 0:
        closed = (ndimage.binary_erosion(cur, structure=box, iterations=k, border_value=0) | occ) & big
        kept, added = _bridge_components(closed, big)
        glued = closed | occ
        glued[kept] = True
        _, sizes_g = _voxel_components(glued)
        n_after, frac = int(sizes_g.size), float(kept.sum() / glued.sum())
        info["bridge_voxels"] = int(added)
    else:
        kept, n_after = big, int(sizes.size)
    info.update(components_after=n_after, largest_fraction_before=frac0, kept_volume_fraction=frac,
                original_covered_fraction=float((kept & occ).sum() / total0), voxels_before=total0,
                voxels_kept=int(kept.sum()))
    return kept, info


def _corner_count(occ: np.ndarray) -> int:
    """Distinct voxel corners of the occupied voxels: the node count of :func:`voxel_tetmesh` on ``occ``."""
    s0, s1, s2 = occ.shape
    corners = np.zeros((s0 + 1, s1 + 1, s2 + 1), bool)
    for di in (0, 1):
        for dj in (0, 1):
            for dk in (0, 1):
                corners[di:di + s0, dj:dj + s1, dk:dk + s2] |= occ
    return int(corners.sum())


def _glued_fill(v: np.ndarray, f: np.ndarray, resolution: int, method: str, glue: bool):
    """(kept occupancy, origin, voxel size, fill used, glue info or None) of :func:`voxel_fill_tetmesh`."""
    occ, origin, h, how, thin = _voxel_fill(v, f, resolution, method=method)
    if not occ.any():
        raise ValueError("the voxel fill of the surface is empty (flat or degenerate surface)")
    if not glue:
        return occ, origin, h, how, thin, None
    kept, info = glue_occupancy(occ)
    return kept, origin, h, how, thin, info


def voxel_fill_tetmesh(vertices: np.ndarray, faces: np.ndarray, *, resolution: int, method: str = "auto",
                       glue: bool = True) -> TetMesh:
    """Tet mesh of the voxelised solid of a surface at a fixed resolution (the voxel path of
    :func:`tetmesh_for_shape`).

    The surface is welded and cleaned, sampled into a shell of ``resolution`` voxels along the longest side of
    its bounding box (voxel size = that side / resolution), closed, filled (``method``: 'flood' = exterior flood
    fill, exact for closed surfaces; 'vote' = axis vote, which also fills deep concavities; 'auto' = flood unless
    it leaks), trimmed to shell voxels whose centre has a winding number > 0.5, glued by
    :func:`glue_occupancy` (when ``glue``) and split into Kuhn tets by :func:`voxel_tetmesh` (which keeps the
    largest face-connected component). method='voxel'; ``info`` adds ``fill`` (the fill used), ``resolution``
    and, when glued, ``glue`` (the :func:`glue_occupancy` facts).

    Args:
        vertices: (V, 3) float, any units (the voxel size and the nodes are in the same units).
        faces: (F, 3) int.
        resolution: voxels along the longest side, 4..256.

    Raises:
        ValueError: malformed arrays, a flat surface, a resolution outside 4..256, an unknown method or an empty
            fill.
    """
    if not 4 <= int(resolution) <= 256:
        raise ValueError(f"resolution must be in 4..256, got {resolution}")
    if method not in ("auto", "flood", "vote"):
        raise ValueError(f"unknown fill method {method!r}; expected 'auto', 'flood' or 'vote'")
    m = _clean_surface(vertices, faces)
    v, f = _check_not_flat(m)
    return _voxel_result(v, f, _glued_fill(v, f, int(resolution), method, glue), int(resolution))


def _check_not_flat(m) -> Tuple[np.ndarray, np.ndarray]:
    v, f = np.asarray(m.vertices, np.float64), np.asarray(m.faces, np.int64)
    ext = np.ptp(v, axis=0)
    if not ext.min() > 1e-6 * ext.max():
        raise ValueError(f"surface is flat (bounding box {ext.tolist()}): it encloses no volume to mesh")
    return v, f


def _voxel_result(v, f, fill, resolution: int) -> TetMesh:
    occ, origin, h, how, thin, glue = fill
    tm = voxel_tetmesh(occ, origin, h)
    tm.info.update(fill=how, resolution=int(resolution), thin_voxels_restored=thin)
    if glue is not None:
        tm.info["glue"] = glue
    return tm


def _union_bodies(parts):
    """Boolean union (manifold3d) of the bodies (trimeshes) of a cleaned multi-body surface: (union trimesh,
    None), or (None, why) when a body is open or the union fails or is empty."""
    import trimesh

    if not all(p.is_watertight for p in parts):
        return None, "a body is open, no boolean union"
    try:
        u = trimesh.boolean.union(parts, engine="manifold")
    except Exception as e:  # noqa: BLE001 - any failure of the boolean engine sends us to the voxel path
        return None, f"boolean union failed ({type(e).__name__}: {e})"
    if u is None or len(u.faces) == 0 or not float(u.volume) > 0:
        return None, "boolean union is empty"
    return u, None


def _bodies(m) -> list:
    """Face-connected pieces of a trimesh (two faces are connected through a shared edge; a shared vertex does
    not join two bodies, unlike ``Trimesh.body_count``)."""
    return list(m.split(only_watertight=False))


# ------------------------------------------------------------------------------------ thin shapes
#: A principal extent of a shape below THIN_FACTOR x (stretched volume / target_nodes)^(1/3) (about one edge
#: length of a quality mesh with that many nodes) is stretched up to it before meshing (:func:`thin_shape_stretch`)
THIN_FACTOR = 1.25
#: ... when some axis needs at least this stretch (a milder one costs the quality mesh few nodes)
THIN_MIN_STRETCH = 1.5


@dataclass
class ThinStretch:
    """The affine map x' = center + A (x - center), A = axes^T diag(factors) axes (symmetric positive
    definite, det = prod(factors) > 0, so tets keep their orientation), that makes a thin shape about as thick as
    a quality mesh's edge (:func:`thin_shape_stretch`).

    center: (3,) float64, in the vertices' units. axes: (3, 3) float64, rows the unit principal axes of the
    surface (the identity for an axis-aligned shape). factors: (3,) float64 >= 1, the stretch along each axis.
    extents: (3,) float64, the surface's extents along the axes before the stretch (vertices' units)."""

    center: np.ndarray
    axes: np.ndarray
    factors: np.ndarray
    extents: np.ndarray

    def _apply(self, x: np.ndarray, f: np.ndarray) -> np.ndarray:
        x = np.asarray(x, np.float64)
        a = self.axes.T @ np.diag(f) @ self.axes
        return self.center[None] + (x - self.center[None]) @ a  # a is symmetric

    def forward(self, x: np.ndarray) -> np.ndarray:
        """(n, 3) points x (n, 3) mapped into the stretched frame."""
        return self._apply(x, self.factors)

    def inverse(self, x: np.ndarray) -> np.ndarray:
        """(n, 3) points x (n, 3) of the stretched frame mapped back."""
        return self._apply(x, 1.0 / self.factors)

    @property
    def volume_factor(self) -> float:
        """prod(factors): stretched volumes / original volumes."""
        return float(np.prod(self.factors))


def _principal_axes(v: np.ndarray, f: np.ndarray) -> np.ndarray:
    """(3, 3) rows: the principal axes of the surface's area distribution (exact second moments of the
    triangles), snapped to the identity when the covariance is diagonal to 1e-9 (an axis-aligned shape)."""
    tri = v[f]  # [F, 3, 3]
    area = 0.5 * np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]), axis=1)  # [F]
    tot = float(area.sum())
    if not tot > 0:
        return np.eye(3)
    mean = (area[:, None] * tri.mean(1)).sum(0) / tot
    d = tri - mean[None, None]
    ssum = d.sum(1)  # [F, 3]
    # int over a triangle of x x^T dA = A / 12 (sum_i v_i v_i^T + (sum_i v_i)(sum_i v_i)^T)
    cov = (area[:, None, None] * (np.einsum("fvi,fvj->fij", d, d) + ssum[:, :, None] * ssum[:, None, :])).sum(0)
    cov /= 12.0 * tot
    off = np.abs(cov - np.diag(np.diag(cov))).max()
    if off <= 1e-9 * np.abs(np.diag(cov)).max():
        return np.eye(3)
    _, vec = np.linalg.eigh(cov)
    return np.ascontiguousarray(vec.T)


def thin_shape_stretch(vertices: np.ndarray, faces: np.ndarray, target_nodes: int, volume: float | None = None, *,
                       factor: float = THIN_FACTOR, min_stretch: float = THIN_MIN_STRETCH) -> ThinStretch | None:
    """The stretch that lets a quality mesher put about ``target_nodes`` nodes into a thin shape, or None.

    A quality tet mesh (bounded radius-edge ratio) of a plate of thickness t and side L needs edges about t
    long, so (L / t)^2 nodes whatever is asked (a 1 x 1 x 1e-4 plate: TetGen stopped at 100,000 Steiner points
    and the FEM took minutes). Meshing the shape stretched along its thin principal axes and mapping the nodes
    back gives the same connectivity with flat tets and about the asked-for count: at least 2 node layers
    through the thickness (a plate gets them on its two faces, a rod 4 nodes per cross-section).

    The axes are the principal axes of the surface's area (:func:`_principal_axes`), so a rotated plate is
    found too; the extents e_a are the vertices' ranges along them. With g = (V prod(s) / target_nodes)^(1/3)
    (about a quality mesh's edge in the stretched frame, V the enclosed volume), the factors are the fixed point
    of s_a = max(1, factor g / e_a) (at most max(e) / e_a). Shapes that are thin only locally (a curved shell,
    a thin fin on a body) have no thin principal extent and are not stretched.

    Args:
        vertices: (V, 3) float, any units. faces: (F, 3) int (a cleaned surface).
        target_nodes: wanted node count (>= 1).
        volume: the enclosed volume in the vertices' units cubed (> 0), or None: half the principal box.
        factor: the thickness wanted, in units of g (> 0).
        min_stretch: None is returned unless some factor reaches this (>= 1).

    Returns:
        :class:`ThinStretch`, or None for a shape that is not thin, or is flat (an extent <= 1e-6 of the
        largest: nothing to mesh, the callers reject it).

    Raises:
        ValueError: target_nodes < 1, factor <= 0 or min_stretch < 1.
    """
    if target_nodes < 1 or not factor > 0 or not min_stretch >= 1:
        raise ValueError(f"need target_nodes >= 1, factor > 0, min_stretch >= 1; got {target_nodes}, {factor}, "
                         f"{min_stretch}")
    v = np.asarray(vertices, np.float64)
    f = np.asarray(faces, np.int64)
    used = v[np.unique(f.reshape(-1))]
    axes = _principal_axes(v, f)
    proj = used @ axes.T  # [V, 3]
    lo, hi = proj.min(0), proj.max(0)
    ext = hi - lo
    if not ext.min() > 1e-6 * ext.max():
        return None
    vol = float(volume) if volume is not None and volume > 0 else 0.5 * float(np.prod(ext))
    s = np.ones(3)
    for _ in range(100):  # a contraction (g ~ s^(1/3) per thin axis): converges in a few dozen steps
        g = (vol * np.prod(s) / float(target_nodes)) ** (1.0 / 3.0)
        s_new = np.clip(factor * g / ext, 1.0, ext.max() / ext)
        if np.allclose(s_new, s, rtol=1e-10, atol=0):
            break
        s = s_new
    if s.max() < min_stretch:
        return None
    center = (0.5 * (lo + hi)) @ axes
    return ThinStretch(center=center, axes=axes, factors=s, extents=ext)


def _unstretch(tm: TetMesh, st: ThinStretch) -> TetMesh:
    """``tm`` (meshed in the stretched frame) mapped back: nodes, volumes and qualities in the original frame,
    the stretched frame's facts under ``info['stretch']``."""
    nodes = st.inverse(tm.nodes)
    info = dict(tm.info)
    k = st.volume_factor
    vol = tet_volumes(nodes, tm.tets)
    q = _edge_quality(nodes, tm.tets, vol)
    for key in ("surface_volume", "tet_volume_raw"):
        if key in info:
            info[key] = float(info[key]) / k
    if isinstance(info.get("union"), dict):
        info["union"] = {kk: (float(vv) / k if kk in ("volume_in", "volume_out") else vv)
                         for kk, vv in info["union"].items()}
    thin = int(np.argmin(st.extents))
    info["stretch"] = {
        "factors": st.factors.tolist(), "axes": st.axes.tolist(), "center": st.center.tolist(),
        "extents": st.extents.tolist(), "quality_min": info.get("quality_min"),
        "quality_mean": info.get("quality_mean"),
        "note": "TetGen maxvolume / voxel size and the stretch's quality figures are in the stretched frame"}
    info.update(volume=float(vol.sum()), quality_min=float(q.min()), quality_mean=float(q.mean()))
    info["path_reason"] = (f"{info.get('path_reason', '')}; thin shape (extent {st.extents[thin]:.3g} of "
                           f"{st.extents.max():.3g}): meshed stretched x{st.factors.max():.4g} along its thin "
                           "principal axes, then mapped back")
    return TetMesh(nodes, tm.tets, tm.method, info)


def tetmesh_for_shape(vertices: np.ndarray, faces: np.ndarray, *, target_nodes: int = 3000,
                      max_surface_faces: Optional[int] = None) -> TetMesh:
    """Tet mesh of a surface for the FEM reference, about ``target_nodes`` nodes, one face-connected piece
    that covers the whole object (the skinning bases see every part of it, so the FEM must too).

    Paths, in order (``info['path']`` names the one taken, ``info['path_reason']`` says why):

    * 'tetgen': a one-body surface meshed by :func:`tetrahedralize_surface`.
    * 'union+tetgen': a surface of several closed bodies is first merged by a boolean union (manifold3d); when
      that is one watertight body, TetGen meshes it (``info['union']`` has the body counts and volumes).
    * 'voxel': when the surface is open or non-manifold, the union fails or leaves several disjoint bodies, TetGen
      fails, or its mesh keeps < 99 % of the volume in one piece. The solid is voxelised by
      :func:`voxel_fill_tetmesh` (of the union when there is one): the exterior flood fill when the surface (so
      every body) is watertight, else 'auto' (flood unless it leaks, then the axis vote); the occupancy is glued
      by :func:`glue_occupancy` (up to 2 one-voxel box dilations while the largest face-connected component holds
      < 99 % of the voxels decide which parts belong together; the extra layers are shaved off again, leaving
      the closing plus one-voxel bridges) and split into Kuhn tets. The resolution starts from a 24-voxel pass
      and is re-chosen (up to 3 times) from the measured node counts until they are within 15 % of
      ``target_nodes``; the closest is kept. ``info['tetgen_error']`` holds the reason TetGen was not used,
      ``info['fill']`` the fill, ``info['glue']`` the glue facts, ``info['resolution_tries']`` [resolution,
      nodes] pairs.

    **Thin shapes** (:func:`thin_shape_stretch`: a principal extent below about one edge length of a quality mesh
    with ``target_nodes`` nodes, e.g. a 1 x 1 x 1e-4 plate or a 1 x 1e-3 x 1e-3 rod) go through the same paths
    stretched along their thin principal axes; the nodes are mapped back, so the tets are flat (quality figures
    in ``info`` are of the original frame, ``info['stretch']`` has the factors, axes and the stretched frame's
    quality) and the count stays near ``target_nodes`` (measured 0.68-1.04x for such plates and rods at 300 and
    3000, 1.72x for a rotated rod at 300; without the stretch TetGen's quality bounds need about
    (size / thickness)^2 nodes: 100,008 for the plate, TetGen's Steiner cap, at either target). Such a mesh
    has few node layers through the thickness (2 or 3), so P1 tets lock in bending there: the FEM is a valid,
    stiffer-than-Kirchhoff discretisation, not a converged thin-plate solution.

    **Detailed surfaces**: TetGen keeps every surface vertex and adds interior nodes to its quality bounds, so a
    surface of 26k vertices (a 52k-face statue) becomes 126k nodes in 24 s. With ``max_surface_faces`` a
    watertight surface with more faces is first simplified to that many (libigl's QSlim edge collapses, blocked where
    they would make the surface intersect itself; path 'qslim+tetgen' or 'qslim+union+tetgen', ``info['qslim']``
    has the face counts and the volume change): the statue at 6000 faces gives 18k nodes in 6 s. If TetGen fails
    on the simplified surface (or takes more than ``SIMPLIFIED_TETGEN_TIMEOUT``), it is simplified to twice as many
    faces (``info['qslim']['retry']``) and, failing that too, the exact surface is meshed as without the limit
    (each ``tetgen_error`` says why). The FEM reference leaves it unset (the exact
    surface, however fine).

    Args:
        vertices: (V, 3) float, any units. faces: (F, 3) int.
        target_nodes: wanted node count (> 0).
        max_surface_faces: most surface faces for the TetGen paths, above it the surface is simplified (None:
            no limit; > 0).

    Raises:
        ValueError: malformed arrays, target_nodes < 1, a flat surface or an empty fill.
    """
    if target_nodes < 1:
        raise ValueError(f"target_nodes must be >= 1, got {target_nodes}")
    m = _clean_surface(vertices, faces)
    st = thin_shape_stretch(np.asarray(m.vertices), np.asarray(m.faces), target_nodes,
                            volume=abs(float(m.volume)) if m.is_watertight else None)
    if st is None:
        return _tetmesh_for_clean(m, target_nodes, max_surface_faces)
    import trimesh

    ms = trimesh.Trimesh(st.forward(np.asarray(m.vertices)), np.asarray(m.faces), process=False)
    return _unstretch(_tetmesh_for_clean(ms, target_nodes, max_surface_faces), st)


#: seconds TetGen may take on a simplified surface before the next attempt (it finishes in 1-5 s at 6000 faces;
#: on a simplified union of two overlapping boxes and on a normalised PartNet chair it stalled)
SIMPLIFIED_TETGEN_TIMEOUT = 10.0


def _qslim_worker(conn, v, f, max_faces, workdir) -> None:
    """Child-process body of :func:`_simplified`: libigl's QSlim, (vertices, faces) or an error string sent back."""
    try:
        _child_prologue(workdir)
        import igl

        out = igl.qslim(np.asfortranarray(v), np.asfortranarray(f), int(max_faces), True)
        conn.send(("ok", np.asarray(out[0], np.float64), np.asarray(out[1], np.int64)))
    except BaseException as e:  # noqa: BLE001 - everything must reach the parent
        conn.send(("error", f"{type(e).__name__}: {e}", None))
    finally:
        conn.close()


#: seconds QSlim may take (a 328k-face surface: about 12 s) before the exact surface is meshed instead
QSLIM_TIMEOUT = 60.0


def _simplified(surface, max_faces: int):
    """(simplified trimesh, facts) of a watertight surface with more than ``max_faces`` faces: libigl's QSlim
    down to ``max_faces`` with self-intersections blocked, in a child process (Ctrl-C stops it; at most
    ``QSLIM_TIMEOUT`` s); None (and the reason in the facts) when it fails or the result is not watertight."""
    import trimesh

    v = np.asarray(surface.vertices, dtype=np.float64)
    f = np.asarray(surface.faces, dtype=np.int32)
    facts = {"faces_in": int(f.shape[0])}
    try:
        status, a, b = _in_child(_qslim_worker, (v, f, int(max_faces)), QSLIM_TIMEOUT, "QSlim")
    except TetrahedralizationError as e:
        return None, dict(facts, error=str(e))
    if status != "ok":
        return None, dict(facts, error=f"QSlim failed: {a}")
    s = trimesh.Trimesh(a, b, process=False)
    if not s.is_watertight or s.faces.shape[0] == 0:
        return None, dict(facts, error="simplified surface is not watertight")
    return s, dict(facts, faces_out=int(s.faces.shape[0]),
                   volume_ratio=float(abs(s.volume) / max(abs(float(surface.volume)), 1e-300)))


def _tetmesh_for_clean(m, target_nodes: int, max_surface_faces: Optional[int] = None) -> TetMesh:
    """:func:`tetmesh_for_shape` on a cleaned trimesh ``m`` (no stretch)."""
    surf, path, extra = m, "tetgen", {}
    candidate = m if m.is_watertight else None
    reason = "surface is not watertight (open boundary or non-manifold edges)"
    parts = _bodies(m)
    if len(parts) > 1 and m.is_watertight:  # several closed bodies (an open one cannot take part in a union)
        u, why = _union_bodies(parts)
        extra["union"] = {"bodies_in": len(parts), "volume_in": float(m.volume)}
        if u is None:
            extra["union"]["error"] = why
            reason = f"{len(parts)} bodies, {why}"
            candidate = None
        else:
            surf = u
            n_out = len(_bodies(u))
            extra["union"].update(bodies_out=n_out, volume_out=float(u.volume), watertight=bool(u.is_watertight))
            if n_out == 1 and u.is_watertight:
                candidate, path = u, "union+tetgen"
            else:
                candidate = None
                reason = (f"boolean union of {len(parts)} bodies leaves {n_out} disjoint bodies"
                          if u.is_watertight else "boolean union is not watertight")

    def attempts():
        """(surface, path, TetGen timeout): the surface simplified to max_surface_faces, then to twice as many
        (TetGen may find the first self-intersecting or fail on it; a PartNet chair meshed at 12000 faces), then
        the exact surface; each simplification only when the one before failed."""
        if candidate is None:
            return
        if max_surface_faces is not None:
            for k, faces in enumerate((max_surface_faces, 2 * max_surface_faces)):
                if len(candidate.faces) <= faces:
                    break
                simple, facts = _simplified(candidate, faces)
                if k == 0:
                    extra["qslim"] = facts
                else:
                    extra["qslim"]["retry"] = facts
                if simple is not None:
                    yield simple, "qslim+" + path, SIMPLIFIED_TETGEN_TIMEOUT, facts
        yield candidate, path, TETGEN_TIMEOUT, None

    for surface, how, timeout, facts in attempts():
        try:
            tm = tetrahedralize_surface(np.asarray(surface.vertices), np.asarray(surface.faces),
                                        target_nodes=target_nodes, timeout=timeout)
            if tm.info["kept_volume_fraction"] >= GLUE_MIN_FRACTION:
                why = ("one watertight body" if "union" not in how else
                       f"boolean union of {len(parts)} bodies is one watertight body")
                if facts is not None:
                    why += f", simplified from {facts['faces_in']} to {facts['faces_out']} faces"
                tm.info.update(extra, path=how, path_reason=why)
                return tm
            reason = (f"TetGen mesh has {tm.info['components']} pieces, the largest holds "
                      f"{tm.info['kept_volume_fraction']:.1%} of the volume")
        except TetrahedralizationError as e:
            reason = str(e) if "union" not in how else f"union meshed, but {e}"
        if facts is not None:  # TetGen can fail (or stall) on a simplified surface: the next attempt
            facts["tetgen_error"] = reason
    # ---- voxel path
    v, f = _check_not_flat(surf)
    method = "flood" if surf.is_watertight else "auto"
    tries, fills = [], {}
    r = 24
    for _ in range(4):
        fill = _glued_fill(v, f, r, method, True)
        n = _corner_count(fill[0])
        tries.append([r, n])
        fills[r] = fill
        if abs(np.log(n / float(target_nodes))) < np.log(1.15):
            break
        e = 3.0  # nodes ~ resolution^3 for a solid; thin parts and the glue's layer grow slower
        if len(tries) > 1 and tries[-2][0] != r and tries[-2][1] != n:
            e = float(np.clip(np.log(n / tries[-2][1]) / np.log(r / tries[-2][0]), 1.0, 3.0))
        r_new = int(np.clip(round(r * (target_nodes / float(n)) ** (1.0 / e)), 6, 128))
        if r_new in fills:
            break
        r = r_new
    r_best, _ = min(tries, key=lambda t: abs(np.log(t[1] / float(target_nodes))))
    tm = _voxel_result(v, f, fills[r_best], r_best)
    tm.info.update(extra, path="voxel", tetgen_error=reason, resolution_tries=tries,
                   path_reason=f"voxel fill ({tm.info['fill']}): {reason}")
    return tm
