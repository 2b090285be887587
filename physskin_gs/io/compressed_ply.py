"""PlayCanvas / SuperSplat compressed PLY decoder and encoder (formats.md section 3).

Elements: ``chunk`` (one row of float32 bounds per 256 splats: position min/max, log-scale min/max and
optionally colour min/max), ``vertex`` (four uint32: packed_position, packed_rotation, packed_scale,
packed_color), optional ``sh`` (uchar ``f_rest_*``, channel-major like INRIA). Splat i uses chunk i // 256.

- :func:`load_compressed_ply`: decode to raw INRIA values.
- :func:`save_compressed_ply`: encode raw INRIA values (round-to-nearest quantisation, header as SuperSplat /
  playcanvas splat-transform write it); :func:`morton_order` gives the spatially coherent row order those tools
  write (much tighter chunk bounds, so much smaller quantisation error).
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch

from physskin_gs.errors import OptionError, SceneFormatError
from physskin_gs.io._shared import as_float32, check_output, sigmoid64
from physskin_gs.io.inria_ply import rest_names, sh_degree_from_rest_count, write_atomic
from physskin_gs.io.ply_header import PlyHeader, read_elements, read_ply_header, up_comment, up_from_comments, warn
from physskin_gs.io.splat import ALPHA_EPS
from physskin_gs.scene import C0, GaussianScene

CHUNK_SIZE = 256
CHUNK_REQUIRED = (
    "min_x", "min_y", "min_z", "max_x", "max_y", "max_z",
    "min_scale_x", "min_scale_y", "min_scale_z", "max_scale_x", "max_scale_y", "max_scale_z",
)
CHUNK_COLOR = ("min_r", "min_g", "min_b", "max_r", "max_g", "max_b")
VERTEX_REQUIRED = ("packed_position", "packed_rotation", "packed_scale", "packed_color")


def unorm(v: np.ndarray, bits: int) -> np.ndarray:
    """``(v & (2^bits - 1)) / (2^bits - 1)`` as float32 (v: uint32 array already shifted)."""
    m = (1 << bits) - 1
    return ((v & m).astype(np.float32) / np.float32(m)).astype(np.float32)


def unpack_111011(p: np.ndarray) -> np.ndarray:
    """(N,) uint32 -> (N, 3) float32 in [0, 1]: x = bits 21-31, y = bits 11-20, z = bits 0-10."""
    return np.stack([unorm(p >> 21, 11), unorm(p >> 11, 10), unorm(p, 11)], axis=1)


def unpack_8888(p: np.ndarray) -> np.ndarray:
    """(N,) uint32 -> (N, 4) float32 in [0, 1]: R = bits 24-31, G = 16-23, B = 8-15, A = 0-7."""
    return np.stack([unorm(p >> 24, 8), unorm(p >> 16, 8), unorm(p >> 8, 8), unorm(p, 8)], axis=1)


def unpack_rotation(p: np.ndarray) -> np.ndarray:
    """(N,) uint32 "smallest three" quaternions -> (N, 4) float32 unit wxyz.

    Bits 30-31 give the index of the largest component (0 = w); the other three, in order, are 10-bit values
    at bits 20-29, 10-19, 0-9 decoded as ``(unorm - 0.5) sqrt(2)``; the largest is ``sqrt(1 - a^2 - b^2 - c^2)``.
    """
    n = len(p)
    abc = np.stack([unorm(p >> 20, 10), unorm(p >> 10, 10), unorm(p, 10)], axis=1)
    abc = (abc - np.float32(0.5)) * np.float32(math.sqrt(2.0))  # [N, 3]
    m = np.sqrt(np.maximum(0.0, 1.0 - (abc * abc).sum(axis=1))).astype(np.float32)  # [N]
    largest = (p >> 30).astype(np.int64)  # [N] in 0..3
    # slot order of the three small components for each value of `largest`
    others = np.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]], dtype=np.int64)[largest]  # [N, 3]
    q = np.empty((n, 4), dtype=np.float32)
    rows = np.arange(n)
    q[rows, largest] = m
    q[rows[:, None], others] = abc
    return q


def _lerp(lo: np.ndarray, hi: np.ndarray, t: np.ndarray) -> np.ndarray:
    return (lo + (hi - lo) * t).astype(np.float32)


def check_compressed_header(header: PlyHeader) -> None:
    """Check a compressed-PLY header before any data is read (formats.md 3).

    Raises:
        SceneFormatError: missing ``chunk``/``vertex`` element or required property, zero splats, a chunk
            table whose length is not ceil(N / 256), or an ``sh`` element whose row count differs from N.
    """
    path = header.path
    chunk, vertex = header.element("chunk"), header.element("vertex")
    if chunk is None or vertex is None:
        raise SceneFormatError(f"{path}: compressed PLY needs 'chunk' and 'vertex' elements")
    miss = [n for n in CHUNK_REQUIRED if n not in chunk.names]
    if miss:
        raise SceneFormatError(f"{path}: compressed PLY chunk element is missing {', '.join(miss)}")
    miss = [n for n in VERTEX_REQUIRED if n not in vertex.names]
    if miss:
        raise SceneFormatError(f"{path}: compressed PLY vertex element is missing {', '.join(miss)}")
    if vertex.count == 0:
        raise SceneFormatError(f"{path}: the compressed PLY holds no splats (element vertex 0)")
    need = -(-vertex.count // CHUNK_SIZE)
    if chunk.count < need:
        raise SceneFormatError(
            f"{path}: compressed PLY chunk table too short: {chunk.count} chunks for {vertex.count} splats "
            f"(need ceil({vertex.count}/{CHUNK_SIZE}) = {need})"
        )
    if chunk.count > need:
        raise SceneFormatError(
            f"{path}: compressed PLY chunk table has {chunk.count} chunks for {vertex.count} splats "
            f"(expected {need})"
        )
    sh = header.element("sh")
    used = set(CHUNK_REQUIRED + CHUNK_COLOR + VERTEX_REQUIRED)
    for e in (chunk, vertex, sh):
        lists = [p.name for p in (e.properties if e is not None else []) if p.is_list
                 and (p.name in used or p.name.startswith("f_rest_"))]
        if lists:
            raise SceneFormatError(f"{path}: compressed PLY properties must be scalars, found list properties "
                                   f"{lists} in element '{e.name}'")
    if sh is not None and sh.properties and sh.count != vertex.count:
        raise SceneFormatError(f"{path}: compressed PLY 'sh' element has {sh.count} rows for {vertex.count} splats")


def load_compressed_ply(path: str, quat_order: str = "wxyz", header: PlyHeader = None) -> GaussianScene:
    """Decode a PlayCanvas/SuperSplat compressed PLY to raw INRIA values (formats.md section 3 table).

    Args:
        path: file path.
        quat_order: must be ``"wxyz"``; the packed rotation has a fixed component order.
        header: the already parsed header of ``path`` (read here when None).

    Returns:
        GaussianScene: means (N, 3), quats (N, 4) unit wxyz, log_scales (N, 3), opacity_logits (N,),
        sh_dc (N, 3), sh_rest (N, K, 3) decoded from the optional ``sh`` element; float32. Values carry the
        format's quantisation error (position: chunk extent / 2047 per axis).

    Raises:
        SceneFormatError: missing elements/properties, a chunk table shorter than ceil(N/256), a bad sh count,
            or a truncated file.
        OptionError: ``quat_order`` other than ``"wxyz"``.
    """
    if quat_order != "wxyz":
        raise OptionError("quat order xyzw (--quat-order): a compressed PLY always stores wxyz rotations; leave the "
                          "order at wxyz (the default)")
    header = header or read_ply_header(path)
    check_compressed_header(header)
    sh_el = header.element("sh")
    has_sh = sh_el is not None and len(sh_el.properties) > 0
    others = [e.name for e in header.elements if e.name not in ("chunk", "vertex", "sh")]
    if others:
        warn(f"{path}: ignoring extra PLY element(s) {others}")
    wanted = ("chunk", "vertex") + (("sh",) if has_sh else ())
    data = read_elements(header, wanted)
    chunk, vert = data["chunk"], data["vertex"]
    n = len(vert)
    ci = np.arange(n) // CHUNK_SIZE  # [N] chunk of each splat

    def cols(names):
        return np.stack([np.asarray(chunk[c], dtype=np.float32) for c in names], axis=1)[ci]  # [N, k]

    pos_t = unpack_111011(np.asarray(vert["packed_position"], dtype=np.uint32))
    means = _lerp(cols(CHUNK_REQUIRED[0:3]), cols(CHUNK_REQUIRED[3:6]), pos_t)
    sc_t = unpack_111011(np.asarray(vert["packed_scale"], dtype=np.uint32))
    log_scales = _lerp(cols(CHUNK_REQUIRED[6:9]), cols(CHUNK_REQUIRED[9:12]), sc_t)
    quats = unpack_rotation(np.asarray(vert["packed_rotation"], dtype=np.uint32))
    rgba = unpack_8888(np.asarray(vert["packed_color"], dtype=np.uint32))
    rgb = rgba[:, :3]
    if all(c in header.element("chunk").names for c in CHUNK_COLOR):
        rgb = _lerp(cols(CHUNK_COLOR[0:3]), cols(CHUNK_COLOR[3:6]), rgb)
    sh_dc = ((rgb - 0.5) / C0).astype(np.float32)
    a = np.clip(rgba[:, 3], ALPHA_EPS, 1.0 - ALPHA_EPS)
    opac = (-np.log(1.0 / a - 1.0)).astype(np.float32)

    names = rest_names(sh_el.names, path) if has_sh else []
    if names:  # an 'sh' element without f_rest_* properties holds no SH
        rec = data["sh"]
        u = np.stack([np.asarray(rec[nm], dtype=np.float32) for nm in names], axis=1)  # [N, 3K]
        t = np.where(u == 0, 0.0, np.where(u == 255, 1.0, (u + 0.5) / 256.0))
        rest = ((t - 0.5) * 8.0).astype(np.float32)
        k = len(names) // 3
        sh_rest = np.ascontiguousarray(rest.reshape(n, 3, k).transpose(0, 2, 1))  # channel-major -> [N, K, 3]
    else:
        sh_rest = np.zeros((n, 0, 3), dtype=np.float32)

    return GaussianScene(
        means=torch.from_numpy(means),
        quats=torch.from_numpy(quats),
        log_scales=torch.from_numpy(log_scales),
        opacity_logits=torch.from_numpy(opac),
        sh_dc=torch.from_numpy(sh_dc),
        sh_rest=torch.from_numpy(sh_rest),
        source=os.path.abspath(path),
        format="compressed-ply",
        up_hint=up_from_comments(header.comments),
    )


# ------------------------------------------------------------------------------------------------ encoder

#: Log-scales are clipped to [-LOG_SCALE_CLIP, LOG_SCALE_CLIP] before quantisation (scales e^-20 ~ 2e-9 to
#: e^20 ~ 5e8 scene units), as SuperSplat / playcanvas splat-transform do (their ``compressed-chunk.ts`` clamps the
#: chunk's scale bounds to +-20 "because sometimes values are at infinity", and clamps values to the bounds).
#: Without it one extreme row would stretch its chunk's range and blur the scales of its 255 neighbours.
LOG_SCALE_CLIP = 20.0
#: Highest SH degree the layout holds: PlayCanvas readers know 9, 24 or 45 ``f_rest`` bytes (formats.md 3).
MAX_SH_DEGREE = 3
_HALF_SQRT2 = math.sqrt(2.0) * 0.5


def _unorm_code(t: np.ndarray, bits: int) -> np.ndarray:
    """Round-to-nearest ``bits``-bit code of ``t`` in [0, 1]: ``clip(floor(t (2^bits - 1) + 0.5))`` as uint32.

    The inverse of :func:`unorm` up to half a step, ``0.5 / (2^bits - 1)``; values outside [0, 1] clip.
    """
    m = (1 << bits) - 1
    return np.clip(np.floor(t * m + 0.5), 0, m).astype(np.uint32)


def _chunk_bounds(v: np.ndarray):
    """Per-chunk (256 consecutive rows) min and max of ``v`` (N, k): two (C, k) arrays, C = ceil(N / 256)."""
    starts = np.arange(0, len(v), CHUNK_SIZE)
    return np.minimum.reduceat(v, starts, axis=0), np.maximum.reduceat(v, starts, axis=0)


def _chunk_normalise(v: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``(v - lo) / (hi - lo)`` per row with its chunk's bounds, float64 (N, k); 0 on a degenerate axis.

    ``v`` (N, k) float32, ``lo``/``hi`` (C, k) float32 bounds from :func:`_chunk_bounds` (so every row lies in
    its chunk's [lo, hi] and the result in [0, 1]). An axis with ``hi == lo`` has ``v == lo`` on every row: the
    divisor is replaced by 1 (no division by zero), the code is 0 and the decoder gives back ``lo`` exactly.
    """
    n = len(v)
    lo64 = np.repeat(lo.astype(np.float64), CHUNK_SIZE, axis=0)[:n]  # [N, k]
    ext = hi.astype(np.float64) - lo.astype(np.float64)  # [C, k]
    ext = np.repeat(np.where(ext > 0, ext, 1.0), CHUNK_SIZE, axis=0)[:n]  # [N, k]
    return (v - lo64) / ext


