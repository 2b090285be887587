"""Content-based format detection for Gaussian-scene and mesh files (formats.md sections 1-4).

Detection reads the first bytes (and for PLY the header), never trusts the extension alone. Extensions are
only used as a tie-breaker for headerless formats (``.splat``) and for containers we reject
(``.ksplat``, ``.spz``, ``.sog``, ``.lcc``).
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib

import numpy as np

from physskin_gs.errors import SceneFormatError
from physskin_gs.io.ply_header import PlyHeader, is_ply, read_ply_header

#: Formats :func:`detect_format` can return.
FORMATS = (
    "inria-ply",       # INRIA 3DGS PLY (possibly with missing fields: load_scene names them)
    "compressed-ply",  # PlayCanvas / SuperSplat compressed PLY
    "2dgs-ply",        # 2D Gaussian (surfel) PLY: rejected by load_scene
    "mesh-ply",        # PLY without any 3DGS field (mesh or plain point cloud)
    "splat",           # antimatter15 .splat, 32-byte records
    "gltf-splat",      # glTF / GLB whose extensionsUsed lists KHR_gaussian_splatting
    "usd",             # OpenUSD crate (.usdc/.usd) or text (.usda): ParticleField3DGaussianSplat prims
    "mesh",            # OBJ / STL / GLB / glTF / OFF mesh (load with load_mesh)
    "ksplat", "spz", "sog", "lcc",  # other splat containers: rejected with a hint
)

#: Containers we recognise but do not read, with the hint shown to the user.
UNSUPPORTED_CONTAINERS = {
    "ksplat": "GaussianSplats3D .ksplat",
    "spz": "Niantic .spz",
    "sog": "PlayCanvas SOG",
    "lcc": "XGRIDS .lcc",
}
CONVERT_HINT = (
    "convert it to an INRIA 3DGS .ply first (for example with `npx @playcanvas/splat-transform in.X out.ply` "
    "or SuperSplat's export)"
)

#: What to do with a mesh given to a command (or function) that reads Gaussian scenes only.
MESH_HINT = ("meshes are read by `physskin-gs animate`, `skin`, `render` and `convert`, which sample Gaussians on "
             "the surface (Python: physskin_gs.io.load_mesh, physskin_gs.pipeline.load_for_animation)")

MESH_EXTENSIONS = {".obj", ".stl", ".glb", ".gltf", ".off"}

#: Vertex properties whose presence marks a PLY as a 3DGS file.
GS_MARKERS = ("f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3")


def classify_ply(header: PlyHeader) -> str:
    """Classify a parsed PLY header as inria-ply / compressed-ply / 2dgs-ply / mesh-ply (formats.md 1, 3).

    Raises nothing: an incomplete 3DGS header is still "inria-ply" (the loader names the missing fields).
    """
    vertex = header.element("vertex")
    names = set(vertex.names) if vertex is not None else set()
    if header.element("chunk") is not None and "packed_position" in names:
        return "compressed-ply"
    if "scale_0" in names and "scale_1" in names and "scale_2" not in names:
        return "2dgs-ply"
    if vertex is None or not (names & set(GS_MARKERS)):
        # Gaussians stored under another element name ('gaussian', 'splat', ...) are a broken 3DGS PLY, not a
        # mesh: the INRIA loader names the problem
        if any(set(e.names) & set(GS_MARKERS) for e in header.elements if e.name != "vertex"):
            return "inria-ply"
        return "mesh-ply"
    return "inria-ply"


def _looks_like_splat(path: str, size: int) -> bool:
    """Plausibility check of a headerless file as 32-byte .splat records (finite positions, positive scales)."""
    if size == 0 or size % 32:
        return False
    n = min(size // 32, 4096)
    rec = np.fromfile(path, dtype="<f4", count=n * 8).reshape(n, 8)
    with np.errstate(invalid="ignore", over="ignore"):
        pos, scale = rec[:, 0:3], rec[:, 3:6]
        ok = np.isfinite(pos).all() and np.isfinite(scale).all() and (scale > 0).all() and (np.abs(pos) < 1e8).all()
    return bool(ok)


def _is_binary_stl(head: bytes, size: int) -> bool:
    if size < 84 or len(head) < 84:
        return False
    (n,) = struct.unpack("<I", head[80:84])
    return size == 84 + 50 * n


def _looks_like_obj(head: bytes) -> bool:
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        return s.split()[0] in ("v", "vn", "vt", "f", "o", "g", "mtllib", "usemtl", "s")
    return False


def _is_gltf_splat(path: str, head: bytes) -> bool:
    """A GLB (JSON chunk) or .gltf (JSON text) whose JSON names KHR_gaussian_splatting; reads only the JSON."""
    try:
        if head[:4] == b"glTF":
            if len(head) < 20:
                return False
            json_len, kind = struct.unpack_from("<II", head, 12)
            if kind != 0x4E4F534A:  # "JSON"
                return False
            with open(path, "rb") as f:
                f.seek(20)
                text = f.read(min(json_len, 64 << 20))
        else:
            with open(path, "rb") as f:
                text = f.read(64 << 20)
    except OSError:
        return False
    return b'"KHR_gaussian_splatting"' in text


def detect_format(path) -> str:
    """Detect the format of the file at ``path`` from its content.

    Returns one of :data:`FORMATS`.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        IsADirectoryError: ``path`` is a directory.
        SceneFormatError: the file is empty, or its content matches no supported format (the message names
            the file and what was found).
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(21, "is a directory, expected a file", path)
    size = os.path.getsize(path)  # raises FileNotFoundError
    ext = os.path.splitext(path)[1].lower()
    if size == 0:
        raise SceneFormatError(f"{path}: empty file (0 bytes)")
    with open(path, "rb") as f:
        head = f.read(4096)

    if is_ply(head):
        return classify_ply(read_ply_header(path))
    if ext[1:] in UNSUPPORTED_CONTAINERS:
        return ext[1:]
    if head[:2] == b"\x1f\x8b":  # gzip: .spz is a gzipped stream starting with "NGSP"
        try:
            with gzip.open(path, "rb") as g:
                magic = g.read(4)
        except (OSError, EOFError, zlib.error):  # not gzip, truncated or corrupt deflate stream
            magic = b""
        if magic == b"NGSP":
            return "spz"
        raise SceneFormatError(f"{path}: gzip-compressed file of unknown content; decompress it first")
    if head[:8] == b"PXR-USDC" or head.lstrip()[:5] == b"#usda":
        return "usd"
    if head[:4] == b"PK\x03\x04":
        raise SceneFormatError(f"{path}: zip archive (SOG bundle?) is not supported; {CONVERT_HINT}")
    if (head[:4] == b"glTF" or ext == ".gltf") and _is_gltf_splat(path, head):
        return "gltf-splat"
    if head[:4] == b"glTF" or head.lstrip()[:5] == b"solid" or _is_binary_stl(head, size):
        return "mesh"
    if ext in MESH_EXTENSIONS and (_looks_like_obj(head) or ext in (".gltf", ".off", ".stl", ".glb")):
        return "mesh"
    if ext == ".splat":
        if size % 32:
            raise SceneFormatError(
                f"{path}: not a valid .splat file: size {size} bytes is not a multiple of the 32-byte record"
            )
        return "splat"
    if _looks_like_splat(path, size):
        return "splat"
    if _looks_like_obj(head):
        return "mesh"
    raise SceneFormatError(
        f"{path}: unrecognised file format (not an INRIA or compressed PLY, .splat, glTF splat or mesh file; first "
        f"bytes {head[:8]!r})"
    )
