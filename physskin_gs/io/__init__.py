"""Reading and writing Gaussian scenes and meshes (the lowest layer; formats.md sections 1-4, 7).

- :func:`load_scene`: INRIA 3DGS PLY (ascii / binary LE / binary BE), antimatter15 ``.splat``, PlayCanvas
  compressed PLY, glTF ``KHR_gaussian_splatting``, OpenUSD; detected by content (:func:`detect_format`).
- :func:`save_scene`: INRIA binary little-endian float32 PLY, raw values, atomic write.
- :func:`validate` / :func:`drop_invalid`: sanitising report and removal of unusable rows.
- :func:`load_mesh`: meshes via trimesh (implemented in :mod:`physskin_gs.io.mesh`).
"""

from __future__ import annotations

import os

from physskin_gs.errors import OptionError, SceneFormatError
from physskin_gs.io.detect import CONVERT_HINT, MESH_HINT, UNSUPPORTED_CONTAINERS, detect_format
from physskin_gs.io.ply_header import SceneWarning
from physskin_gs.io.validate import drop_invalid, finite_bbox, invalid_mask, validate
from physskin_gs.scene import GaussianScene

__all__ = [
    "load_scene",
    "save_scene",
    "detect_format",
    "validate",
    "drop_invalid",
    "invalid_mask",
    "finite_bbox",
    "load_mesh",
    "SceneWarning",
]


def load_scene(path, quat_order: str = "wxyz") -> GaussianScene:
    """Load a Gaussian scene, detecting the format from the file content.

    Supported: INRIA 3DGS PLY (SH degree 0-4, with or without normals, extra vertex properties kept in
    ``scene.extra``, extra elements ignored with a :class:`SceneWarning`; ascii, binary little- and big-endian;
    double properties cast to float32), antimatter15 ``.splat``, PlayCanvas/SuperSplat compressed PLY
    (decoded), glTF / GLB with ``KHR_gaussian_splatting`` (:func:`physskin_gs.io.gltf.load_gltf`: values in
    glTF axes and units (+Y up, metres), node transforms baked in) and OpenUSD ``ParticleField3DGaussianSplat``
    prims (:func:`physskin_gs.io.usd.load_usd`: the default-time values, i.e. the rest state of an animation, in
    the prims' local space; needs usd-core).

    Args:
        path: file path (str or PathLike).
        quat_order: component order of the stored quaternion, ``"wxyz"`` (default; INRIA, .splat) or
            ``"xyzw"`` (some third-party exporters). Never guessed. Checked for every format, but only the INRIA
            PLY and ``.splat`` readers use it: a compressed PLY, a glTF file (always xyzw in the file, by the
            extension) and an OpenUSD file (GfQuatf) fix their order and need the default ``"wxyz"`` (OptionError
            otherwise: an order given for them was ignored).

    Returns:
        GaussianScene (float32 CPU tensors) of N Gaussians: means (N, 3), quats (N, 4) wxyz, log_scales (N, 3)
        (log of the linear standard deviations), opacity_logits (N,), sh_dc (N, 3), sh_rest (N, K, 3), raw 3DGS
        values. Quaternions are returned as the file stores them, not normalised: an INRIA PLY may hold any norm;
        glTF and OpenUSD files hold unit ones (the glTF extension requires it, our USD writer normalises), read
        from their xyzw layout (glTF: with the node transforms baked in; missing USD orientations are the
        identity); .splat and compressed PLY decode to unit quaternions.
        glTF and OpenUSD store activated values, inverted here: log_scales = log(max(scale, 1.18e-38)),
        opacity_logits = logit(clip(opacity, 1.18e-38, 1 - 2**-24)). ``scene.source`` = absolute path;
        ``scene.format`` = ``"inria-ply"``, ``"splat"``, ``"compressed-ply"``, ``"gltf-gaussian-splatting"`` or
        ``"openusd"`` (for glTF and OpenUSD not the name :func:`detect_format` gives, ``"gltf-splat"`` / ``"usd"``).

    Raises:
        FileNotFoundError: missing file.
        SceneFormatError: empty file, mesh or point-cloud PLY (names the missing 3DGS fields), mesh file,
            2DGS PLY, bad f_rest count, truncated file, short compressed chunk table, unsupported container
            (.ksplat/.spz/.sog/.lcc), unrecognised content, a glTF / OpenUSD file without a readable splat
            primitive / prim (see :func:`~physskin_gs.io.gltf.load_gltf`, :func:`~physskin_gs.io.usd.load_usd`).
            The message names the file and the problem.
        OptionError: unknown ``quat_order``; ``"xyzw"`` for a compressed PLY, glTF or OpenUSD file; an OpenUSD file
            when usd-core is
            not installed (the message names the install command).
    """
    path = os.fspath(path)
    if quat_order not in ("wxyz", "xyzw"):
        raise OptionError(f"quat_order must be 'wxyz' or 'xyzw', got {quat_order!r}")
    fmt = detect_format(path)
    if quat_order != "wxyz" and fmt in ("usd", "gltf-splat"):
        what = "a glTF file stores xyzw rotations, as its extension fixes" if fmt == "gltf-splat" else \
            "an OpenUSD file stores its rotations as quaternions (GfQuatf), whose order the schema fixes"
        raise OptionError(f"quat order {quat_order} (--quat-order): {what}; leave the order at wxyz (the default): "
                          "it is for INRIA PLY and .splat files from exporters that write xyzw")
    if fmt == "inria-ply" or fmt == "mesh-ply" or fmt == "2dgs-ply":
        from physskin_gs.io.inria_ply import load_inria_ply

        return load_inria_ply(path, quat_order=quat_order)  # mesh / 2DGS raise a specific SceneFormatError
    if fmt == "compressed-ply":
        from physskin_gs.io.compressed_ply import load_compressed_ply

        return load_compressed_ply(path, quat_order=quat_order)
    if fmt == "splat":
        from physskin_gs.io.splat import load_splat

        return load_splat(path, quat_order=quat_order)
    if fmt == "usd":
        from physskin_gs.io.usd import load_usd

        return load_usd(path)  # the splat prims' default values (the rest state of an animation), scene axes
    if fmt == "gltf-splat":
        from physskin_gs.io.gltf import load_gltf

        return load_gltf(path)  # glTF axes (+Y up, metres); the file stores xyzw quaternions, returned as wxyz
    if fmt == "mesh":
        raise SceneFormatError(f"{path}: this is a mesh file, not a Gaussian scene; {MESH_HINT}")
    if fmt in UNSUPPORTED_CONTAINERS:
        raise SceneFormatError(f"{path}: {UNSUPPORTED_CONTAINERS[fmt]} files are not supported; {CONVERT_HINT}")
    raise SceneFormatError(f"{path}: unsupported format {fmt!r}")  # pragma: no cover


