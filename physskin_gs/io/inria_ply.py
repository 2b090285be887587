"""INRIA 3DGS PLY reader and writer (formats.md section 1).

Properties are read by *name*: ``x y z``, optional ``nx ny nz``, ``f_dc_0..2``, ``f_rest_*`` (channel-major,
sorted by integer suffix), ``opacity``, ``scale_0..2``, ``rot_0..3`` (wxyz, not normalised); these must be float
or double (integer-typed ones are refused: their raw values are not 3DGS values). Any other scalar vertex property
is kept in ``scene.extra`` (integer types keep their type, float and double become float32) and written back
after the INRIA ones with the same PLY type.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

from physskin_gs.errors import OptionError, SceneFormatError
from physskin_gs.io._shared import as_float32, check_output, refuse_directory, refuse_source, temp_file, unlink_quietly
from physskin_gs.io.detect import MESH_HINT
from physskin_gs.io.ply_header import (OBJECT_COMMENT, PLY_TYPE_NAMES, PlyHeader, read_elements, read_ply_header,
                                       up_comment, up_from_comments, warn)
from physskin_gs.scene import GaussianScene

_F_REST = re.compile(r"^f_rest_(\d+)$")
NORMALS = ("nx", "ny", "nz")
REQUIRED_GROUPS: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("x, y, z", ("x", "y", "z")),
    ("f_dc_0..2", ("f_dc_0", "f_dc_1", "f_dc_2")),
    ("opacity", ("opacity",)),
    ("scale_0..2", ("scale_0", "scale_1", "scale_2")),
    ("rot_0..3", ("rot_0", "rot_1", "rot_2", "rot_3")),
)
QUAT_ORDERS = ("wxyz", "xyzw")
#: Properties only a 3DGS file has (everything required except the position).
_GS_ONLY = {n for _, g in REQUIRED_GROUPS[1:] for n in g}
#: Integer PLY types (numpy codes) an extra property keeps through load -> save.
_INT_TYPES = ("i1", "u1", "i2", "u2", "i4", "u4")


def missing_fields(names) -> List[str]:
    """Human-readable list of the required INRIA vertex properties absent from ``names`` (groups kept compact)."""
    have = set(names)
    out: List[str] = []
    for label, group in REQUIRED_GROUPS:
        miss = [g for g in group if g not in have]
        if len(miss) == len(group) and len(group) > 1:
            out.append(label)
        else:
            out.extend(miss)
    return out


def sh_degree_from_rest_count(n: int) -> Optional[int]:
    """SH degree d with n = 3((d+1)^2 - 1), or None when ``n`` is not such a count (formats.md 1)."""
    if n < 0 or n % 3:
        return None
    k = n // 3 + 1
    r = int(round(k ** 0.5))
    return r - 1 if r * r == k else None


def rest_names(names, path: str) -> List[str]:
    """The ``f_rest_*`` names sorted by integer suffix; checks they are f_rest_0..f_rest_{n-1} with a valid n.

    Raises:
        SceneFormatError: gaps/duplicates in the indices, or a count that is not 3((d+1)^2 - 1).
    """
    idx = sorted((int(m.group(1)), nm) for nm in names if (m := _F_REST.match(nm)))
    n = len(idx)
    if [i for i, _ in idx] != list(range(n)):
        raise SceneFormatError(
            f"{path}: f_rest_* properties are not numbered 0..{n - 1} (found indices {[i for i, _ in idx][:10]}...)"
        )
    if sh_degree_from_rest_count(n) is None:
        raise SceneFormatError(
            f"{path}: bad f_rest count {n}: must be 3((d+1)^2 - 1) for an SH degree d, i.e. one of 0, 9, 24, 45, 72"
        )
    return [nm for _, nm in idx]


def check_inria_header(header: PlyHeader) -> None:
    """Raise a SceneFormatError naming what makes ``header`` unreadable as INRIA 3DGS (2DGS, mesh, missing fields)."""
    path = header.path
    vertex = header.element("vertex")
    if vertex is None:
        holder = _gaussian_element(header)
        if holder:
            raise _wrong_element(path, holder)
        raise SceneFormatError(
            f"{path}: not a 3DGS PLY: no 'vertex' element (elements: {[e.name for e in header.elements]})"
        )
    names = vertex.names
    if "scale_0" in names and "scale_1" in names and "scale_2" not in names:
        raise SceneFormatError(f"{path}: 2D Gaussian (surfel) PLY is not supported (two scales: scale_0, scale_1)")
    miss = missing_fields(names)
    if miss:
        holder = _gaussian_element(header)
        if holder and not set(names) & _GS_ONLY:
            raise _wrong_element(path, holder)
        if not any(n in names for n in ("f_dc_0", "opacity", "scale_0", "rot_0")):
            faces = header.element("face")
            kind = f"a mesh with {faces.count} faces" if faces is not None else "a plain point cloud"
            raise SceneFormatError(
                f"{path}: not a 3DGS PLY (looks like {kind}, {vertex.count} vertices): missing {', '.join(miss)}; "
                + MESH_HINT
            )
        raise SceneFormatError(f"{path}: incomplete 3DGS PLY: missing {', '.join(miss)}")
    lists = [p.name for p in vertex.properties if p.is_list and p.name in _all_required(names)]
    if lists:
        raise SceneFormatError(f"{path}: 3DGS vertex properties must be scalars, found list properties {lists}")
    core = set(_all_required(names))
    typed = [f"{PLY_TYPE_NAMES.get(p.type, p.type)} {p.name}" for p in vertex.properties
             if p.name in core and not p.type.startswith("f")]
    if typed:
        raise SceneFormatError(
            f"{path}: 3DGS properties must be float (or double), found integer-typed {', '.join(typed[:6])}"
            + (f" and {len(typed) - 6} more" if len(typed) > 6 else "")
            + ": their values would be read as raw integers (an opacity of 255 is not a logit); this looks like a "
            "quantised or non-3DGS file: convert it to a float 3DGS PLY with the tool that wrote it"
        )


def _gaussian_element(header: PlyHeader) -> Optional[str]:
    """Name of the first element other than 'vertex' that holds 3DGS properties (f_dc, opacity, scale, rot), or None."""
    for e in header.elements:
        if e.name != "vertex" and set(e.names) & _GS_ONLY:
            return e.name
    return None


def _wrong_element(path: str, name: str) -> SceneFormatError:
    return SceneFormatError(
        f"{path}: not a readable 3DGS PLY: the Gaussians are in element '{name}', but a 3DGS PLY stores them in "
        "element 'vertex' (rename the element in the header: 'element vertex N')"
    )


def _all_required(names) -> List[str]:
    out = [n for _, g in REQUIRED_GROUPS for n in g]
    return out + [n for n in names if _F_REST.match(n)]


def _column(rec: np.ndarray, name: str) -> np.ndarray:
    """A column of a structured array as native float32 (byte-swapped / cast from double as needed)."""
    # always a copy: for one row ascontiguousarray keeps the record stride, which torch.from_numpy refuses
    return np.array(rec[name], dtype=np.float32)


def _as_matrix(rec: np.ndarray) -> Optional[np.ndarray]:
    """(N, P) plain view of a structured array whose fields all share one dtype and are packed; else None."""
    fields = [rec.dtype.fields[n] for n in rec.dtype.names]
    base = fields[0][0]
    if any(f[0] != base or f[0].shape for f in fields):
        return None
    if [f[1] for f in fields] != [i * base.itemsize for i in range(len(fields))] or rec.dtype.itemsize != base.itemsize * len(fields):
        return None
    if not rec.flags.c_contiguous:
        return None
    return rec.view(base).reshape(len(rec), len(fields))


def _columns(rec: np.ndarray, names: List[str], mat: Optional[np.ndarray] = None) -> np.ndarray:
    """Stack structured-array columns into a (N, len(names)) native float32 array.

    Fast path: when ``mat`` (the (N, P) view from :func:`_as_matrix`) is given, one row-wise gather.
    Reference path: one strided copy per column. Both cast big-endian / double to native float32 exactly.
    """
    if mat is not None:
        order = list(rec.dtype.names)
        idx = [order.index(n) for n in names]
        return np.ascontiguousarray(mat[:, idx], dtype=np.float32)
    out = np.empty((len(rec), len(names)), dtype=np.float32)
    for j, n in enumerate(names):
        out[:, j] = rec[n]
    return out


def _warn_double_positions(path: str, rec: np.ndarray, means: np.ndarray) -> None:
    """Warn when x / y / z are stored as double and float32 (what the Gaussians are computed and written in) moves
    them by more than 1e-6 of the scene's extent (a georeferenced capture: a 1 mm splat 1e5 m out moves 4-8 mm)."""
    kinds = [rec.dtype[nm] for nm in ("x", "y", "z")]
    if not any(k == np.float64 for k in kinds):
        return
    exact = np.stack([np.asarray(rec[nm], dtype=np.float64) for nm in ("x", "y", "z")], 1)  # [N, 3]
    ok = np.isfinite(exact).all(1)
    if not ok.any():
        return
    err = float(np.abs(exact[ok] - means[ok].astype(np.float64)).max())
    extent = float(np.ptp(exact[ok], axis=0).max())
    if err > 1e-6 * max(extent, 1e-30):
        warn(f"{path}: x / y / z are stored as double; physskin_gs reads and writes them as float32, which moves "
             f"them by up to {err:.3g} units ({err / max(extent, 1e-30):.2g} of the scene's {extent:.3g}-unit "
             "extent). Shift the capture near the origin first to keep its precision")