def _pack_111011(t: np.ndarray) -> np.ndarray:
    """(N, 3) values in [0, 1] -> (N,) uint32: x 11 bits at 21-31, y 10 bits at 11-20, z 11 bits at 0-10."""
    return (_unorm_code(t[:, 0], 11) << 21) | (_unorm_code(t[:, 1], 10) << 11) | _unorm_code(t[:, 2], 11)


def pack_rotation(quats: np.ndarray) -> np.ndarray:
    """(N, 4) raw wxyz quaternions -> (N,) uint32 "smallest three", the inverse of :func:`unpack_rotation`.

    Each row is normalised (a zero row becomes the identity (1, 0, 0, 0), the project-wide rule), its sign flipped
    so that the largest |component| (first one on ties) is positive; that component's index (0 = w) goes to bits
    30-31 and the other three, in slot order, to bits 20-29, 10-19, 0-9 as 10-bit round-to-nearest codes of
    ``v / sqrt(2) + 0.5`` (|v| <= 1/sqrt(2) since v^2 <= largest^2). As splat-transform's ``packRot``.
    """
    q = np.asarray(quats, dtype=np.float64)  # [N, 4]; float64 so huge raw values cannot overflow the norm
    norm = np.sqrt((q * q).sum(axis=1))  # [N]
    zero = norm == 0
    q = q / np.where(zero, 1.0, norm)[:, None]
    q[zero] = (1.0, 0.0, 0.0, 0.0)
    largest = np.abs(q).argmax(axis=1)  # [N] in 0..3, the first maximum on ties
    rows = np.arange(len(q))
    sign = np.where(q[rows, largest] < 0, -_HALF_SQRT2, _HALF_SQRT2)  # flip to a positive largest; scale 1/sqrt(2)
    out = largest.astype(np.uint32) << 30
    for j, shift in enumerate((20, 10, 0)):
        v = np.where(largest > j, q[:, j], q[:, j + 1])  # [N] the j-th component other than `largest`
        out |= _unorm_code(v * sign + 0.5, 10) << shift
    return out


