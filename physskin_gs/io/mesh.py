"""Triangle-mesh input (.obj, .ply, .stl, .glb/.gltf, .off) for training shapes and mesh-driven commands.

Meshes are read with trimesh, flattened to one mesh (``force='mesh'``), and welded: vertices at the same
position are merged even when their UVs or normals differ (UV seams) and STL triangle soups become indexed
meshes. Non-finite vertices and the faces that use them are dropped. OBJ files whose ``mtllib`` is missing
load normally (geometry only).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Optional, Sequence, Tuple

import numpy as np
import torch

from physskin_gs.errors import SceneFormatError
from physskin_gs.io.detect import UNSUPPORTED_CONTAINERS
from physskin_gs.io.ply_header import read_ply_header

#: File extensions accepted by :func:`load_mesh`.
MESH_EXTENSIONS = (".obj", ".ply", ".stl", ".glb", ".gltf", ".off")

#: PLY vertex properties that mark a 3D Gaussian Splatting file (formats.md 1).
_GAUSSIAN_PLY_PROPS = ("f_dc_0", "opacity", "scale_0", "rot_0")


@dataclass
class MeshColours:
    """The base colour of a mesh's surface, per face (the faces of the :class:`Mesh` it belongs to).

    Either ``corner_rgb`` (F, 3, 3) float32 in [0, 1] (vertex or face colours: each face's three corners), or
    ``corner_uv`` (F, 3, 2) float32 texture coordinates into ``texture`` (a PIL image); both times ``factor``
    (3,) float32 in [0, 1] (a material's colour: glTF's baseColorFactor, an OBJ material's Kd without a map).
    """

    factor: np.ndarray
    corner_rgb: Optional[np.ndarray] = None
    corner_uv: Optional[np.ndarray] = None
    texture: object = None

    def select(self, keep: np.ndarray) -> "MeshColours":
        """The colours of the faces ``keep`` (int indices), in that order."""
        return MeshColours(factor=self.factor,
                           corner_rgb=None if self.corner_rgb is None else self.corner_rgb[keep],
                           corner_uv=None if self.corner_uv is None else self.corner_uv[keep], texture=self.texture)

    def at(self, face: np.ndarray, bary: np.ndarray) -> np.ndarray:
        """(n, 3) float32 RGB in [0, 1] at points of the faces ``face`` (n,) with barycentric coordinates ``bary``
        (n, 3): corner colours interpolated, or the texture looked up (``trimesh.visual.uv_to_color``, nearest
        texel, wrapping) at the interpolated texture coordinates (white where trimesh cannot sample the image);
        times ``factor``. Raises nothing for a texture."""
        face = np.asarray(face, dtype=np.int64)
        b = np.asarray(bary, dtype=np.float64)[:, :, None]  # [n, 3, 1]
        if self.corner_rgb is not None:
            rgb = (b * self.corner_rgb[face]).sum(1)  # [n, 3]
        elif self.corner_uv is not None and self.texture is not None:
            from trimesh.visual import uv_to_color

            uv = (b * self.corner_uv[face]).sum(1)  # [n, 2]
            try:
                rgb = np.asarray(uv_to_color(uv, self.texture), dtype=np.float64)[:, :3] / 255.0
            except Exception:  # noqa: BLE001 - an image trimesh cannot sample: the material's colour alone
                rgb = np.ones((face.shape[0], 3))
        else:
            rgb = np.ones((face.shape[0], 3))
        return np.clip(rgb * self.factor[None, :], 0.0, 1.0).astype(np.float32)


def area_weighted_normals(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """(V, 3) float64 unit vertex normals of vertices (V, 3) float (any units) and faces (F, 3) int: at each vertex
    the sum of its faces' normals weighted by their areas, normalised (a vertex no face uses, or whose faces
    cancel, gets 0). Raises IndexError for a face index outside 0..V-1."""
    t = np.asarray(vertices, dtype=np.float64)[np.asarray(faces, dtype=np.int64)]  # [F, 3, 3]
    fn = np.cross(t[:, 1] - t[:, 0], t[:, 2] - t[:, 0])  # [F, 3] twice the area times the unit normal
    vn = np.zeros((np.asarray(vertices).shape[0], 3))
    for k in range(3):
        np.add.at(vn, faces[:, k], fn)
    return vn / np.maximum(np.linalg.norm(vn, axis=1, keepdims=True), 1e-30)


def _rgb(c) -> Optional[np.ndarray]:
    """(3,) float32 in [0, 1] from a trimesh colour (RGB(A), uint8 or float in [0, 1]), or None."""
    if c is None:
        return None
    a = np.asarray(c, dtype=np.float64).reshape(-1)
    if a.shape[0] < 3 or not np.all(np.isfinite(a[:3])):
        return None
    if a.max() > 1.0 or np.issubdtype(np.asarray(c).dtype, np.integer):
        a = a / 255.0
    return np.clip(a[:3], 0.0, 1.0).astype(np.float32)


def _colours_of(loaded) -> Optional[MeshColours]:
    """:class:`MeshColours` of a ``trimesh.Trimesh`` as loaded (its own faces), or None: vertex or face colours,
    a material's texture at the vertices' UVs (glTF PBR: baseColorTexture times baseColorFactor; OBJ: map_Kd, or
    Kd alone), or a material's plain colour. Never raises (a colour is a nicety: an odd visual gives None)."""
    try:
        v = loaded.visual
        faces = np.asarray(loaded.faces, dtype=np.int64)
        one = np.ones(3, dtype=np.float32)
        if v.kind == "vertex":
            vc = np.asarray(v.vertex_colors, dtype=np.float32)[:, :3] / 255.0
            return MeshColours(factor=one, corner_rgb=vc[faces])
        if v.kind == "face":
            fc = np.asarray(v.face_colors, dtype=np.float32)[:, :3] / 255.0
            return MeshColours(factor=one, corner_rgb=np.repeat(fc[:, None, :], 3, axis=1))
        if v.kind == "texture":
            mat = v.material  # glTF: PBRMaterial (baseColorTexture x baseColorFactor); OBJ: SimpleMaterial
            img = getattr(mat, "baseColorTexture", None)
            img = getattr(mat, "image", None) if img is None else img
            factor = _rgb(getattr(mat, "baseColorFactor", None))
            if factor is None and img is None:  # a plain material: its diffuse colour
                factor = _rgb(getattr(mat, "diffuse", None))
            factor = one if factor is None else factor
            uv = getattr(v, "uv", None)
            if img is not None and uv is not None and len(uv) == len(loaded.vertices):
                return MeshColours(factor=factor, corner_uv=np.asarray(uv, dtype=np.float32)[faces], texture=img)
            if not np.allclose(factor, 1.0):
                return MeshColours(factor=factor)
        return None
    except Exception:  # noqa: BLE001 - trimesh visuals come in many shapes; no colour is the safe answer
        return None


@dataclass
class Mesh:
    """An indexed triangle mesh.

    Attributes:
        vertices: (V, 3) float32 np.ndarray, file units.
        faces: (F, 3) int64 np.ndarray, indices into ``vertices``; F >= 1.
        source: the file it was read from (informational), or None.
        colours: the surface's base colour (:class:`MeshColours`: vertex or face colours, a texture, a material's
            colour), one entry per face; None when the file gives none.
        source_vertex, source_faces: the file's own vertex layout before welding, when it differs: (S,) int64, the
            welded vertex of each file vertex (those the faces use, in file order), and (F, 3) int64 faces into
            them (the same faces, same order, as ``faces``). Exported frames use it (:meth:`export_layout`).
    """

    vertices: np.ndarray
    faces: np.ndarray
    source: Optional[str] = None
    colours: Optional["MeshColours"] = None
    source_vertex: Optional[np.ndarray] = None
    source_faces: Optional[np.ndarray] = None
    # caches of export_normals (the file's hard edges, decided at rest) and vertex_rgb (computed once)
    _hard: Optional[np.ndarray] = field(default=None, init=False, repr=False, compare=False)
    _rgb: Optional[np.ndarray] = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.vertices = np.ascontiguousarray(self.vertices, dtype=np.float32)
        self.faces = np.ascontiguousarray(self.faces, dtype=np.int64)
        if self.vertices.ndim != 2 or self.vertices.shape[1] != 3:
            raise ValueError(f"Mesh.vertices has shape {self.vertices.shape}, expected (V, 3)")
        if self.faces.ndim != 2 or self.faces.shape[1] != 3:
            raise ValueError(f"Mesh.faces has shape {self.faces.shape}, expected (F, 3)")
        if self.faces.size and (self.faces.min() < 0 or self.faces.max() >= self.vertices.shape[0]):
            raise ValueError("Mesh.faces index outside the vertex array")
        if (self.source_vertex is None) != (self.source_faces is None):
            raise ValueError("Mesh.source_vertex and Mesh.source_faces come together")
        if self.source_faces is not None and (self.source_faces.shape != self.faces.shape
                                              or self.source_faces.max() >= self.source_vertex.shape[0]
                                              or self.source_vertex.min() < 0
                                              or self.source_vertex.max() >= self.vertices.shape[0]):
            raise ValueError("Mesh.source_vertex / source_faces do not match the mesh")

    @property
    def num_vertices(self) -> int:
        """V, the number of vertices."""
        return int(self.vertices.shape[0])

    @property
    def num_faces(self) -> int:
        """F, the number of triangles."""
        return int(self.faces.shape[0])

    @property
    def name(self) -> str:
        """File name of the source (e.g. ``c3d_spot.obj``), or ``"mesh"``."""
        return os.path.basename(self.source) if self.source else "mesh"

    def triangles(self) -> np.ndarray:
        """(F, 3, 3) float64 corner positions of every face."""
        return self.vertices.astype(np.float64)[self.faces]

    def vertices_torch(self) -> torch.Tensor:
        """(V, 3) float32 tensor copy of the vertices."""
        return torch.from_numpy(self.vertices.copy())

    def faces_torch(self) -> torch.Tensor:
        """(F, 3) int64 tensor copy of the faces."""
        return torch.from_numpy(self.faces.copy())

    def export_layout(self) -> Tuple[np.ndarray, np.ndarray]:
        """(vertex (S,) int64, faces (F, 3) int64): the vertices a frame writes, as indices into :attr:`vertices`,
        and its faces into them: the file's own layout (its vertex order, UV seams and hard edges, so a flat-shaded
        model stays flat and frames match the file point for point) when welding changed it or its order, else the
        welded mesh."""
        if self.source_vertex is not None and self.source_faces is not None:
            return self.source_vertex, self.source_faces
        return np.arange(self.num_vertices, dtype=np.int64), self.faces

    def export_normals(self, vertices: np.ndarray) -> np.ndarray:
        """(S, 3) float64 unit normals of :meth:`export_layout`'s vertices for the welded mesh's vertex positions
        ``vertices`` (V, 3) (e.g. a deformed frame): area-weighted face normals averaged over the welded mesh (smooth
        across UV seams), except at the file's hard edges, where a vertex takes the average over its own faces in
        the file's layout (a flat-shaded model stays flat). A hard edge is where, at rest, the two differ by more
        than 30 degrees (decided once per mesh). Raises nothing."""
        vertex, faces = self.export_layout()
        smooth = area_weighted_normals(vertices, self.faces)[vertex]  # [S, 3]
        if self.source_faces is None:
            return smooth
        own = area_weighted_normals(np.asarray(vertices)[vertex], faces)  # [S, 3]
        if self._hard is None:  # at rest: the file's hard edges
            rest_s = area_weighted_normals(self.vertices, self.faces)[vertex]
            rest_o = area_weighted_normals(self.vertices[vertex], faces)
            self._hard = np.einsum("sc,sc->s", rest_s, rest_o) < np.cos(np.deg2rad(30.0))
        return np.where(self._hard[:, None], own, smooth)

    def vertex_rgb(self) -> Optional[np.ndarray]:
        """(S, 3) float32 RGB in [0, 1] per vertex of :meth:`export_layout`: the mean of the :attr:`colours` at the
        corners that meet there (exact where the file's vertices carry one colour: vertex colours, palette
        textures; a texture varying across a face is averaged), or None without colours. Computed once."""
        if self.colours is None or self._rgb is not None:
            return self._rgb
        vertex, faces = self.export_layout()
        F, S = faces.shape[0], vertex.shape[0]
        corner = np.concatenate([self.colours.at(np.arange(F), np.tile(e, (F, 1))) for e in np.eye(3)])  # [3F, 3]
        idx = faces.T.reshape(-1)  # [3F] vertex of each corner, in the same (corner, face) order
        out = np.zeros((S, 3))
        np.add.at(out, idx, corner)
        count = np.bincount(idx, minlength=S)[:, None]
        self._rgb = (out / np.maximum(count, 1)).astype(np.float32)
        return self._rgb

    def to_trimesh(self):
        """A ``trimesh.Trimesh`` view (no processing)."""
        import trimesh

        return trimesh.Trimesh(vertices=self.vertices, faces=self.faces, process=False)


def _ply_vertex_properties(path: str) -> Optional[tuple]:
    """(vertex property names, element names) from a PLY header, or None when the header is unreadable."""
    try:
        header = read_ply_header(path)
    except (SceneFormatError, OSError):
        return None
    vertex = header.element("vertex")
    return (vertex.names if vertex is not None else []), [e.name for e in header.elements]


def load_mesh(path: str, *, weld: bool = True) -> Mesh:
    """Read a triangle mesh file into a welded :class:`Mesh`.

    Args:
        path: a .obj, .ply, .stl, .glb/.gltf or .off file. Scenes with several parts are concatenated.
        weld: merge vertices at identical positions, ignoring UV and normal differences (UV seams, STL
            triangle soups). Degenerate (repeated-index) faces are then dropped.

    Returns:
        Mesh with (V, 3) float32 vertices in file units and (F, 3) int64 faces.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        SceneFormatError: unknown extension, unreadable or empty file, vertices but no faces (a point cloud; the
            message gives the vertex count), a 3D Gaussian Splatting PLY or ``.splat`` file (use
            ``physskin_gs.io.load_scene``), no finite vertices left, or no face of positive area
            (:func:`has_positive_area`). The message names the file.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: mesh file not found")
    if os.path.isdir(path):
        raise SceneFormatError(f"{path}: is a directory, not a mesh file")
    ext = os.path.splitext(path)[1].lower()
    if ext == ".splat" or ext[1:] in UNSUPPORTED_CONTAINERS:
        raise SceneFormatError(f"{path}: is a Gaussian splat file, not a mesh; use physskin_gs.io.load_scene")
    if ext not in MESH_EXTENSIONS:
        raise SceneFormatError(
            f"{path}: unsupported mesh extension {ext!r}; expected one of {', '.join(MESH_EXTENSIONS)}"
        )
    if os.path.getsize(path) == 0:
        raise SceneFormatError(f"{path}: empty file")
    if ext == ".ply":
        info = _ply_vertex_properties(path)
        if info is not None:
            props, elements = info
            if "chunk" in elements or any(p.startswith("packed_") for p in props):
                raise SceneFormatError(
                    f"{path}: is a compressed Gaussian splat PLY, not a mesh; use physskin_gs.io.load_scene"
                )
            if any(p in props for p in _GAUSSIAN_PLY_PROPS):
                raise SceneFormatError(
                    f"{path}: is a 3D Gaussian Splatting PLY (has {', '.join(p for p in _GAUSSIAN_PLY_PROPS if p in props)}),"
                    " not a mesh; use physskin_gs.io.load_scene"
                )
            if "face" not in elements and "tristrips" in elements:  # Stanford-style strips (igea, dragon scans)
                vertices, faces = _read_ply_tristrips(path)
                return _finish(path, vertices, faces, weld)
            if "face" not in elements:
                raise SceneFormatError(f"{path}: PLY has no 'face' element: a point cloud, not a triangle mesh")

    import trimesh

    # trimesh logs (does not raise) a missing OBJ mtllib / texture; keep that quiet.
    logger = logging.getLogger("trimesh")
    old_level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        loaded = trimesh.load(path, force="mesh", process=False)
    except Exception as exc:  # trimesh raises many types on malformed files
        raise SceneFormatError(f"{path}: could not read as a mesh ({type(exc).__name__}: {exc})") from exc
    finally:
        logger.setLevel(old_level)

    if isinstance(loaded, trimesh.PointCloud):
        raise SceneFormatError(f"{path}: contains a point cloud with no faces, not a triangle mesh")
    if not isinstance(loaded, trimesh.Trimesh):
        raise SceneFormatError(f"{path}: no triangle mesh found (got {type(loaded).__name__})")
    vertices = np.asarray(loaded.vertices, dtype=np.float64)
    faces = np.asarray(loaded.faces, dtype=np.int64).reshape(-1, 3)
    if vertices.shape[0] == 0:
        # trimesh's forced mesh drops the vertices of a face-less file (an OBJ of 'v' lines only): count them
        n = _unforced_vertex_count(path)
        if n > 0:
            raise SceneFormatError(f"{path}: mesh has {n} vertices but no faces (a point cloud, not a triangle mesh)")
        raise SceneFormatError(f"{path}: mesh has no vertices (empty or unreadable file)")
    if faces.shape[0] == 0:
        raise SceneFormatError(f"{path}: mesh has {vertices.shape[0]} vertices but no faces (a point cloud, not a "
                               "triangle mesh)")

    # an OBJ with texture coordinates but no material library at all gets trimesh's default grey material too
    stand_in = (ext == ".obj" and (_missing_mtl(path) or (
        getattr(loaded.visual, "kind", None) == "texture" and not _names_mtl(path)))) or (
        ext == ".ply" and getattr(loaded.visual, "kind", None) == "texture" and _missing_ply_texture(path))
    colours = None if stand_in else _colours_of(loaded)  # (trimesh's stand-in grey)
    return _finish(path, vertices, faces, weld, colours)


def _missing_ply_texture(path: str) -> bool:
    """True when a PLY's header names no texture image (``comment TextureFile NAME``) that is beside it
    (:func:`mesh_sidecars`): its texture coordinates then point into trimesh's stand-in grey image, which is not
    the model's colour. Raises nothing."""
    return not mesh_sidecars(path)


def _names_mtl(path: str) -> bool:
    """True when an OBJ has a ``mtllib`` line (whether or not the library is there). Raises nothing."""
    try:
        with open(path, "rb") as f:
            return any(line.startswith(b"mtllib") for line in f)
    except OSError:
        return False


#: MTL statements that name an image file (the file name is the statement's last token, after any options).
_MTL_MAPS = (b"map_", b"bump", b"disp", b"decal", b"norm", b"refl")


def _named_files(folder: str, rest: bytes) -> list:
    """The existing files in ``folder`` that a statement's remainder ``rest`` names: any tail of its words (the
    whole remainder, a name with spaces after options such as ``-s 1 1 1``, the last word)."""
    words = rest.strip().decode("utf-8", "replace").split()
    out = []
    for name in dict.fromkeys(" ".join(words[i:]) for i in range(len(words))):
        if name and os.path.isfile(os.path.join(folder, name)):
            out.append(os.path.join(folder, name))
    return out


def mesh_sidecars(path: str) -> list:
    """The files beside a mesh that loading it reads: an OBJ's material libraries (``mtllib``) and the images
    they name (``map_Kd`` and the other maps), a PLY's texture image (``comment TextureFile NAME``). Only files
    that exist, as paths joined to the mesh's folder; an empty list for other formats or an unreadable file.
    Outputs must never replace them (a render named like the texture replaced it). Raises nothing."""
    folder = os.path.dirname(os.path.abspath(path))
    ext = os.path.splitext(path)[1].lower()
    out: list = []
    try:
        if ext == ".obj":
            libs = []
            with open(path, "rb") as f:
                for line in f:
                    if line.startswith(b"mtllib"):
                        libs += _named_files(folder, line[6:])
            out += libs
            for lib in libs:
                lib_folder = os.path.dirname(lib)
                with open(lib, "rb") as f:
                    for line in f:
                        s = line.lstrip()
                        if s.lower().startswith(_MTL_MAPS):
                            word = s.split(None, 1)
                            if len(word) == 2:
                                out += _named_files(lib_folder, word[1])
        elif ext == ".ply":
            for c in read_ply_header(path).comments:
                if c.lower().startswith("texturefile"):
                    out += _named_files(folder, c[len("texturefile"):].encode("utf-8"))
    except (OSError, SceneFormatError):
        pass
    return list(dict.fromkeys(out))


def _missing_mtl(path: str) -> bool:
    """True when an OBJ names a material library (``mtllib``) that is not beside it: trimesh then stands in a
    default grey material, which is not the model's colour. Raises nothing."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.startswith(b"mtllib"):
                    name = line[6:].strip().decode("utf-8", "replace")
                    if name and not os.path.isfile(os.path.join(folder, name)):
                        return True
    except OSError:
        return True
    return False


def _finish(path: str, vertices: np.ndarray, faces: np.ndarray, weld: bool,
            colours: Optional[MeshColours] = None) -> Mesh:
    """:func:`load_mesh`'s last stage: clean (and weld) the arrays and check that a surface is left."""
    original = np.asarray(faces, dtype=np.int64)
    bad = ~np.isfinite(np.asarray(vertices, dtype=np.float64)).all(axis=1)  # [V]
    if bad.any():  # (dropped silently before: a fresh user's tetrahedron came back as one triangle)
        import warnings

        from physskin_gs.io.ply_header import SceneWarning

        n_faces = int(bad[np.clip(original, 0, bad.shape[0] - 1)].any(axis=1).sum()) if original.size else 0
        warnings.warn(f"{path}: {int(bad.sum())} vertices with non-finite coordinates dropped, and the {n_faces} "
                      "faces that use them", SceneWarning, stacklevel=3)
    vertices, faces, kept, to_out = _clean(vertices, faces, weld=weld)
    if vertices.shape[0] == 0 or faces.shape[0] == 0:
        raise SceneFormatError(f"{path}: no valid faces left after dropping non-finite vertices and degenerate faces")
    if not has_positive_area(vertices, faces):
        raise SceneFormatError(f"{path}: all {faces.shape[0]} faces have zero area (their corners are collinear); "
                               "there is no surface to sample")
    # the file's own vertex layout (before welding): exported frames keep its vertex order, UV seams and hard edges
    used_src, src_faces = np.unique(original[kept], return_inverse=True)
    layout = None
    if used_src.shape[0] != vertices.shape[0] or not np.array_equal(to_out[used_src],
                                                                     np.arange(vertices.shape[0])):
        # (welding sorts the vertices even where it merges none: a file with no seams came out sorted by x)
        layout = (to_out[used_src], src_faces.reshape(-1, 3).astype(np.int64))
    return Mesh(vertices=vertices.astype(np.float32), faces=faces, source=path,
                colours=None if colours is None else colours.select(kept),
                source_vertex=None if layout is None else layout[0],
                source_faces=None if layout is None else layout[1])


def strips_to_triangles(strips: Sequence[np.ndarray]) -> np.ndarray:
    """(F, 3) int64 triangles of triangle strips: each strip a sequence of vertex indices in which ``-1`` starts a
    new strip (the PLY ``tristrips`` convention); triangle k of a strip is (s[k], s[k+1], s[k+2]) with the first two
    swapped for odd k, so every triangle keeps the strip's winding. Triangles with a repeated index (the joins
    strippers make on purpose) are dropped. Raises nothing."""
    tris = []
    for strip in strips:
        a = np.asarray(strip, dtype=np.int64).reshape(-1)
        cuts = np.flatnonzero(a < 0)
        for run in np.split(a, cuts):
            run = run[run >= 0]
            if run.size < 3:
                continue
            k = np.arange(run.size - 2)
            t = np.stack([run[k], run[k + 1], run[k + 2]], 1)  # [n - 2, 3]
            odd = (k % 2) == 1
            t[odd, 0], t[odd, 1] = t[odd, 1], t[odd, 0].copy()
            tris.append(t)
    if not tris:
        return np.zeros((0, 3), np.int64)
    t = np.concatenate(tris)
    return t[_distinct_corners(t)]


def _distinct_corners(faces: np.ndarray) -> np.ndarray:
    """(F,) bool: the faces (F, 3) whose three vertex indices differ."""
    return (faces[:, 0] != faces[:, 1]) & (faces[:, 1] != faces[:, 2]) & (faces[:, 0] != faces[:, 2])


def _read_ply_tristrips(path: str) -> Tuple[np.ndarray, np.ndarray]:
    """(vertices (V, 3) float64, faces (F, 3) int64) of a PLY whose faces are a ``tristrips`` element (plyfile reads
    it; trimesh reads no faces from it). Raises SceneFormatError for an unreadable file or indices out of range."""
    from plyfile import PlyData

    try:
        ply = PlyData.read(path)
        v = ply["vertex"]
        vertices = np.stack([np.asarray(v[c], dtype=np.float64) for c in ("x", "y", "z")], 1)
        el = ply["tristrips"]
        name = "vertex_indices" if "vertex_indices" in el.data.dtype.names else el.data.dtype.names[0]
        faces = strips_to_triangles(list(el[name]))
    except Exception as exc:  # plyfile raises several types on malformed files
        raise SceneFormatError(f"{path}: could not read its triangle strips ({type(exc).__name__}: {exc})") from exc
    if faces.size and (faces.max() >= vertices.shape[0]):
        raise SceneFormatError(f"{path}: a triangle strip refers to vertex {int(faces.max())}, but the file has "
                               f"{vertices.shape[0]} vertices")
    if faces.shape[0] == 0:
        raise SceneFormatError(f"{path}: mesh has {vertices.shape[0]} vertices but its triangle strips hold no "
                               "triangle (a point cloud, not a triangle mesh)")
    return vertices, faces


#: A face has positive area when twice its area exceeds this fraction of the squared bounding-box diagonal.
ZERO_AREA_TOLERANCE = 1e-12


def has_positive_area(vertices: np.ndarray, faces: np.ndarray) -> bool:
    """Whether any face of a mesh has positive area: ``|(b - a) x (c - a)|`` above :data:`ZERO_AREA_TOLERANCE`
    times the squared diagonal of the vertices' bounding box (so rounding on collinear corners does not count).
    vertices (V, 3) finite floats, faces (F, 3) int indices. Raises nothing."""
    v = np.asarray(vertices, dtype=np.float64)
    f = np.asarray(faces, dtype=np.int64).reshape(-1, 3)
    if f.shape[0] == 0 or v.shape[0] == 0:
        return False
    diag2 = float(((v.max(0) - v.min(0)) ** 2).sum())
    tri = v[f]
    dbl = np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]), axis=1)  # [F] twice the area
    return bool(diag2 > 0 and (dbl > ZERO_AREA_TOLERANCE * diag2).any())