def load_inria_ply(
    path: str, quat_order: str = "wxyz", header: Optional[PlyHeader] = None, *, fast: bool = True
) -> GaussianScene:
    """Load an INRIA 3DGS PLY (ascii, binary little- or big-endian) by property name.

    Args:
        path: file path.
        quat_order: order of ``rot_0..3`` in the file, ``"wxyz"`` (INRIA, default) or ``"xyzw"``.
        header: an already parsed header (optional).
        fast: use the single-gather column extraction when every property has the same type (the
            per-column reference path gives identical arrays; see tests/test_io_ply.py).

    Returns:
        GaussianScene with raw values: means (N, 3), quats (N, 4) wxyz, log_scales (N, 3), opacity_logits (N,),
        sh_dc (N, 3), sh_rest (N, K, 3) with K = (d+1)^2 - 1, extra {name: (N,)}; all float32.

    Raises:
        SceneFormatError: mesh / point-cloud PLY (names the missing fields), 2DGS PLY, bad f_rest count,
            truncated or malformed file.
        OptionError: unknown ``quat_order``.
    """
    if quat_order not in QUAT_ORDERS:
        raise OptionError(f"quat_order must be one of {QUAT_ORDERS}, got {quat_order!r}")
    header = header or read_ply_header(path)
    check_inria_header(header)
    vertex = header.element("vertex")
    names = vertex.names
    rest = rest_names(names, path)
    if vertex.count == 0:
        raise SceneFormatError(f"{path}: the PLY holds no Gaussians (element vertex 0)")
    others = [e.name for e in header.elements if e.name != "vertex"]
    if others:
        warn(f"{path}: ignoring extra PLY element(s) {others}; only 'vertex' is read")
    rec = read_elements(header, ("vertex",))["vertex"]
    n = len(rec)

    mat = _as_matrix(rec) if fast else None
    means = _columns(rec, ["x", "y", "z"], mat)
    _warn_double_positions(path, rec, means)
    sh_dc = _columns(rec, ["f_dc_0", "f_dc_1", "f_dc_2"], mat)
    k = len(rest) // 3
    # channel-major: field c*K + k holds channel c, coefficient k; gather in (k, c) order -> [N, K, 3]
    rest_kc = [rest[c * k + j] for j in range(k) for c in range(3)]
    sh_rest = _columns(rec, rest_kc, mat).reshape(n, k, 3)
    opac = np.ascontiguousarray(_columns(rec, ["opacity"], mat)[:, 0])
    log_scales = _columns(rec, ["scale_0", "scale_1", "scale_2"], mat)
    q = _columns(rec, ["rot_0", "rot_1", "rot_2", "rot_3"], mat)
    if quat_order == "xyzw":
        q = np.ascontiguousarray(q[:, [3, 0, 1, 2]])

    known = set(_all_required(names)) | set(NORMALS)
    extra: Dict[str, torch.Tensor] = {}
    if all(nm in names for nm in NORMALS):  # real normals (some trainers write them) are kept; zeros are not
        nrm = _columns(rec, list(NORMALS), mat)  # [N, 3]
        if np.any(nrm[np.isfinite(nrm)] != 0):
            for j, nm in enumerate(NORMALS):
                extra[nm] = torch.from_numpy(np.ascontiguousarray(nrm[:, j]))
    skipped = []
    for p in vertex.properties:
        if p.name in known:
            continue
        if p.is_list:
            skipped.append(p.name)
            continue
        if p.type in _INT_TYPES:  # integer extras keep their type (a uchar label stays uchar through convert)
            extra[p.name] = torch.from_numpy(np.array(rec[p.name], dtype=np.dtype(p.type)))  # copy: see _column
        else:
            extra[p.name] = torch.from_numpy(_column(rec, p.name))
    if skipped:
        warn(f"{path}: ignoring list vertex properties {skipped}")
    if extra:
        logging.getLogger(__name__).info("%s: keeping extra vertex properties %s", path, list(extra))

    return GaussianScene(
        means=torch.from_numpy(means),
        quats=torch.from_numpy(q),
        log_scales=torch.from_numpy(log_scales),
        opacity_logits=torch.from_numpy(opac),
        sh_dc=torch.from_numpy(sh_dc),
        sh_rest=torch.from_numpy(sh_rest),
        extra=extra,
        source=os.path.abspath(path),
        format="inria-ply",
        up_hint=up_from_comments(header.comments),
        object_only=any(c.strip() == OBJECT_COMMENT for c in header.comments),
    )