def _sh_bytes(rest: np.ndarray) -> np.ndarray:
    """Raw ``f_rest`` values -> uchar codes whose decoded value is the nearest one to ``t = f_rest / 8 + 0.5``.

    The decoder maps u to ``(u + 0.5) / 256`` except 0 -> 0 and 255 -> 1 (formats.md 3), so with ``s = 256 t``:
    u = floor(s) clipped to 1..254 in the interior, 0 below s = 0.75 (midway between 0 and 1.5) and 255 from
    s = 255.25 up; t outside [0, 1] (|f_rest| > 4) clips. The error is at most 4/256 in f_rest units inside
    |f_rest| <= 4 - 8/256 and at most 6/256 near +-4, where the decoded values are 1.5/256 apart.
    (splat-transform writes ``trunc(256 t)``, which is up to 8/256 off near -4.)
    """
    s = np.multiply(rest, np.float32(32.0), dtype=np.float32)  # 256 (f / 8 + 0.5) = 32 f + 128, in place below
    s += np.float32(128.0)
    low, high = s < 0.75, s >= 255.25
    np.floor(s, out=s)
    np.clip(s, 1, 254, out=s)
    u = s.astype(np.uint8)
    u[low] = 0
    u[high] = 255
    return u


def _grid_codes(p: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """30-bit Morton codes (int64) of ``p`` (M, 3) on a 1024^3 grid over the per-row box [lo, hi] (M, 3) each.

    Axis cells are ``min(1023, floor(1024 (p - lo) / (hi - lo)))``, 0 on a flat axis; bits interleave as
    z y x (x in the lowest bit of each triple), like splat-transform's ``encodeMorton3``.
    """
    ext = hi - lo
    t = (p - lo) / np.where(ext > 0, ext, 1.0)  # [M, 3] in [0, 1]
    g = np.clip(np.floor(t * 1024.0), 0, 1023).astype(np.int64)  # [M, 3]

    def part1by2(v):  # 10 bits -> every third bit of 30 (F. Giesen's "Part1By2")
        v = (v ^ (v << 16)) & 0xFF0000FF
        v = (v ^ (v << 8)) & 0x0300F00F
        v = (v ^ (v << 4)) & 0x030C30C3
        return (v ^ (v << 2)) & 0x09249249

    return (part1by2(g[:, 2]) << 2) | (part1by2(g[:, 1]) << 1) | part1by2(g[:, 0])


def morton_order(means, max_levels: int = 4) -> np.ndarray:
    """Row order sorting Gaussians along a 3D Morton (Z-order) curve, so that chunks of 256 are compact in space.

    The means are quantised to a 2^10 cell grid per axis over their bounding box (per-axis cell size
    extent / 1024; a flat axis gets one cell), the three 10-bit cell indices are bit-interleaved into a 30-bit code
    and rows are sorted by it (stable: ties keep their input order). As in splat-transform's ``sortMortonOrder``,
    a run of more than 256 rows sharing one code is refined by sorting it again on a 2^10 grid over its own
    bounding box, up to ``max_levels`` levels in all (a run of identical points stays in input order).

    Args:
        means: (N, 3) float Gaussian centres (torch tensor or array), scene units.
        max_levels: number of grid levels (>= 1).

    Returns:
        (N,) int64 permutation: row r of the sorted scene is input row ``order[r]``; pass it as
        ``save_compressed_ply(..., order=order)``.

    Raises:
        OptionError: ``means`` not of shape (N, 3), or ``max_levels`` < 1.
        SceneFormatError: non-finite means (sanitise first, :func:`physskin_gs.io.drop_invalid`).
    """
    p = means.detach().cpu().numpy() if isinstance(means, torch.Tensor) else np.asarray(means)
    if p.ndim != 2 or p.shape[1] != 3:
        raise OptionError(f"morton_order: means must have shape (N, 3), got {tuple(p.shape)}")
    if int(max_levels) < 1:
        raise OptionError(f"morton_order: max_levels must be >= 1, got {max_levels}")
    p = p.astype(np.float64)  # [N, 3]
    n = len(p)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if not np.isfinite(p).all():
        raise SceneFormatError("morton_order: the means contain non-finite values; sanitise the scene first "
                               "(physskin_gs.io.drop_invalid)")
    lo, hi = p.min(axis=0), p.max(axis=0)
    key = _grid_codes(p, lo[None], hi[None])  # [N]
    order = np.argsort(key, kind="stable")
    key = key[order]
    for _ in range(int(max_levels) - 1):
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])  # runs of equal key in sorted order
        sizes = np.diff(np.r_[starts, n])
        big = sizes > CHUNK_SIZE
        if not big.any():
            break
        run = np.repeat(np.arange(len(starts), dtype=np.int64), sizes)  # [N] run index, increasing
        rows = np.flatnonzero(big[run])  # sorted positions inside over-full runs
        ps = p[order[rows]]  # [M, 3]
        bstarts = np.flatnonzero(np.r_[True, run[rows][1:] != run[rows][:-1]])  # one per big run
        blo, bhi = np.minimum.reduceat(ps, bstarts, axis=0), np.maximum.reduceat(ps, bstarts, axis=0)
        bid = np.repeat(np.arange(len(bstarts)), np.diff(np.r_[bstarts, len(rows)]))  # [M]
        sub = np.zeros(n, dtype=np.int64)
        sub[rows] = _grid_codes(ps, blo[bid], bhi[bid])
        key = (run << 30) | sub  # run < 2^33 for any N, so it fits int64; the runs keep their order
        perm = np.argsort(key, kind="stable")
        order, key = order[perm], key[perm]
    return order.astype(np.int64)


