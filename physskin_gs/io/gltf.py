"""Static export of a Gaussian scene to glTF 2.0 binary (.glb) with ``KHR_gaussian_splatting``, and a reader.

Source of the conventions
-------------------------
Khronos glTF repository, ``extensions/2.0/Khronos/KHR_gaussian_splatting/README.md`` and
``extensions/2.0/Khronos/KHR_gaussian_splatting/schema/mesh.primitive.KHR_gaussian_splatting.schema.json``
(https://github.com/KhronosGroup/glTF, read at commit 77b44be7; last change to the extension: 63770cc7
"KHR_gaussian_splatting: Editorial review", 2026-04-15; its status line reads **"Release Candidate"**), and the
glTF 2.0 core specification for the GLB container, accessors and the coordinate system
(https://registry.khronos.org/glTF/specs/2.0/glTF-2.0.html).

What the extension says (paraphrased) and what this module writes
----------------------------------------------------------------
- The splats are a mesh primitive with ``mode`` = POINTS (0) whose ``extensions.KHR_gaussian_splatting`` object
  has the required ``kernel`` (only ``"ellipse"`` is defined) and ``colorSpace`` (``"srgb_rec709_display"`` or
  ``"lin_rec709_display"``), and the optional ``projection`` (default ``"perspective"``) and ``sortingMethod``
  (default ``"cameraDistance"``). We write all four: ellipse, srgb_rec709_display (INRIA 3DGS trains on sRGB
  photographs and its colours are display-referred), perspective, cameraDistance.
- ``extensionsUsed`` lists ``KHR_gaussian_splatting``. The base extension is not required (a reader without it
  draws a point cloud); only extensions built on it (compression) may put it into ``extensionsRequired``. We do not.
- Attributes (accessor type, component types allowed by the spec; we write float32 except COLOR_0):

  ============================================  ======  =================================================
  ``POSITION``                                  VEC3    core glTF (float); ``min``/``max`` are mandatory
  ``KHR_gaussian_splatting:ROTATION``           VEC4    float, normalised byte/short. Unit quaternion in the
                                                        glTF order **(x, y, z, w)**
  ``KHR_gaussian_splatting:SCALE``              VEC3    float, (normalised) ubyte/ushort. **Linear** standard
                                                        deviations (``exp(log_scale)``), never negative
  ``KHR_gaussian_splatting:OPACITY``            SCALAR  float, normalised ubyte/ushort. **Linear** in [0, 1],
                                                        i.e. after the sigmoid; out-of-range values are invalid
  ``KHR_gaussian_splatting:SH_DEGREE_0_COEF_0`` VEC3    float only; required. The raw DC coefficients (INRIA
                                                        ``f_dc``): diffuse colour = 0.5 + 0.2820948 * SH_0_0
  ``KHR_gaussian_splatting:SH_DEGREE_l_COEF_n`` VEC3    float only; l = 1..3, n = 0..2l holds order m = n - l
                                                        (lowest m first). A degree is all or nothing and
                                                        needs every lower degree
  ``COLOR_0`` (optional fallback, core glTF)    VEC4    we write unsigned byte normalised: linear RGB =
                                                        sRGB-decode(clamp(0.5 + C0 * f_dc, 0, 1)), A = opacity
  ============================================  ======  =================================================

- SH basis: real SH with the Condon-Shortley phase; the spec's constants and colour formula (``Y_1 = -C1 y, C1 z,
  -C1 x`` ...) are exactly the INRIA 3DGS basis of :mod:`physskin_gs.sh`, so our ``sh_rest[:, k]`` with
  k = l^2 - 1 + n goes unchanged into ``SH_DEGREE_l_COEF_n``. The view direction is camera -> splat mean (as in
  3DGS). Degree 4 is not defined by the extension.
- Covariance: ``Sigma = M C C^T M^T`` with ``C = R(q) diag(s)`` and M the node's world 3x3, which SHOULD be a
  rotation times positive scales; SH SHOULD be rotated by the node's rotation.
- glTF axes (core spec): right-handed, **+Y up**, +Z forward (the front of an asset faces +Z), units **metres**.
  The extension recommends rotating positions, quaternions *and* SH when converting pre-trained data.

Axis conversion
---------------
:func:`save_gltf` bakes a proper rotation R (det +1) that maps the scene's ``up`` vector to glTF +Y into the data
(the node carries no transform): ``p' = k R p``, ``q' = q_R (x) q`` (Hamilton product), ``s' = k s`` and SH
rotated so that ``colour'(R d) == colour(d)`` (with :func:`physskin_gs.sh.rotate_sh`); k is
``meters_per_unit`` (1 when None). R is the minimal rotation taking ``up`` to +Y (:func:`up_to_gltf_rotation`):
+z up -> ``(x, y, z) -> (x, z, -y)``, -z up -> ``(x, -z, y)``, +y -> identity, -y -> ``(x, -y, -z)``
(180 degrees about x), +-x -> a quarter turn about z. R, k, the source and the up vector are recorded in
``asset.extras["physskin_gs"]``; ``load_gltf(path, source_frame=True)`` undoes them.

Not exported: ``scene.extra`` (per-vertex PLY extras), SH degree 4 (refused: truncate with
``scene.with_sh_degree(3)``).
"""

from __future__ import annotations

import base64
import json
import math
import os
import struct
import urllib.parse
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

from physskin_gs.errors import OptionError, SceneFormatError
from physskin_gs.io._shared import (log_scales64, logit64, output_folder, positive_number, recorded_path,
                                    refuse_directory, refuse_source, sigmoid64)
