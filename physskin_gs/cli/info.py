"""``physskin-gs info PATH [--json]``: format, counts, SH degree, bounds and a sanitising report."""

from __future__ import annotations

import json
import math
import warnings

from physskin_gs.errors import SceneFormatError


def register(sub) -> None:
    """Add the ``info`` parser to ``sub`` (an argparse subparsers object)."""
    p = sub.add_parser(
        "info",
        help="describe a Gaussian scene (or mesh) file: format, counts, SH degree, bounds, problems",
        description="Describe a Gaussian scene (INRIA PLY, .splat, compressed PLY) or a mesh file.",
    )
    p.add_argument("path", help="scene or mesh file")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    p.add_argument(
        "--quat-order", choices=["wxyz", "xyzw"], default="wxyz",
        help="component order of stored quaternions (default wxyz, as INRIA and .splat)",
    )
    p.set_defaults(func=run)


def scene_info(path: str, quat_order: str = "wxyz") -> dict:
    """Info dict for a scene or mesh file (keys: format, num_gaussians, sh_degree, bbox_min, bbox_max,
    warnings, plus the :func:`physskin_gs.io.validate` counts and its robust ``extent``; for meshes
    num_vertices/num_faces instead).

    ``up_known`` ((3,) list, or None) is an up the file records (our exports, glTF, an OpenUSD stage) or, for an
    INRIA PLY in its trainer's folder, its cameras' up (:func:`physskin_gs.pipeline.with_camera_up`), with
    ``up_known_source`` saying which. ``warnings`` holds the loader's warnings, then validate's. Sizes are judged
    relative to the scene's robust extent, so the same capture in other units (means times s, log-scales plus
    log s) gets the same warnings.

    Raises:
        SceneFormatError / FileNotFoundError: unreadable file (see :func:`physskin_gs.io.load_scene`).
    """
    from physskin_gs.cli._common import require_input_file
    from physskin_gs.io import detect_format, finite_bbox, load_scene, validate

    require_input_file(path)
    fmt = detect_format(path)
    if fmt in ("mesh", "mesh-ply"):
        return _mesh_info(path, fmt)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from physskin_gs.pipeline import with_camera_up

        scene = with_camera_up(load_scene(path, quat_order=quat_order), path)
    rep = validate(scene)
    lo, hi = finite_bbox(scene)
    info = {
        "path": path,
        "format": scene.format,
        "num_gaussians": scene.num_gaussians,
        "sh_degree": scene.sh_degree,
        "bbox_min": lo,
        "bbox_max": hi,
        "extra_properties": list(scene.extra),
        "up_known": None if scene.up_hint is None else list(scene.up_hint),
        "up_known_source": None if scene.up_hint is None else (scene.up_hint_source or "recorded in the file"),
        "warnings": [str(w.message) for w in caught] + rep.pop("warnings"),
    }
    info.update({k: v for k, v in rep.items() if k != "num_gaussians"})
    if scene.format == "openusd":
        from physskin_gs.io.usd import usd_frame_range, usd_meters_per_unit

        span = usd_frame_range(path)
        info["frames"] = None if span is None else [span[0], span[1]]
        info["meters_per_unit"] = usd_meters_per_unit(path)
    return info