def _check_order(order, n: int) -> np.ndarray:
    """``order`` as an (N,) int64 array, checked to be a permutation of 0..N-1; raises OptionError otherwise."""
    o = order.detach().cpu().numpy() if isinstance(order, torch.Tensor) else np.asarray(order)
    if o.dtype.kind not in "iu":
        raise OptionError(f"order must be an integer permutation of 0..N-1, got dtype {o.dtype}")
    if o.shape != (n,):
        raise OptionError(f"order must have shape ({n},) (one index per Gaussian), got {tuple(o.shape)}")
    o = o.astype(np.int64, copy=False)
    if n and (int(o.min()) < 0 or int(o.max()) >= n):
        raise OptionError(f"order holds indices outside 0..{n - 1} (min {int(o.min())}, max {int(o.max())})")
    if n and int(np.bincount(o, minlength=n).max()) > 1:
        raise OptionError("order is not a permutation: some rows appear more than once (and others not at all)")
    return o


def _finite(name: str, a: np.ndarray) -> None:
    bad = ~np.isfinite(a).reshape(len(a), -1).all(axis=1)
    if bad.any():
        raise SceneFormatError(
            f"cannot write a compressed PLY: {int(bad.sum())} row(s) have non-finite {name} (first row "
            f"{int(np.flatnonzero(bad)[0])}); the caller must sanitise the scene first "
            "(physskin_gs.io.validate / drop_invalid)"
        )