from physskin_gs.io.inria_ply import write_atomic
from physskin_gs.io.ply_header import warn
from physskin_gs.io.validate import invalid_mask
from physskin_gs.scene import C0, GaussianScene, normalize_quats, quat_to_rotmat, rotmat_to_quat

__all__ = [
    "save_gltf",
    "load_gltf",
    "up_to_gltf_rotation",
    "transform_scene",
    "EXTENSION",
    "GLTF_FORMAT",
]

#: Name of the extension (``extensionsUsed`` entry, primitive extension key and attribute prefix).
EXTENSION = "KHR_gaussian_splatting"
#: ``scene.format`` of scenes returned by :func:`load_gltf`.
GLTF_FORMAT = "gltf-gaussian-splatting"

_P = EXTENSION + ":"
ATTR_ROTATION = _P + "ROTATION"
ATTR_SCALE = _P + "SCALE"
ATTR_OPACITY = _P + "OPACITY"
MAX_SH_DEGREE = 3  # highest degree the extension defines

GLB_MAGIC = 0x46546C67  # b"glTF" little-endian
GLB_VERSION = 2
CHUNK_JSON = 0x4E4F534A  # b"JSON"
CHUNK_BIN = 0x004E4942  # b"BIN\0"

# glTF componentType codes
BYTE, UNSIGNED_BYTE, SHORT, UNSIGNED_SHORT, UNSIGNED_INT, FLOAT = 5120, 5121, 5122, 5123, 5125, 5126
_COMPONENT_DTYPES = {BYTE: "<i1", UNSIGNED_BYTE: "<u1", SHORT: "<i2", UNSIGNED_SHORT: "<u2",
                     UNSIGNED_INT: "<u4", FLOAT: "<f4"}
_TYPE_SIZES = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4}
ARRAY_BUFFER = 34962
MODE_POINTS = 0
#: extensionsRequired entries the reader understands.
_READABLE_REQUIRED = {EXTENSION, "KHR_mesh_quantization"}


def sh_attribute(degree: int, coef: int) -> str:
    """Attribute semantic of SH degree ``degree`` (0..3), coefficient ``coef`` (0..2*degree; order
    m = coef - degree)."""
    return f"{_P}SH_DEGREE_{degree}_COEF_{coef}"


# ------------------------------------------------------------------------------------------------ rotations
def up_to_gltf_rotation(up) -> np.ndarray:
    """(3, 3) float64 proper rotation R (det +1) with ``R @ up_hat == (0, 1, 0)``: for an axis, the minimal
    rotation about ``up x e_y`` (for -Y the half turn about x, ``diag(1, -1, -1)``); otherwise that axis rotation
    of the signed axis nearest ``up``, followed by the minimal rotation of what it makes of ``up`` onto +Y. So an
    up a degree off an axis turns the scene as that axis does, give or take a degree: the minimal rotation alone
    jumps near -Y (up (0, -1, 0) keeps x, (0.01, -1, 0) sends it to -x, (0, -1, 0.01) keeps it), and a capture
    whose support is a degree off -Y came out turned 95 degrees about the vertical.

    Args:
        up: (3,) up vector in scene coordinates (sequence, numpy array or torch tensor; normalised here).
    Raises:
        OptionError: not 3 finite numbers, or (near) zero length.
    """
    if isinstance(up, torch.Tensor):
        up = up.detach().cpu().numpy()
    try:
        u = np.asarray(up, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise OptionError(f"up must be a 3-vector, got {up!r}") from None
    if u.shape != (3,) or not np.isfinite(u).all():
        raise OptionError(f"up must be 3 finite numbers, got {up!r}")
    n = float(np.linalg.norm(u))
    if n < 1e-12:
        raise OptionError("up vector has zero length")
    u = u / n
    k = int(np.argmax(np.abs(u)))
    if np.count_nonzero(u) > 1:  # near axis first (exact), then the small rest
        axis = np.zeros(3)
        axis[k] = math.copysign(1.0, u[k])
        R1 = up_to_gltf_rotation(axis)
        return _minimal_rotation_to_y(R1 @ u) @ R1
    return _minimal_rotation_to_y(u)


def _minimal_rotation_to_y(u: np.ndarray) -> np.ndarray:
    """(3, 3) the minimal rotation taking the unit vector u (3,) onto +Y (see :func:`up_to_gltf_rotation`)."""
    e = np.array([0.0, 1.0, 0.0])
    c = float(u @ e)
    v = np.cross(u, e)  # rotation axis times sin(angle)
    sv = float(np.linalg.norm(v))
    if sv < 1e-15:  # (anti)parallel to +Y
        return np.eye(3) if c > 0 else np.diag([1.0, -1.0, -1.0])
    if np.count_nonzero(u) == 1:  # an axis: exact integer matrix (minimal rotation, quarter/half turns)
        K = np.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]])
        return np.eye(3) + K + (K @ K) / (1.0 + c)
    a = v / sv
    K = np.array([[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]])
    theta = math.atan2(sv, c)  # stable also near the antiparallel case
    return np.eye(3) + math.sin(theta) * K + (1.0 - math.cos(theta)) * (K @ K)


def _check_rotation(R) -> torch.Tensor:
    if isinstance(R, torch.Tensor):
        R = R.detach().cpu().numpy()
    R = np.asarray(R, dtype=np.float64)
    if R.shape != (3, 3) or not np.isfinite(R).all():
        raise OptionError(f"rotation must be a finite 3x3 matrix, got shape {R.shape}")
    if np.abs(R.T @ R - np.eye(3)).max() > 1e-6 or np.linalg.det(R) < 0:
        raise OptionError("rotation must be a proper rotation matrix (orthonormal, det +1)")
    return torch.from_numpy(R)