def inria_property_names(sh_degree: int, extra_names=()) -> List[str]:
    """Vertex property names our writer emits, in order (formats.md 1 "Our writer")."""
    k = (sh_degree + 1) ** 2 - 1
    return (
        ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
        + [f"f_rest_{i}" for i in range(3 * k)]
        + ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
        + list(extra_names)
    )


def split_normals(extra: Dict) -> Tuple[Optional[Dict], Dict]:
    """(normals or None, the other extras) of a scene's ``extra`` ({name: (N,) values}): normals is {"nx", "ny",
    "nz": (N,)} when all three are there (a file's non-zero normals travel as those three extras and are written in
    the INRIA layout's own ``nx ny nz`` columns). Neither dict is ``extra`` itself. Raises nothing."""
    if all(nm in extra for nm in NORMALS):
        return {nm: extra[nm] for nm in NORMALS}, {k: v for k, v in extra.items() if k not in NORMALS}
    return None, dict(extra)


def scene_to_inria_array(scene: GaussianScene) -> Tuple[List[str], np.ndarray]:
    """(names, (N, P) float32 array) of the INRIA record layout for ``scene``; normals are the scene's
    ``nx ny nz`` extras (a file's non-zero normals, :func:`split_normals`), else zeros.

    P = 17 + 3K + (the number of other extras) with names from :func:`inria_property_names`; values are the raw
    ones.

    Raises:
        SceneFormatError: ``scene.extra`` names clash with INRIA names, or K is not (d+1)^2 - 1.
    """
    n = scene.num_gaussians
    k = scene.sh_rest.shape[1]
    normals, others = split_normals(scene.extra)
    names = inria_property_names(scene.sh_degree, others.keys())
    clash = set(others) & set(names[: len(names) - len(others)])
    if clash:
        raise SceneFormatError(f"extra property names clash with INRIA properties: {sorted(clash)}")
    if (scene.sh_degree + 1) ** 2 - 1 != k:
        raise SceneFormatError(f"sh_rest has {k} coefficients per channel, which is not (d+1)^2-1 for any degree")
    arr = np.empty((n, len(names)), dtype=np.float32)
    arr[:, 0:3] = as_float32(scene.means)
    arr[:, 3:6] = 0.0
    if normals is not None:
        for j, nm in enumerate(NORMALS):
            arr[:, 3 + j] = as_float32(normals[nm]).reshape(n)
    arr[:, 6:9] = as_float32(scene.sh_dc)
    c = 9 + 3 * k
    arr[:, 9:c] = as_float32(scene.sh_rest).transpose(0, 2, 1).reshape(n, 3 * k)  # [N, K, 3] -> channel-major [N, 3K]
    arr[:, c] = as_float32(scene.opacity_logits)
    arr[:, c + 1:c + 4] = as_float32(scene.log_scales)
    arr[:, c + 4:c + 8] = as_float32(scene.quats)
    for j, v in enumerate(others.values()):
        arr[:, c + 8 + j] = as_float32(v).reshape(n)
    return names, arr


