"""Minimal PLY header parser and fixed-size binary element reader (formats.md sections 1 and 3).

The header is parsed here (not by plyfile) so that format detection, error messages that name missing
properties, and truncation checks need no pass over the data. Binary elements with fixed-size rows are
read with one ``numpy.fromfile`` each; ASCII files and elements with list properties go through plyfile.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from physskin_gs.errors import SceneFormatError

#: PLY scalar type names (including the sized aliases that occur in real files) -> numpy type code.
PLY_TYPES: Dict[str, str] = {
    "char": "i1", "int8": "i1",
    "uchar": "u1", "uint8": "u1",
    "short": "i2", "int16": "i2",
    "ushort": "u2", "uint16": "u2",
    "int": "i4", "int32": "i4",
    "uint": "u4", "uint32": "u4",
    "float": "f4", "float32": "f4",
    "double": "f8", "float64": "f8",
}

_MAX_HEADER_BYTES = 1 << 20

#: numpy type code -> PLY type name written by our writer.
PLY_TYPE_NAMES: Dict[str, str] = {"i1": "char", "u1": "uchar", "i2": "short", "u2": "ushort", "i4": "int",
                                  "u4": "uint", "f4": "float", "f8": "double"}


class SceneWarning(UserWarning):
    """A recoverable oddity in an input scene (ignored element, suspicious values, ...)."""


def warn(message: str) -> None:
    """Emit a :class:`SceneWarning` (collected by ``physskin-gs info`` into its ``warnings`` list)."""
    warnings.warn(message, SceneWarning, stacklevel=3)


@dataclass
class PlyProperty:
    """One ``property`` line of a PLY header; ``type`` is a numpy type code (for a list, its item type)."""

    name: str
    type: str  # numpy type code, e.g. "f4"; for lists the item type
    is_list: bool = False
    count_type: Optional[str] = None  # numpy type code of a list's length field


@dataclass
class PlyElement:
    """One ``element NAME COUNT`` of a PLY header with its properties in file order."""

    name: str
    count: int
    properties: List[PlyProperty] = field(default_factory=list)

    @property
    def names(self) -> List[str]:
        """Property names in file order (list properties included)."""
        return [p.name for p in self.properties]

    @property
    def has_lists(self) -> bool:
        """True when a row has a variable size (any list property)."""
        return any(p.is_list for p in self.properties)

    def dtype(self, byte_order: str) -> np.dtype:
        """Structured numpy dtype of one row (fixed-size elements only); ``byte_order`` is '<' or '>'."""
        return np.dtype([(p.name, byte_order + p.type) for p in self.properties])


@dataclass
class PlyHeader:
    """A parsed PLY header (:func:`read_ply_header`): ``data_offset`` is the byte offset of the first data byte."""

    path: str
    format: str  # "ascii" | "binary_little_endian" | "binary_big_endian"
    elements: List[PlyElement]
    data_offset: int  # byte offset of the first data byte
    comments: List[str] = field(default_factory=list)

    def element(self, name: str) -> Optional[PlyElement]:
        """The first element called ``name``, or None."""
        for e in self.elements:
            if e.name == name:
                return e
        return None

    @property
    def byte_order(self) -> str:
        """numpy byte-order prefix of the data, ``">"`` for binary big-endian, else ``"<"``."""
        return ">" if self.format == "binary_big_endian" else "<"


def is_ply(head: bytes) -> bool:
    """True when ``head`` (the first bytes of a file) starts with the PLY magic line."""
    return head[:4] == b"ply\n" or head[:5] == b"ply\r\n"


def read_ply_header(path: str) -> PlyHeader:
    """Parse the header of the PLY file at ``path`` (reads at most about 1 MiB, never the data).

    Raises:
        FileNotFoundError / OSError: the file cannot be opened.
        SceneFormatError: not a PLY file, header without ``end_header`` or over 1 MiB, unknown format/type, a
            property listed twice in one element, or a bad line.
    """
    with open(path, "rb") as f:
        buf = b""
        while b"end_header" not in buf:
            more = f.read(65536)
            if not more:
                break
            buf += more
            if len(buf) > _MAX_HEADER_BYTES:
                break
    if not is_ply(buf):
        raise SceneFormatError(f"{path}: not a PLY file (no 'ply' magic line)")
    end = buf.find(b"end_header")
    if end < 0 and len(buf) > _MAX_HEADER_BYTES:
        raise SceneFormatError(f"{path}: PLY header is larger than {_MAX_HEADER_BYTES >> 20} MiB (the limit) without "
                               "an 'end_header' line; not a usable splat file")
    if end > _MAX_HEADER_BYTES:
        raise SceneFormatError(f"{path}: PLY header is {end} bytes, larger than the {_MAX_HEADER_BYTES >> 20} MiB "
                               "limit; not a usable splat file")
    if end < 0:
        raise SceneFormatError(f"{path}: PLY header has no 'end_header' line (truncated or corrupt header)")
    nl = buf.find(b"\n", end)
    if nl < 0:
        raise SceneFormatError(f"{path}: PLY header is truncated after 'end_header'")
    data_offset = nl + 1
    text = buf[:end].decode("utf-8", errors="replace")  # only comments may hold non-ASCII text

    fmt: Optional[str] = None
    elements: List[PlyElement] = []
    comments: List[str] = []
    for lineno, raw in enumerate(text.splitlines()[1:], start=2):
        parts = raw.strip().split()
        if not parts:
            continue
        key = parts[0]
        if key == "format":
            if len(parts) < 2 or parts[1] not in ("ascii", "binary_little_endian", "binary_big_endian"):
                raise SceneFormatError(f"{path}: unsupported PLY format line {raw.strip()!r}")
            fmt = parts[1]
        elif key in ("comment", "obj_info"):
            comments.append(raw.strip()[len(key):].strip())
        elif key == "element":
            if len(parts) != 3:
                raise SceneFormatError(f"{path}: bad PLY header line {lineno}: {raw.strip()!r}")
            try:
                count = int(parts[2])
            except ValueError:
                raise SceneFormatError(f"{path}: bad element count in header line {lineno}: {raw.strip()!r}") from None
            if count < 0:
                raise SceneFormatError(f"{path}: negative element count in header line {lineno}")
            if any(e.name == parts[1] for e in elements):
                raise SceneFormatError(f"{path}: PLY element {parts[1]!r} occurs more than once (header line {lineno})")
            elements.append(PlyElement(parts[1], count))
        elif key == "property":
            if not elements:
                raise SceneFormatError(f"{path}: PLY property before any element (header line {lineno})")
            if len(parts) in (3, 5) and parts[-1] in elements[-1].names:
                raise SceneFormatError(f"{path}: PLY property {parts[-1]!r} occurs more than once in element "
                                       f"'{elements[-1].name}' (header line {lineno})")
            if len(parts) == 5 and parts[1] == "list":
                ct, it = PLY_TYPES.get(parts[2]), PLY_TYPES.get(parts[3])
                if ct is None or it is None:
                    raise SceneFormatError(f"{path}: unknown PLY type in header line {lineno}: {raw.strip()!r}")
                elements[-1].properties.append(PlyProperty(parts[4], it, True, ct))
            elif len(parts) == 3:
                t = PLY_TYPES.get(parts[1])
                if t is None:
                    raise SceneFormatError(f"{path}: unknown PLY type {parts[1]!r} in header line {lineno}")
                elements[-1].properties.append(PlyProperty(parts[2], t))
            else:
                raise SceneFormatError(f"{path}: bad PLY header line {lineno}: {raw.strip()!r}")
        else:
            raise SceneFormatError(f"{path}: unknown PLY header keyword {key!r} on line {lineno}")
    if fmt is None:
        raise SceneFormatError(f"{path}: PLY header has no 'format' line")
    return PlyHeader(path=path, format=fmt, elements=elements, data_offset=data_offset, comments=comments)


def read_elements(header: PlyHeader, wanted: Tuple[str, ...]) -> Dict[str, np.ndarray]:
    """Read the named elements of a PLY file as structured arrays (file byte order, not yet native).

    Binary files whose elements up to the last wanted one all have fixed-size rows are read directly with
    numpy; anything else (ASCII, list properties before a wanted element) goes through plyfile.

    Raises:
        SceneFormatError: the file is shorter than the header declares (truncated), or plyfile fails to parse it.
    """
    path = header.path
    last = max(i for i, e in enumerate(header.elements) if e.name in wanted)
    prefix = header.elements[: last + 1]
    if header.format != "ascii" and not any(e.has_lists for e in prefix):
        size = os.path.getsize(path)
        offset = header.data_offset
        out: Dict[str, np.ndarray] = {}
        for e in prefix:
            dt = e.dtype(header.byte_order)
            need = dt.itemsize * e.count
            if offset + need > size:
                have = max(size - offset, 0)
                raise SceneFormatError(
                    f"{path}: truncated file: element '{e.name}' needs {need} bytes "
                    f"({e.count} rows x {dt.itemsize} B) but only {have} bytes remain"
                )
            if e.name in wanted:
                out[e.name] = np.fromfile(path, dtype=dt, count=e.count, offset=offset)
            offset += need
        # Elements after the last wanted one are ignored by the caller; check they are complete.
        rest = header.elements[last + 1:]
        if rest and not any(e.has_lists for e in rest):
            need = sum(e.dtype(header.byte_order).itemsize * e.count for e in rest)
            if offset + need > size:
                warn(f"{path}: trailing element(s) {[e.name for e in rest]} are truncated (ignored)")
        elif not rest and offset < size:
            warn(f"{path}: {size - offset} unexpected trailing bytes after the last element (ignored)")
        return out
    return _read_with_plyfile(header, wanted)


def _read_with_plyfile(header: PlyHeader, wanted: Tuple[str, ...]) -> Dict[str, np.ndarray]:
    from plyfile import PlyData

    path = header.path
    # plyfile allocates every element's rows before reading them (object arrays for list properties are filled
    # in memory): refuse a count the file is too small to hold (each ASCII value takes >= 1 byte, each binary row
    # its scalars and list lengths) so that a tiny file cannot claim billions of rows
    remain = os.path.getsize(path) - header.data_offset
    for e in header.elements:
        if header.format == "ascii":
            row = len(e.properties)
        else:
            row = sum(np.dtype(p.count_type if p.is_list else p.type).itemsize for p in e.properties)
        if e.count * row > remain:
            raise SceneFormatError(f"{path}: truncated file: element '{e.name}' declares {e.count} rows, at least "
                                   f"{e.count * row} bytes, but only {max(remain, 0)} bytes follow the header")
        remain -= e.count * row
    try:
        ply = PlyData.read(path)
    except Exception as exc:  # plyfile raises several types (PlyParseError, ValueError, EOFError ...)
        raise SceneFormatError(f"{path}: malformed or truncated {header.format} PLY: {exc}") from None
    out = {}
    for name in wanted:
        if name in ply:
            data = ply[name].data
            if len(data) != ply[name].count:
                raise SceneFormatError(f"{path}: truncated file: element '{name}' has {len(data)} of {ply[name].count} rows")
            out[name] = data
    return out


#: Header comment that records the scene's up axis in the PLYs physskin_gs writes (``comment physskin_gs up_axis X Y Z``).
UP_COMMENT = "physskin_gs up_axis"


#: Header comment of a PLY whose Gaussians are one object and nothing else (sampled on a mesh):
#: ``GaussianScene.object_only``.
OBJECT_COMMENT = "physskin_gs object_only"


def up_comment(up) -> str:
    """The header comment line (without ``comment ``) for the (3,) up vector ``up``."""
    return f"{UP_COMMENT} " + " ".join(f"{float(v):.9g}" for v in up)


def up_from_comments(comments) -> "Optional[Tuple[float, float, float]]":
    """The up vector of the first ``up_comment`` among ``comments`` (header comment texts), scaled to unit length:
    a (3,) tuple of floats. None when there is no such comment or it is not three finite numbers with a non-zero
    length. Raises nothing."""
    import math

    for c in comments:
        if c.startswith(UP_COMMENT):
            try:
                v = tuple(float(x) for x in c[len(UP_COMMENT):].split())
            except ValueError:
                return None
            n = math.sqrt(sum(x * x for x in v)) if len(v) == 3 else 0.0
            if len(v) == 3 and all(math.isfinite(x) for x in v) and n > 0:
                return tuple(x / n for x in v)
            return None
    return None