def _quat_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Hamilton product of wxyz quaternions (..., 4): ``R(a b) = R(a) R(b)``."""
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack([
        aw * bw - ax * bx - ay * by - az * bz,
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
    ], dim=-1)


def _rotate_sh_rest(sh_dc: torch.Tensor, sh_rest: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    """sh_rest (N, K, 3) rotated by one rotation R (3, 3): ``colour'(R d) == colour(d)``. float64 in and out."""
    if sh_rest.shape[1] == 0 or torch.equal(R, torch.eye(3, dtype=R.dtype)):
        return sh_rest.clone()
    # sh.rotate_sh gives eval_sh(out, d) == eval_sh(sh, R^T d), i.e. out seen from R d == sh seen from d.
    from physskin_gs.sh import rotate_sh

    sh = torch.cat([sh_dc[:, None, :], sh_rest], dim=1)
    Rn = R.to(torch.float64).expand(sh.shape[0], 3, 3)
    return rotate_sh(sh, Rn)[:, 1:]


def _transform_arrays(scene: GaussianScene, R: torch.Tensor, scale: float) -> Dict[str, torch.Tensor]:
    """float64 tensors of ``scene`` after ``p -> scale R p`` (unit wxyz quats, see :func:`transform_scene`)."""
    dd = torch.float64
    R = R.to(dd)
    qR = rotmat_to_quat(R)
    means = scene.means.detach().cpu().to(dd)
    quats = normalize_quats(scene.quats.detach().cpu().to(dd))
    sh_dc = scene.sh_dc.detach().cpu().to(dd)
    sh_rest = scene.sh_rest.detach().cpu().to(dd)
    return {
        "means": scale * (means @ R.T),
        "quats": _quat_mul(qR.expand_as(quats), quats),
        "log_scales": scene.log_scales.detach().cpu().to(dd) + math.log(scale),
        "opacity_logits": scene.opacity_logits.detach().cpu().to(dd),
        "sh_dc": sh_dc,
        "sh_rest": _rotate_sh_rest(sh_dc, sh_rest, R),
    }


def transform_scene(scene: GaussianScene, R, scale: float = 1.0) -> GaussianScene:
    """A copy of ``scene`` moved by the similarity ``p -> scale * R p`` about the origin.

    Means (N, 3) are rotated and scaled, quaternions become ``q_R (x) q`` (unit wxyz; zero quaternions are the
    identity first), log-scales get ``+ log(scale)``, SH bands 1-3 are rotated so that the colour seen from
    ``R d`` equals the old colour seen from ``d`` (DC unchanged), opacities are kept. ``extra`` is copied.
    Use ``transform_scene(s, R.T, 1 / k)`` to undo ``transform_scene(s, R, k)``.

    Args:
        scene: the scene (any device; the result is on the CPU, float32).
        R: (3, 3) proper rotation (numpy or torch).
        scale: positive uniform scale (e.g. metres per scene unit).
    Returns:
        A new GaussianScene on the CPU, float32 (computed in float64), same N, SH degree and row order: means
        (N, 3) = ``scale * R p``, quats (N, 4) unit wxyz, log_scales (N, 3), opacity_logits (N,) (unchanged),
        sh_dc (N, 3) (unchanged), sh_rest (N, K, 3); ``extra`` copied, ``source`` and ``format`` kept,
        ``up_hint`` not carried over (None).
    Raises:
        OptionError: R not a proper rotation, scale not positive and finite, SH degree above 3 with R != I.
    """
    Rt = _check_rotation(R)
    scale = _check_scale(scale, "scale")
    if scene.sh_degree > MAX_SH_DEGREE and not torch.equal(Rt, torch.eye(3, dtype=Rt.dtype)):
        raise OptionError(f"cannot rotate SH degree {scene.sh_degree} (at most {MAX_SH_DEGREE})")
    a = _transform_arrays(scene, Rt, scale)
    f = torch.float32
    return GaussianScene(
        means=a["means"].to(f), quats=a["quats"].to(f), log_scales=a["log_scales"].to(f),
        opacity_logits=a["opacity_logits"].to(f), sh_dc=a["sh_dc"].to(f), sh_rest=a["sh_rest"].to(f),
        extra={k: v.detach().cpu().clone() for k, v in scene.extra.items()}, source=scene.source, format=scene.format,
    )


def _check_scale(value, name: str) -> float:
    """``value`` as a positive finite float; OptionError naming ``name`` otherwise."""
    return positive_number(value, name, invalid="a positive finite number")


# ------------------------------------------------------------------------------------------------ writing
def _srgb_to_linear(c: np.ndarray) -> np.ndarray:
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def _pad4(data: bytes, fill: bytes) -> bytes:
    return data + fill * (-len(data) % 4)


def glb_bytes(gltf: Dict, bin_data: bytes) -> bytes:
    """A GLB 2.0 container: 12-byte header (magic, version 2, total length), the JSON chunk padded with spaces
    and, when ``bin_data`` is non-empty, the BIN chunk padded with zeros, each to a multiple of 4 bytes.

    Args:
        gltf: the glTF JSON document (dict of JSON types), written compactly as UTF-8.
        bin_data: the binary buffer (bytes; may be empty).
    Returns:
        The GLB file as bytes (length a multiple of 4).
    Raises:
        ValueError: ``gltf`` holds a NaN or infinite float (strict JSON, ``allow_nan=False``).
        TypeError: ``gltf`` holds a value JSON cannot encode.
    """
    js = _pad4(json.dumps(gltf, separators=(",", ":"), allow_nan=False).encode("utf-8"), b" ")
    chunks = struct.pack("<II", len(js), CHUNK_JSON) + js
    if bin_data:
        b = _pad4(bin_data, b"\x00")
        chunks += struct.pack("<II", len(b), CHUNK_BIN) + b
    return struct.pack("<III", GLB_MAGIC, GLB_VERSION, 12 + len(chunks)) + chunks