def _unforced_vertex_count(path: str) -> int:
    """Vertices trimesh reads from ``path`` without forcing a mesh (a point cloud keeps them); 0 when none or
    unreadable."""
    import trimesh

    logger = logging.getLogger("trimesh")
    old_level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        loaded = trimesh.load(path, process=False)
    except Exception:  # noqa: BLE001 - only a count for the message
        return 0
    finally:
        logger.setLevel(old_level)
    geoms = list(loaded.geometry.values()) if isinstance(loaded, trimesh.Scene) else [loaded]
    return int(sum(np.asarray(getattr(g, "vertices", np.zeros((0, 3)))).shape[0] for g in geoms))


def _clean(vertices: np.ndarray, faces: np.ndarray, *, weld: bool) -> tuple:
    """Drop non-finite vertices (and their faces), optionally weld identical positions, drop repeated-index
    faces, and remove unreferenced vertices. Returns (vertices (V', 3) float64, faces (F', 3) int64, kept (F',)
    int64: the input face each output face is, to_out (V,) int64: the output vertex of each input vertex, -1 for
    none)."""
    ok = np.isfinite(vertices).all(axis=1)  # [V]
    kept = np.arange(faces.shape[0], dtype=np.int64)
    inside = (faces >= 0).all(axis=1) & (faces < vertices.shape[0]).all(axis=1)
    faces, kept = faces[inside], kept[inside]
    fine = ok[faces].all(axis=1)
    faces, kept = faces[fine], kept[fine]
    if weld:
        # Merge exactly coincident positions (UV/normal seams, STL soups). Non-finite rows are unreferenced.
        v = np.where(ok[:, None], vertices, 0.0)
        _, inverse = np.unique(v, axis=0, return_inverse=True)
        faces = inverse.reshape(-1)[faces]
    proper = _distinct_corners(faces)
    faces, kept = faces[proper], kept[proper]
    used = np.unique(faces.reshape(-1))
    remap = np.full(vertices.shape[0], -1, dtype=np.int64)
    remap[used] = np.arange(used.shape[0])
    if weld:
        # Representative position for each welded id: any vertex mapped to it (all are identical).
        rep = np.zeros((int(inverse.max()) + 1 if inverse.size else 0, 3))
        rep[inverse.reshape(-1)] = np.where(ok[:, None], vertices, 0.0)
        return rep[used], remap[faces], kept, remap[inverse.reshape(-1)]
    return vertices[used], remap[faces], kept, remap