def _mesh_info(path: str, fmt: str) -> dict:
    try:
        from physskin_gs.io import load_mesh

        mesh = load_mesh(path)
    except SceneFormatError:
        raise
    except Exception as exc:  # mesh loader missing or failing: describe what we can from the header
        if fmt == "mesh-ply":
            from physskin_gs.io.inria_ply import missing_fields
            from physskin_gs.io.ply_header import read_ply_header

            h = read_ply_header(path)
            v, fc = h.element("vertex"), h.element("face")
            return {
                "path": path, "format": "mesh-ply", "num_gaussians": 0, "sh_degree": None,
                "num_vertices": v.count if v else 0, "num_faces": fc.count if fc else 0,
                "bbox_min": None, "bbox_max": None,
                "warnings": [f"not a 3DGS PLY: missing {', '.join(missing_fields(v.names if v else []))}",
                             f"mesh loader unavailable: {exc}"],
            }
        raise SceneFormatError(f"{path}: cannot read mesh: {exc}") from None
    v, f = mesh.vertices, mesh.faces  # [V, 3] float32, [F, 3] int64
    warn = ["this is a mesh, not a Gaussian scene: commands that accept meshes sample Gaussians from it"]
    try:  # the file's own count (UV seams and flat normals split vertices; the commands work on the welded ones)
        in_file = int(load_mesh(path, weld=False).vertices.shape[0])
    except Exception:  # noqa: BLE001 - the welded count stands alone
        in_file = int(v.shape[0])
    return {
        "path": path, "format": "mesh" if fmt == "mesh" else "mesh-ply", "num_gaussians": 0, "sh_degree": None,
        "num_vertices": int(v.shape[0]), "num_vertices_in_file": in_file, "num_faces": int(f.shape[0]),
        "bbox_min": v.min(0).tolist() if len(v) else None, "bbox_max": v.max(0).tolist() if len(v) else None,
        "warnings": warn,
    }


def _fmt_vec(v, digits: int = 4) -> str:
    return "[" + ", ".join("n/a" if x is None else f"{x:.{digits}g}" for x in v) + "]" if v is not None else "n/a"


def _bbox_digits(lo, hi) -> int:
    """Significant digits that show a box's extent as well as 4 digits show a box at the origin: more for a box
    far from it (a capture 1e5 units out, 1 unit across, printed [1e+05, ...] for both corners), at most 9."""
    try:
        size = max(b - a for a, b in zip(lo, hi))
        far = max(max(abs(a), abs(b)) for a, b in zip(lo, hi))
    except TypeError:  # (a corner holds n/a)
        return 4
    if not (size > 0 and far > 10.0 * size):
        return 4
    return int(min(9, 4 + math.ceil(math.log10(far / size))))


def run(args) -> int:
    """Print :func:`scene_info` for ``args.path`` as text or JSON; returns 0.

    Raises SceneFormatError / FileNotFoundError for an unreadable file (exit 2 via the dispatcher).
    """
    info = scene_info(args.path, quat_order=args.quat_order)
    if args.json:
        from physskin_gs.cli._common import strict_json

        clean, nulls = strict_json(info)
        if nulls:
            clean["null_values"] = {"note": "these values were not finite numbers and are written as null",
                                    "keys": nulls}
        print(json.dumps(clean, indent=2, allow_nan=False))
        return 0
    print(f"file:          {info['path']}")
    print(f"format:        {info['format']}")
    if info["format"] in ("mesh", "mesh-ply"):
        nv, raw = info["num_vertices"], info.get("num_vertices_in_file", info["num_vertices"])
        print(f"vertices:      {nv}" + (f" (welded: vertices at one position are one; the file lists {raw}, split "
                                         "at UV seams or normals)" if raw != nv else ""))
        print(f"faces:         {info['num_faces']}")
    else:
        print(f"gaussians:     {info['num_gaussians']}")
        print(f"sh degree:     {info['sh_degree']}")
        if info.get("extra_properties"):
            print(f"extra props:   {', '.join(info['extra_properties'])}")
    if info.get("up_known") is not None:
        from physskin_gs.cli._common import axis_name

        print(f"up:            {axis_name(info['up_known'])} ({info['up_known_source']})")
    if info.get("meters_per_unit") is not None:
        print(f"units:         {info['meters_per_unit']:g} m per unit (the stage's metersPerUnit)")
    if info.get("frames"):
        a, b = info["frames"]
        print(f"frames:        {a:g}-{b:g} (an animation; these are its rest values: render / convert --frame K "
              "read frame K)")
    digits = _bbox_digits(info["bbox_min"], info["bbox_max"]) if info["bbox_min"] is not None else 4
    print(f"bbox min:      {_fmt_vec(info['bbox_min'], digits)}")
    print(f"bbox max:      {_fmt_vec(info['bbox_max'], digits)}")
    if "num_invalid" in info:
        print(f"invalid:       {info['num_invalid']}")
    for w in info["warnings"]:
        print(f"warning:       {w}")
    return 0