def _output_path(scene: GaussianScene, path) -> str:
    """Checked absolute output path (see :func:`save_compressed_ply`); raises OptionError."""
    try:
        path = os.fspath(path)
    except TypeError:
        raise OptionError(f"output path must be a str or os.PathLike, got {type(path).__name__}") from None
    if not path:
        raise OptionError("output path is empty")
    check_output(path, scene.source)
    return os.path.abspath(path)


def compressed_ply_header(n: int, sh_bytes: int = 0, up=None) -> bytes:
    """ASCII header of a compressed PLY with ``n`` splats and ``sh_bytes`` uchar ``f_rest_*`` per splat.

    Layout as SuperSplat / splat-transform write it: ``ply``, ``format binary_little_endian 1.0``, a
    ``comment Generated by ...`` line, ``element chunk ceil(n/256)`` with the 18 float bounds
    (CHUNK_REQUIRED + CHUNK_COLOR), ``element vertex n`` with the 4 uint VERTEX_REQUIRED, then (if sh_bytes)
    ``element sh n`` with ``uchar f_rest_0..``, and ``end_header`` + newline.

    Args:
        n: number of splats (>= 0).
        sh_bytes: uchar ``f_rest_*`` properties per splat (0, 9, 24 or 45; 0 writes no ``sh`` element).
        up: optional (3,) scene-space up vector (any length, written as given with 9 significant digits) recorded
            as a second comment ``comment physskin_gs up_axis X Y Z``
            (:func:`physskin_gs.io.ply_header.up_comment`; the loaders return it normalised as ``scene.up_hint``);
            None writes no such comment.

    Returns:
        The header as ASCII bytes.
    """
    from physskin_gs import __version__

    lines = ["ply", "format binary_little_endian 1.0", f"comment Generated by physskin_gs {__version__}"]
    if up is not None:
        lines.append("comment " + up_comment(up))
    lines += [f"element chunk {-(-n // CHUNK_SIZE)}"]
    lines += [f"property float {c}" for c in CHUNK_REQUIRED + CHUNK_COLOR]
    lines += [f"element vertex {n}"] + [f"property uint {c}" for c in VERTEX_REQUIRED]
    if sh_bytes:
        lines += [f"element sh {n}"] + [f"property uchar f_rest_{i}" for i in range(sh_bytes)]
    lines += ["end_header"]
    return ("\n".join(lines) + "\n").encode("ascii")