def save_gltf(scene: GaussianScene, path, *, up=(0.0, 0.0, 1.0), meters_per_unit: Optional[float] = None) -> str:
    """Write ``scene`` as a glTF 2.0 binary (.glb) point primitive with ``KHR_gaussian_splatting``.

    The scene is converted to glTF axes and units first (module docstring): ``p' = k R p`` with R the rotation
    taking ``up`` to +Y and k = ``meters_per_unit``; rotations, scales and SH follow. Stored values are activated
    (linear scales, opacity in [0, 1], unit xyzw quaternions), float32, one tightly packed bufferView per
    attribute (4-byte aligned offsets), POSITION with exact ``min``/``max``; ``COLOR_0`` (linear RGBA, unsigned
    byte normalised) is the fallback colour. One scene, one node (no transform), one mesh, one primitive.
    ``asset.extras["physskin_gs"]`` records source (its path relative to the .glb's folder), source format, up,
    R (row-major, scene -> glTF),
    meters_per_unit, SH degree and count. The file is written to a temporary file and renamed (atomic).

    Size: 60 bytes per Gaussian at SH degree 0 and 240 at degree 3, plus the JSON (about 2 kB at degree 0,
    4.7 kB at degree 3) and 28 bytes of headers.

    Args:
        scene: N >= 1 Gaussians with finite raw values, SH degree 0-3.
        path: output ``.glb`` path (str or PathLike); its folder must exist.
        up: (3,) up vector in scene coordinates (default +z, the INRIA PLY / Blender convention; COLMAP-style
            captures are -y); it need not be normalised.
        meters_per_unit: metres per scene unit (positive). None: scene units are written unscaled as metres
            (recorded as null in the extras).
    Returns:
        The absolute path written.
    Raises:
        OptionError: not a ``.glb`` path (``.gltf`` is not written), path is ``scene.source``, a directory or in a
            missing folder; bad ``up`` / ``meters_per_unit``; SH degree 4 (use ``scene.with_sh_degree(3)``).
        SceneFormatError: empty scene; NaN/Inf in any raw value, or scales that overflow float32 after ``exp``
            (sanitise first, e.g. :func:`physskin_gs.io.drop_invalid`).
    """
    path = os.fspath(path)
    if os.path.splitext(path)[1].lower() != ".glb":
        raise OptionError(f"{path}: glTF export writes binary .glb files only; use a .glb extension")
    refuse_directory(path)
    output_folder(path)
    refuse_source(path, scene.source and os.fspath(scene.source), existing_only=False)
    R = up_to_gltf_rotation(up)
    k = 1.0 if meters_per_unit is None else _check_scale(meters_per_unit, "meters_per_unit")
    n = scene.num_gaussians
    if n == 0:
        raise SceneFormatError(f"{path}: the scene has no Gaussians; glTF accessors need at least one element")
    degree = scene.sh_degree
    if degree > MAX_SH_DEGREE:
        raise OptionError(f"KHR_gaussian_splatting stores SH up to degree {MAX_SH_DEGREE}, the scene has degree "
                          f"{degree}; truncate it first with scene.with_sh_degree({MAX_SH_DEGREE})")
    bad = invalid_mask(scene.to("cpu"))
    if bool(bad.any()):
        raise SceneFormatError(f"{path}: {int(bad.sum())} of {n} Gaussians have NaN or Inf values; sanitise the "
                               "scene first (physskin_gs.io.drop_invalid or `physskin-gs` convert/clean)")

    a = _transform_arrays(scene, torch.from_numpy(R), k)
    scales64 = np.exp(a["log_scales"].numpy())
    f32max = float(np.finfo(np.float32).max)
    if not (np.abs(a["means"].numpy()) <= f32max).all() or not (scales64 <= f32max).all():
        raise SceneFormatError(f"{path}: positions or exp(log_scales) overflow float32 (log-scales up to "
                               f"{float(a['log_scales'].max()):.3g}); sanitise the scene first")
    means = a["means"].numpy().astype("<f4")
    scales = scales64.astype("<f4")
    x = a["opacity_logits"].numpy()
    opacity = sigmoid64(x).astype("<f4")
    q = a["quats"].numpy()
    rot = q[:, [1, 2, 3, 0]].astype("<f4")  # wxyz -> glTF xyzw
    sh_dc = a["sh_dc"].numpy()
    sh_rest = a["sh_rest"].numpy()
    rgb = _srgb_to_linear(np.clip(0.5 + C0 * sh_dc, 0.0, 1.0))
    color = np.round(np.concatenate([rgb, opacity[:, None].astype(np.float64)], axis=1) * 255.0).astype("<u1")

    attrs: List[Tuple[str, np.ndarray, str, int, bool]] = [
        ("POSITION", means, "VEC3", FLOAT, False),
        ("COLOR_0", color, "VEC4", UNSIGNED_BYTE, True),
        (ATTR_SCALE, scales, "VEC3", FLOAT, False),
        (ATTR_ROTATION, rot, "VEC4", FLOAT, False),
        (ATTR_OPACITY, opacity, "SCALAR", FLOAT, False),
        (sh_attribute(0, 0), sh_dc.astype("<f4"), "VEC3", FLOAT, False),
    ]
    for l in range(1, degree + 1):
        for c in range(2 * l + 1):
            attrs.append((sh_attribute(l, c), sh_rest[:, l * l - 1 + c].astype("<f4"), "VEC3", FLOAT, False))

    blobs: List[bytes] = []
    offset = 0
    accessors, views, attributes = [], [], {}
    for i, (name, arr, typ, ctype, normalized) in enumerate(attrs):
        data = np.ascontiguousarray(arr).tobytes()
        assert offset % 4 == 0 and len(data) % 4 == 0
        views.append({"buffer": 0, "byteOffset": offset, "byteLength": len(data), "target": ARRAY_BUFFER})
        acc = {"bufferView": i, "componentType": ctype, "count": n, "type": typ}
        if normalized:
            acc["normalized"] = True
        if name == "POSITION":  # mandatory; the float32 values as stored
            acc["min"] = [float(v) for v in arr.min(axis=0)]
            acc["max"] = [float(v) for v in arr.max(axis=0)]
        accessors.append(acc)
        attributes[name] = i
        blobs.append(data)
        offset += len(data)
    bin_data = b"".join(blobs)

    from physskin_gs import __version__

    gltf = {
        "asset": {
            "version": "2.0",
            "generator": f"physskin_gs {__version__}",
            "extras": {"physskin_gs": {
                # relative to the .glb's folder: no machine's absolute path in a file that is shared
                "source": None if scene.source is None else recorded_path(scene.source, os.path.dirname(
                    os.path.abspath(path))),
                "source_format": scene.format,
                "source_up": [float(v) for v in np.asarray(up if not isinstance(up, torch.Tensor)
                                                           else up.detach().cpu().numpy(), dtype=np.float64)],
                "rotation": [[float(v) for v in row] for row in R],
                "meters_per_unit": meters_per_unit if meters_per_unit is None else k,
                "transform": "p_gltf = meters_per_unit * rotation @ p_scene (meters_per_unit null: 1, scene units "
                             "written as metres); quats q_rotation * q; SH rotated",
                "sh_degree": degree,
                "num_gaussians": n,
            }},
        },
        "extensionsUsed": [EXTENSION],
        "scene": 0,
        "scenes": [{"nodes": [0]}],
        "nodes": [{"mesh": 0, "name": "gaussians"}],
        "meshes": [{"name": "gaussians", "primitives": [{
            "attributes": attributes,
            "mode": MODE_POINTS,
            "extensions": {EXTENSION: {
                "kernel": "ellipse",
                "colorSpace": "srgb_rec709_display",
                "projection": "perspective",
                "sortingMethod": "cameraDistance",
            }},
        }]}],
        "accessors": accessors,
        "bufferViews": views,
        "buffers": [{"byteLength": len(bin_data)}],
    }
    write_atomic(path, (glb_bytes(gltf, bin_data),))
    return os.path.abspath(path)