def _extra_type(v) -> str:
    """numpy type code an extra property is written with: integer types that PLY has keep their type (bool as
    uchar; int64 / uint64 as int / uint when the values fit, else double); floats are written as float."""
    t = v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
    if t.dtype == np.bool_:
        return "u1"
    code = t.dtype.str[1:]
    if code in _INT_TYPES:
        return code
    if t.dtype.kind in "iu":
        small = "i4" if t.dtype.kind == "i" else "u4"
        info = np.iinfo(small)
        return small if t.size == 0 or (int(t.min()) >= info.min and int(t.max()) <= info.max) else "f8"
    return "f4"


def save_inria_ply(scene: GaussianScene, path, *, overwrite_source: bool = False) -> str:
    """Write ``scene`` as a binary little-endian float32 INRIA 3DGS PLY with raw values.

    Layout: x y z nx ny nz f_dc_0..2 f_rest_* (channel-major) opacity scale_0..2 rot_0..3, then
    ``scene.extra`` in insertion order (integer extras keep their PLY type, float ones are float); normals are the
    scene's ``nx ny nz`` extras when it has them (a file's non-zero normals), else zeros. The file is written to a
    temporary file in the same directory, its size is checked, and it is renamed into place (atomic on POSIX).

    Args:
        scene: the scene to write.
        path: output file (str or PathLike); its folder must exist.
        overwrite_source: allow ``path`` to be ``scene.source`` (off: the input is never overwritten).

    Returns the absolute output path.

    Raises:
        OptionError: ``path`` is the scene's input file (``scene.source``), a directory, or in a folder
            that does not exist.
        SceneFormatError: inconsistent scene (SH count, clashing extra names).
    """
    path = os.fspath(path)
    refuse_directory(path)
    if not overwrite_source:
        refuse_source(path, scene.source)
    header_bytes, body = inria_ply_body(scene)
    write_atomic(path, (header_bytes, body))
    return os.path.abspath(path)