def save_compressed_ply(scene: GaussianScene, path, *, sh: bool = True, order=None, fsync: bool = True) -> str:
    """Write ``scene`` as a PlayCanvas / SuperSplat compressed PLY (formats.md section 3; binary little endian).

    Elements: ``chunk`` (C = ceil(N/256) rows of 18 float32: position, log-scale and colour min/max per axis),
    ``vertex`` (N rows of uint32 packed_position, packed_rotation, packed_scale, packed_color) and, when ``sh`` and
    the scene has higher SH bands (K > 0), ``sh`` (N rows of 3K uchar ``f_rest_*``, channel-major as INRIA).
    Chunk i holds rows 256 i .. 256 i + 255 of the written order (the last one may be partial). Every value is
    rounded to the nearest code (:func:`load_compressed_ply` decodes them), so the error per value is at most:

    - position (scene units): half a step of the chunk's per-axis extent, ``(max - min) / 2047 / 2`` for x and z,
      ``/ 1023 / 2`` for y;
    - log-scale: the same, after clipping to [-LOG_SCALE_CLIP, LOG_SCALE_CLIP] = [-20, 20] (as SuperSplat does);
    - colour ``rgb = 0.5 + C0 sh_dc``: ``(max - min) / 255 / 2`` of the chunk's colour bounds (sh_dc: that / C0);
    - opacity ``sigmoid(logit)``: 1/510 (the decoder clamps A to [ALPHA_EPS, 1 - ALPHA_EPS] before the logit);
    - rotation: the unit quaternion (zero -> identity) in 10-bit smallest-three (:func:`pack_rotation`): each
      small component within sqrt(2)/1023/2, i.e. a rotation angle below about 0.0048 rad (0.28 degrees);
    - SH rest: 4/256 for |f_rest| <= 4 - 8/256, 6/256 next to +-4, values beyond +-4 clip (:func:`_sh_bytes`).

    Spatially coherent chunks make these bounds small: pass ``order=morton_order(scene.means)`` (SuperSplat and
    splat-transform always Morton-sort). ``scene.extra`` is not written (the layout has no room for it).

    Args:
        scene: raw INRIA values: means (N, 3), quats (N, 4) wxyz unnormalised, log_scales (N, 3),
            opacity_logits (N,), sh_dc (N, 3), sh_rest (N, K, 3); torch tensors (any device) or arrays.
        path: output file (str or PathLike); its folder must exist; written atomically (temporary file in the
            same folder, size check, fsync, ``os.replace``).
        sh: write the ``sh`` element (when K > 0); False writes SH degree 0 only (16 B per splat + chunks).
        order: optional (N,) integer permutation applied before writing: row r of the file is input row
            ``order[r]``. None keeps the input order.
        fsync: flush the file to the disk before the rename (False: frames of a sequence; the size is still
            checked, :func:`physskin_gs.io.inria_ply.write_atomic`).

    Returns:
        The absolute output path. Size: 16 + 3K (with sh) bytes per splat, plus 72 bytes per chunk of 256
        (0.28 B per splat) and the header; about 16.3 B per splat at SH degree 0 (the INRIA PLY needs 68).

    Raises:
        OptionError: ``path`` is the scene's input file (``scene.source``), a directory, in a folder that does
            not exist, or not a path; ``order`` is not an integer permutation of 0..N-1; ``sh`` with an SH degree
            above 3 (the layout holds 9, 24 or 45 bytes; pass ``sh=False`` or ``scene.with_sh_degree(3)``).
        SceneFormatError: an empty scene, an SH count that is not (d+1)^2 - 1, or non-finite values in any field
            that is written (the caller sanitises first: :func:`physskin_gs.io.drop_invalid`).
    """
    out = _output_path(scene, path)
    n = scene.num_gaussians
    if n == 0:
        raise SceneFormatError("cannot write a compressed PLY: the scene holds no Gaussians")
    k = int(scene.sh_rest.shape[1])
    if sh_degree_from_rest_count(3 * k) is None:
        raise SceneFormatError(f"sh_rest has {k} coefficients per channel, which is not (d+1)^2-1 for any degree")
    write_sh = bool(sh) and k > 0
    if write_sh and scene.sh_degree > MAX_SH_DEGREE:
        raise OptionError(
            f"a compressed PLY holds SH degree <= {MAX_SH_DEGREE} (9, 24 or 45 f_rest bytes); this scene has degree "
            f"{scene.sh_degree}: pass sh=False or write scene.with_sh_degree({MAX_SH_DEGREE})"
        )
    o = None if order is None else _check_order(order, n)
    _warn_clipped(out, scene, write_sh)
    chunk, vertex, sh_codes = encode_compressed(scene.means, scene.quats, scene.log_scales, scene.opacity_logits,
                                                scene.sh_dc, scene.sh_rest if write_sh else None, order=o)
    parts = [compressed_ply_header(n, 0 if sh_codes is None else sh_codes.shape[1], up=scene.up_hint), chunk, vertex]
    if sh_codes is not None:
        parts.append(sh_codes)
    write_atomic(out, parts, fsync=fsync)
    return out