def save_scene(scene: GaussianScene, path) -> str:
    """Write ``scene`` as an INRIA 3DGS PLY (binary little-endian float32, raw values, atomic write).

    Property order: x y z nx ny nz f_dc_0..2 f_rest_* (channel-major) opacity scale_0..2 rot_0..3, then
    ``scene.extra`` in insertion order (integer-typed extras keep their PLY type; normals are the scene's ``nx ny
    nz`` extras when it has them, else zeros). Load -> save -> load reproduces every raw array bit for bit.

    The header records ``scene.up_hint`` when it is set (``comment physskin_gs up_axis X Y Z``) and
    ``scene.object_only``; nothing is analysed here: ``physskin-gs convert`` sets the up hint first from the
    scene analysis (or ``--up``), so that its PLY stands as the input did. An existing file at ``path`` is replaced
    (the CLI's ``--force`` rule is the CLI's); only the scene's own input file is refused.

    Returns:
        The absolute output path.

    Raises:
        OptionError: ``path`` is the scene's input file (``scene.source``) or a directory.
        SceneFormatError: inconsistent scene (SH size, extra names clashing with INRIA names).
    """
    from physskin_gs.io.inria_ply import save_inria_ply

    return save_inria_ply(scene, path)


def load_mesh(*args, **kwargs):
    """Load a mesh (.obj/.ply/.stl/.glb via trimesh); see :func:`physskin_gs.io.mesh.load_mesh`."""
    from physskin_gs.io.mesh import load_mesh as _load_mesh

    return _load_mesh(*args, **kwargs)