# ------------------------------------------------------------------------------------------------ reading
def read_glb(data: bytes, path: str = "<bytes>") -> Tuple[Dict, Optional[bytes]]:
    """Split a GLB 2.0 container into (JSON dict, BIN chunk bytes or None). Raises SceneFormatError on a bad
    magic, version, length or chunk layout."""
    if len(data) < 20:
        raise SceneFormatError(f"{path}: too short for a GLB file ({len(data)} bytes)")
    magic, version, length = struct.unpack_from("<III", data, 0)
    if magic != GLB_MAGIC:
        raise SceneFormatError(f"{path}: not a GLB file (bad magic)")
    if version != GLB_VERSION:
        raise SceneFormatError(f"{path}: GLB version {version} is not supported (2 only)")
    if length > len(data):
        raise SceneFormatError(f"{path}: truncated GLB ({len(data)} of {length} bytes)")
    pos, chunks = 12, []
    while pos + 8 <= length:
        clen, ctype = struct.unpack_from("<II", data, pos)
        if pos + 8 + clen > length:
            raise SceneFormatError(f"{path}: GLB chunk at byte {pos} runs past the end of the file")
        chunks.append((ctype, data[pos + 8:pos + 8 + clen]))
        pos += 8 + clen
    if not chunks or chunks[0][0] != CHUNK_JSON:
        raise SceneFormatError(f"{path}: GLB has no JSON first chunk")
    try:
        gltf = json.loads(chunks[0][1].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SceneFormatError(f"{path}: GLB JSON chunk is not valid JSON ({e})") from None
    bin_chunk = chunks[1][1] if len(chunks) > 1 and chunks[1][0] == CHUNK_BIN else None
    return gltf, bin_chunk


def _load_buffers(gltf: Dict, bin_chunk: Optional[bytes], base_dir: str, path: str) -> List[bytes]:
    out = []
    for i, buf in enumerate(gltf.get("buffers", [])):
        n = int(buf.get("byteLength", 0))
        uri = buf.get("uri")
        if uri is None:
            if i != 0 or bin_chunk is None:
                raise SceneFormatError(f"{path}: buffer {i} has no uri and there is no GLB BIN chunk for it")
            data = bin_chunk
        elif uri.startswith("data:"):
            head, _, payload = uri.partition(",")
            if not head.endswith(";base64"):
                raise SceneFormatError(f"{path}: buffer {i}: only base64 data URIs are supported")
            data = base64.b64decode(payload)
        else:
            rel = urllib.parse.unquote(uri)
            if urllib.parse.urlparse(uri).scheme or os.path.isabs(rel):
                raise SceneFormatError(f"{path}: buffer {i}: external URI {uri!r} is not a relative file path")
            try:
                with open(os.path.join(base_dir, rel), "rb") as f:
                    data = f.read()
            except OSError as e:
                raise SceneFormatError(f"{path}: buffer {i}: cannot read {uri!r} ({e.strerror})") from None
        if len(data) < n:
            raise SceneFormatError(f"{path}: buffer {i} holds {len(data)} bytes, byteLength says {n}")
        out.append(data)
    return out


def _read_accessor(gltf: Dict, buffers: List[bytes], index: int, path: str, what: str) -> np.ndarray:
    """Accessor ``index`` decoded to float64 (count, ncomp); normalised integers mapped as the glTF spec says."""
    try:
        acc = gltf["accessors"][index]
    except (KeyError, IndexError, TypeError):
        raise SceneFormatError(f"{path}: {what}: accessor {index!r} does not exist") from None
    typ, ctype = acc.get("type"), acc.get("componentType")
    if typ not in _TYPE_SIZES or ctype not in _COMPONENT_DTYPES:
        raise SceneFormatError(f"{path}: {what}: unsupported accessor type {typ!r} / componentType {ctype!r}")
    if "sparse" in acc:
        raise SceneFormatError(f"{path}: {what}: sparse accessors are not supported")
    count, ncomp = int(acc.get("count", 0)), _TYPE_SIZES[typ]
    dt = np.dtype(_COMPONENT_DTYPES[ctype])
    if "bufferView" not in acc:
        return np.zeros((count, ncomp))
    try:
        view = gltf["bufferViews"][acc["bufferView"]]
        buf = buffers[view["buffer"]]
    except (KeyError, IndexError, TypeError):
        raise SceneFormatError(f"{path}: {what}: bufferView/buffer of accessor {index} does not exist") from None
    elem = dt.itemsize * ncomp
    stride = int(view.get("byteStride", elem))
    start = int(view.get("byteOffset", 0)) + int(acc.get("byteOffset", 0))
    view_end = int(view.get("byteOffset", 0)) + int(view["byteLength"])
    if count and (start + stride * (count - 1) + elem > view_end or view_end > len(buf) or stride < elem):
        raise SceneFormatError(f"{path}: {what}: accessor {index} reaches past its bufferView or buffer")
    raw = np.ndarray((count, ncomp), dtype=dt, buffer=buf, offset=start, strides=(stride, dt.itemsize))
    vals = raw.astype(np.float64)
    if acc.get("normalized"):
        if ctype == FLOAT:
            raise SceneFormatError(f"{path}: {what}: a float accessor cannot be normalized")
        vmax = float(np.iinfo(dt).max)
        vals = vals / vmax
        if np.iinfo(dt).min < 0:
            vals = np.maximum(vals, -1.0)
    return vals


def _local_matrix(node: Dict) -> np.ndarray:
    if "matrix" in node:
        return np.asarray(node["matrix"], dtype=np.float64).reshape(4, 4).T  # column-major
    M = np.eye(4)
    x, y, z, w = node.get("rotation", [0.0, 0.0, 0.0, 1.0])
    Rm = quat_to_rotmat(torch.tensor([w, x, y, z], dtype=torch.float64)).numpy()
    M[:3, :3] = Rm * np.asarray(node.get("scale", [1.0, 1.0, 1.0]), dtype=np.float64)[None, :]
    M[:3, 3] = node.get("translation", [0.0, 0.0, 0.0])
    return M


def _mesh_instances(gltf: Dict, path: str) -> List[Tuple[int, np.ndarray]]:
    """(mesh index, 4x4 world matrix) for every node of the default scene (all root nodes if no scene)."""
    nodes = gltf.get("nodes", [])
    scenes = gltf.get("scenes", [])
    if scenes:
        roots = scenes[int(gltf.get("scene", 0))].get("nodes", [])
    else:
        children = {c for nd in nodes for c in nd.get("children", [])}
        roots = [i for i in range(len(nodes)) if i not in children]
        if not nodes:  # bare meshes: identity
            return [(i, np.eye(4)) for i in range(len(gltf.get("meshes", [])))]
    out, stack, seen = [], [(r, np.eye(4)) for r in reversed(roots)], set()
    while stack:
        i, parent = stack.pop()
        if i in seen:
            raise SceneFormatError(f"{path}: node {i} appears twice in the hierarchy")
        seen.add(i)
        try:
            node = nodes[i]
        except (IndexError, TypeError):
            raise SceneFormatError(f"{path}: node {i!r} does not exist") from None
        M = parent @ _local_matrix(node)
        if "mesh" in node:
            out.append((int(node["mesh"]), M))
        stack.extend((c, M) for c in reversed(node.get("children", [])))
    return out


def _read_primitive(gltf, buffers, prim, path, where) -> Dict[str, np.ndarray]:
    attrs = prim.get("attributes", {})
    mode = prim.get("mode", 4)
    if mode != MODE_POINTS:
        raise SceneFormatError(f"{path}: {where}: KHR_gaussian_splatting primitive has mode {mode}, must be POINTS (0)")
    missing = [s for s in ("POSITION", ATTR_ROTATION, ATTR_SCALE, ATTR_OPACITY, sh_attribute(0, 0)) if s not in attrs]
    if missing:
        raise SceneFormatError(f"{path}: {where}: missing required attributes {', '.join(missing)}")

    def get(sem, ncomp):
        v = _read_accessor(gltf, buffers, attrs[sem], path, f"{where} {sem}")
        if v.shape[1] != ncomp:
            raise SceneFormatError(f"{path}: {where} {sem}: expected {ncomp} components, got {v.shape[1]}")
        if not np.isfinite(v).all():
            raise SceneFormatError(f"{path}: {where} {sem}: NaN or Inf values")
        return v

    out = {"means": get("POSITION", 3), "rot": get(ATTR_ROTATION, 4), "scales": get(ATTR_SCALE, 3),
           "opacity": get(ATTR_OPACITY, 1)[:, 0], "sh_dc": get(sh_attribute(0, 0), 3)}
    degree = 0
    for l in range(1, MAX_SH_DEGREE + 1):
        have = [sh_attribute(l, c) in attrs for c in range(2 * l + 1)]
        if any(have) and not all(have):
            raise SceneFormatError(f"{path}: {where}: SH degree {l} is only partially defined")
        if all(have):
            if degree != l - 1:
                raise SceneFormatError(f"{path}: {where}: SH degree {l} is present without degree {l - 1}")
            degree = l
    rest = [get(sh_attribute(l, c), 3) for l in range(1, degree + 1) for c in range(2 * l + 1)]
    n = out["means"].shape[0]
    out["sh_rest"] = np.stack(rest, axis=1) if rest else np.zeros((n, 0, 3))
    for k, v in out.items():
        if v.shape[0] != n:
            raise SceneFormatError(f"{path}: {where}: attribute counts differ ({k}: {v.shape[0]}, POSITION: {n})")
    if (out["scales"] < 0).any():
        raise SceneFormatError(f"{path}: {where}: negative SCALE values (scales are linear and >= 0)")
    if ((out["opacity"] < 0) | (out["opacity"] > 1)).any():
        raise SceneFormatError(f"{path}: {where}: OPACITY values outside [0, 1]")
    return out


def _apply_node(p: Dict[str, np.ndarray], M: np.ndarray, path: str) -> Dict[str, np.ndarray]:
    """Bake a node world matrix (rotation x positive scales + translation) into one primitive's arrays."""
    if np.array_equal(M, np.eye(4)):
        return p
    A = M[:3, :3]
    cols = np.linalg.norm(A, axis=0)
    if not (np.isfinite(M).all() and (cols > 0).all()):
        raise SceneFormatError(f"{path}: node transform is not decomposable (zero or non-finite scale)")
    Rn = A / cols[None, :]
    if np.abs(Rn.T @ Rn - np.eye(3)).max() > 1e-4 or np.linalg.det(Rn) < 0:
        raise SceneFormatError(f"{path}: node transform is not a rotation times positive scales "
                               "(splat rendering is undefined for it)")
    means, quats, scales, sh_rest = bake_affine(p["means"], p["rot"][:, [3, 0, 1, 2]], p["scales"], p["sh_dc"],
                                                p["sh_rest"], M, path)
    return dict(p, means=means, rot=quats[:, [1, 2, 3, 0]], scales=scales, sh_rest=sh_rest)


def bake_affine(means: np.ndarray, quats_wxyz: np.ndarray, scales: np.ndarray, sh_dc: np.ndarray,
                sh_rest: np.ndarray, M: np.ndarray, path: str = "<arrays>") -> Tuple[np.ndarray, ...]:
    """Gaussians moved by the affine map ``x -> A x + t`` (``M`` (4, 4): A = M[:3, :3], t = M[:3, 3], column
    vectors; A invertible): means (N, 3) -> A means + t; covariances ``A Sigma A^T`` refactored as rotation x
    scales (rotation x uniform scale: the exact quaternion product; otherwise the SVD of ``A R(q) diag(s)``); SH
    bands rotated by A's polar rotation (``colour'(R d) == colour(d)``). ``quats_wxyz`` (N, 4) any norm,
    ``scales`` (N, 3) linear, ``sh_dc`` (N, 3), ``sh_rest`` (N, K, 3). Returns (means, unit quats wxyz, scales,
    sh_rest) as float64 arrays. Raises SceneFormatError (naming ``path``) for a non-finite or singular A."""
    M = np.asarray(M, dtype=np.float64)
    A, t = M[:3, :3], M[:3, 3]
    if not np.isfinite(M).all() or abs(np.linalg.det(A)) <= 1e-12 * max(np.abs(A).max(), 1e-300) ** 3:
        raise SceneFormatError(f"{path}: the transform is singular or not finite")
    if np.linalg.det(A) < 0:
        raise SceneFormatError(f"{path}: the transform mirrors the scene (negative determinant); splat "
                               "orientations cannot follow a mirror")
    q = torch.from_numpy(np.asarray(quats_wxyz, dtype=np.float64).copy())
    At = torch.from_numpy(A)
    cols = np.linalg.norm(A, axis=0)
    Rn = A / cols[None, :]
    rigid = np.abs(Rn.T @ Rn - np.eye(3)).max() <= 1e-9 and cols.max() - cols.min() <= 1e-9 * cols.max()
    s = np.asarray(scales, dtype=np.float64)
    if rigid:  # rotation x uniform scale: exact quaternion product
        R = torch.from_numpy(Rn)
        quats = _quat_mul(rotmat_to_quat(R).expand_as(q), normalize_quats(q)).numpy()
        scales = s * cols[0]
    else:  # refactor A R(q) diag(s) = U diag(s') V^T
        from physskin_gs.deform import covariance_factor_svd, polar_rotation

        L = At @ quat_to_rotmat(q) * torch.from_numpy(s)[:, None, :]
        U, sv = covariance_factor_svd(L)
        quats, scales = rotmat_to_quat(U).numpy(), sv.numpy()
        R = polar_rotation(At)
    sh = _rotate_sh_rest(torch.from_numpy(np.asarray(sh_dc, np.float64)),
                         torch.from_numpy(np.asarray(sh_rest, np.float64)), R.to(torch.float64)).numpy()
    return np.asarray(means, np.float64) @ A.T + t, quats, scales, sh


def load_gltf(path, *, source_frame: bool = False) -> GaussianScene:
    """Read the ``KHR_gaussian_splatting`` primitives of a .glb (or .gltf with data-URI / relative-file buffers).

    Reads what :func:`save_gltf` writes and conforming files with float or normalised-integer accessors (no
    sparse accessors, no compression extensions). Every splat primitive instanced by the default scene's nodes is
    read, its node's world transform (rotation x positive scales + translation) is baked in, and all are
    concatenated; ``COLOR_0`` (fallback colour) is ignored. ``kernel`` values other than ``"ellipse"`` are read
    as ellipse (the spec's fallback); a colour space other than ``srgb_rec709_display`` gives a SceneWarning
    (coefficients are kept as stored).

    Args:
        path: .glb / .gltf file.
        source_frame: False (default): the data stays in **glTF axes and metres** (+Y up). True: undo the axis
            rotation and unit scale recorded by :func:`save_gltf` in ``asset.extras["physskin_gs"]`` so the
            result is in the original scene frame.
    Returns:
        GaussianScene (float32, CPU): means (N, 3), quats (N, 4) wxyz as stored (unit), log_scales =
        log(max(SCALE, float32 tiny)), opacity_logits = logit(OPACITY clamped to [float32 tiny, 1 - 2^-24]),
        sh_dc (N, 3), sh_rest (N, K, 3) with K = 0, 3, 8 or 15; ``source`` = absolute path, ``format`` =
        ``"gltf-gaussian-splatting"``, ``up_hint`` glTF's +Y (in the source frame with ``source_frame``).
    Raises:
        FileNotFoundError: missing file.
        SceneFormatError: not GLB/glTF, bad container, no splat primitive, mode not POINTS, missing or partial
            attributes, NaN/Inf, negative scales, opacity outside [0, 1], SH degrees differing between primitives,
            unsupported required extensions, non-decomposable node transforms, ``source_frame=True`` on a file
            without physskin_gs extras.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] == b"glTF":
        gltf, bin_chunk = read_glb(data, path)
    else:
        try:
            gltf = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise SceneFormatError(f"{path}: neither a GLB container nor glTF JSON") from None
        bin_chunk = None
    if not isinstance(gltf, dict) or "asset" not in gltf:
        raise SceneFormatError(f"{path}: not a glTF asset (no 'asset' object)")
    unknown = sorted(set(gltf.get("extensionsRequired", [])) - _READABLE_REQUIRED)
    if unknown:
        raise SceneFormatError(f"{path}: requires unsupported glTF extensions: {', '.join(unknown)}")
    buffers = _load_buffers(gltf, bin_chunk, os.path.dirname(os.path.abspath(path)), path)
    meshes = gltf.get("meshes", [])
    parts = []
    for mi, M in _mesh_instances(gltf, path):
        if not 0 <= mi < len(meshes):
            raise SceneFormatError(f"{path}: node refers to missing mesh {mi}")
        for pi, prim in enumerate(meshes[mi].get("primitives", [])):
            ext = prim.get("extensions", {}).get(EXTENSION)
            if ext is None:
                continue
            cs = ext.get("colorSpace")
            if cs != "srgb_rec709_display":
                warn(f"{path}: mesh {mi} primitive {pi}: colorSpace {cs!r}; SH coefficients kept as stored")
            parts.append(_apply_node(_read_primitive(gltf, buffers, prim, path, f"mesh {mi} primitive {pi}"), M, path))
    if not parts:
        raise SceneFormatError(f"{path}: no mesh primitive with the {EXTENSION} extension in the default scene")
    ks = {p["sh_rest"].shape[1] for p in parts}
    if len(ks) > 1:
        raise SceneFormatError(f"{path}: splat primitives have different SH degrees")
    cat = {k: np.concatenate([p[k] for p in parts], axis=0) for k in parts[0]}
    f = torch.float32
    scene = GaussianScene(
        means=torch.from_numpy(cat["means"]).to(f),
        quats=torch.from_numpy(cat["rot"][:, [3, 0, 1, 2]]).to(f),
        log_scales=torch.from_numpy(log_scales64(cat["scales"])).to(f),
        opacity_logits=torch.from_numpy(logit64(cat["opacity"])).to(f),
        sh_dc=torch.from_numpy(cat["sh_dc"]).to(f),
        sh_rest=torch.from_numpy(cat["sh_rest"]).to(f),
        source=os.path.abspath(path),
        format=GLTF_FORMAT,
        up_hint=(0.0, 1.0, 0.0),  # the glTF specification: "+Y is up"
    )
    if source_frame:
        info = (gltf.get("asset", {}).get("extras") or {}).get("physskin_gs")
        try:
            R = np.asarray(info["rotation"], dtype=np.float64)
            k = info.get("meters_per_unit") or 1.0
        except (TypeError, KeyError, ValueError):
            raise SceneFormatError(f"{path}: no physskin_gs axis record in asset.extras; source_frame=True needs "
                                   "a file written by save_gltf") from None
        scene = transform_scene(scene, R.T, 1.0 / float(k))
        scene.source, scene.format = os.path.abspath(path), GLTF_FORMAT
        scene.up_hint = tuple(float(v) for v in R.T @ np.array([0.0, 1.0, 0.0]))  # glTF's +Y in the source frame
    return scene