def _warn_clipped(path: str, scene: GaussianScene, with_sh: bool) -> None:
    """One warning naming how many Gaussians the layout's ranges clip: SH rest coefficients beyond +-4 (their
    byte range) and log-scales beyond +-:data:`LOG_SCALE_CLIP` (converted files lost them without a word)."""
    parts = []
    if with_sh:
        rest = scene.sh_rest.detach().cpu().numpy()
        k = int((np.abs(rest) > 4.0).reshape(rest.shape[0], -1).any(axis=1).sum())
        if k:
            parts.append(f"{k} with SH coefficients beyond +-4 (kept at +-4)")
    ls = scene.log_scales.detach().cpu().numpy()
    k = int((np.abs(ls) > LOG_SCALE_CLIP).any(axis=1).sum())
    if k:
        parts.append(f"{k} with log-scales beyond +-{LOG_SCALE_CLIP:g} (kept at the bound)")
    if parts:
        warn(f"{path}: the compressed PLY's ranges clip {'; '.join(parts)} of {scene.num_gaussians} Gaussians")


def encode_compressed(means, quats, log_scales, opacity_logits, sh_dc, sh_rest=None, *, order=None):
    """The three elements of a compressed PLY for the given rows (no file): the work of :func:`save_compressed_ply`.

    Args: raw INRIA arrays (torch or numpy) means (N, 3), quats (N, 4) wxyz, log_scales (N, 3),
    opacity_logits (N,), sh_dc (N, 3), optional sh_rest (N, K, 3) (None: no ``sh`` element); ``order`` an
    already checked (N,) int64 permutation or None.

    Returns (chunk (C, 18) ``<f4``, vertex (N, 4) ``<u4``, sh (N, 3K) uint8 channel-major or None), C = ceil(N/256);
    N = 0 gives empty arrays (C = 0). Chunks are independent: encoding rows 256 i .. in two calls and concatenating
    the results gives the same bytes as one call (the sequence writer re-encodes only the chunks that move).

    Raises SceneFormatError for non-finite values.
    """
    o = order

    def get(t):
        a = as_float32(t)
        return a if o is None else a[o]

    means = get(means)  # [N, 3]
    quats = get(quats)  # [N, 4]
    log_scales = get(log_scales)  # [N, 3]
    logits = get(opacity_logits)  # [N]
    sh_dc = get(sh_dc)  # [N, 3]
    n = len(means)
    write_sh = sh_rest is not None and sh_rest.shape[1] > 0
    rest = as_float32(sh_rest) if write_sh else None  # [N, K, 3] in the input order (quantised, then reordered)
    if n == 0:  # no rows (a sequence without moving rows): empty elements
        codes = np.zeros((0, 3 * rest.shape[1]), dtype=np.uint8) if write_sh else None
        return np.zeros((0, 18), dtype="<f4"), np.zeros((0, 4), dtype="<u4"), codes
    for name, a in (("means", means), ("quats", quats), ("log_scales", log_scales),
                    ("opacity_logits", logits), ("sh_dc", sh_dc)) + ((("sh_rest", rest),) if write_sh else ()):
        _finite(name, a)

    log_scales = np.clip(log_scales, -LOG_SCALE_CLIP, LOG_SCALE_CLIP)  # [N, 3]
    rgb = np.float32(0.5) + np.float32(C0) * sh_dc  # [N, 3] float32, the value the decoder targets
    p_lo, p_hi = _chunk_bounds(means)  # [C, 3] each
    s_lo, s_hi = _chunk_bounds(log_scales)
    c_lo, c_hi = _chunk_bounds(rgb)
    chunk = np.concatenate([p_lo, p_hi, s_lo, s_hi, c_lo, c_hi], axis=1).astype("<f4")  # [C, 18]

    vertex = np.empty((n, 4), dtype="<u4")  # [N, 4] packed_position, packed_rotation, packed_scale, packed_color
    vertex[:, 0] = _pack_111011(_chunk_normalise(means, p_lo, p_hi))
    vertex[:, 1] = pack_rotation(quats)
    vertex[:, 2] = _pack_111011(_chunk_normalise(log_scales, s_lo, s_hi))
    c = _chunk_normalise(rgb, c_lo, c_hi)  # [N, 3]
    alpha = sigmoid64(logits)  # [N] float64
    vertex[:, 3] = ((_unorm_code(c[:, 0], 8) << 24) | (_unorm_code(c[:, 1], 8) << 16)
                    | (_unorm_code(c[:, 2], 8) << 8) | _unorm_code(alpha, 8))
    codes = None
    if write_sh:
        k = rest.shape[1]
        codes = _sh_bytes(rest).transpose(0, 2, 1).reshape(n, 3 * k)  # [N, K, 3] -> channel-major [N, 3K] uint8
        codes = np.ascontiguousarray(codes if o is None else codes[o])  # [N, 3K] uint8
    return chunk, vertex, codes
