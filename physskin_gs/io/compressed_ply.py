"""PlayCanvas / SuperSplat compressed PLY decoder (formats.md section 3).

Elements: ``chunk`` (one row of float32 bounds per 256 splats: position min/max, log-scale min/max and
optionally colour min/max), ``vertex`` (four uint32: packed_position, packed_rotation, packed_scale,
packed_color), optional ``sh`` (uchar ``f_rest_*``, channel-major like INRIA). Splat i uses chunk i // 256.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch

from physskin_gs.errors import OptionError, SceneFormatError
from physskin_gs.io.inria_ply import rest_names
from physskin_gs.io.ply_header import PlyHeader, read_elements, read_ply_header, warn
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
        raise OptionError("quat_order: a compressed PLY always stores wxyz rotations; leave quat_order='wxyz'")
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
    )