def inria_ply_body(scene: GaussianScene) -> Tuple[bytes, np.ndarray]:
    """(header bytes, body array) of the binary little-endian INRIA PLY that :func:`save_inria_ply` writes.

    The body is a C-contiguous (N, P) ``<f4`` array when every property is float (the usual case; columns as in
    :func:`inria_property_names`), else a structured (N,) record array (integer extras keep their type). Writing
    ``header + body.tobytes()`` gives the file. Raises SceneFormatError like :func:`scene_to_inria_array`.
    """
    names, arr = scene_to_inria_array(scene)
    others = split_normals(scene.extra)[1]
    types = ["f4"] * (len(names) - len(others)) + [_extra_type(v) for v in others.values()]
    if all(t == "f4" for t in types):
        body = np.ascontiguousarray(arr.astype("<f4", copy=False))
    else:  # integer extras keep their type: one structured record
        body = np.empty(arr.shape[0], dtype=[(nm, "<" + t) for nm, t in zip(names, types)])
        core = len(names) - len(others)
        for j, nm in enumerate(names[:core]):
            body[nm] = arr[:, j]
        for nm, v, t in zip(names[core:], others.values(), types[core:]):
            vals = v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
            body[nm] = vals.reshape(-1).astype(t)
    head = ["ply", "format binary_little_endian 1.0"]
    if scene.up_hint is not None:
        head.append("comment " + up_comment(scene.up_hint))
    if scene.object_only or scene.format == "mesh":  # Gaussians sampled on a mesh: one object, no support
        head.append("comment " + OBJECT_COMMENT)
    head += [f"element vertex {arr.shape[0]}"]
    head += [f"property {PLY_TYPE_NAMES[t]} {nm}" for nm, t in zip(names, types)]
    head += ["end_header"]
    return ("\n".join(head) + "\n").encode("ascii"), body


def write_atomic(path, parts, *, fsync: bool = True) -> int:
    """Write ``parts`` (bytes-like objects or C-contiguous numpy arrays, written without a copy; empty arrays add
    nothing) to ``path`` (str or PathLike) atomically.

    The data goes to a temporary file in the same folder (permissions as a plain ``open`` would give, under the
    umask read once at import, never per file: safe in writer threads), its size is checked against the bytes
    handed in, and it is renamed into place (atomic on POSIX); on any failure the
    temporary file is removed and ``path`` is untouched. ``fsync=False`` skips the flush to the disk (frames of a
    sequence: the size check still catches a short write). Returns the number of bytes written.

    Raises:
        OptionError: ``path`` is a directory or its folder does not exist.
        OSError: the write, the size check or the rename failed.
    """
    path, out_dir = check_output(path)
    views = []
    for p in parts:
        if not isinstance(p, np.ndarray):
            views.append(memoryview(p))
        elif p.size:  # memoryview refuses to cast an empty array (an empty scene); it holds no bytes anyway
            views.append(memoryview(p).cast("B"))
    total = sum(v.nbytes for v in views)
    fd, tmp = temp_file(path, out_dir)  # permissions as a plain open() gives (umask read once, at import)
    try:
        with os.fdopen(fd, "wb") as f:
            for v in views:
                f.write(v)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        if os.path.getsize(tmp) != total:
            raise OSError(f"{path}: incomplete write ({os.path.getsize(tmp)} of {total} bytes)")
        os.replace(tmp, path)
        from physskin_gs import interrupts

        interrupts.note_written(path)
    except BaseException:
        unlink_quietly(tmp)
        raise
    return total
