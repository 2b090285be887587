"""The trainer's cameras of a capture: graphdeco-inria's ``cameras.json``.

The reference 3DGS trainer writes, beside its output's ``point_cloud/iteration_N/point_cloud.ply``, a
``cameras.json``: a list with one object per training camera, ``{"id", "img_name", "width", "height",
"position": [x, y, z], "rotation": [[...], [...], [...]], "fx", "fy"}``, where ``rotation`` is the camera-to-world
rotation (its columns the camera's x, y, z axes in the world frame; COLMAP cameras: x right, y down the image, z
forward) and ``position`` the camera centre, in the same world frame as the trained Gaussians.

:func:`find_cameras_json` looks where the trainer puts it; :func:`read_camera_rotations` reads the rotations.
"""

from __future__ import annotations

import json
import os
from typing import Optional

import numpy as np

from physskin_gs.io.ply_header import SceneFormatError

__all__ = ["CAMERAS_FILE", "find_cameras_json", "read_camera_rotations"]

#: the trainer's file name
CAMERAS_FILE = "cameras.json"


def find_cameras_json(scene_path) -> Optional[str]:
    """The ``cameras.json`` of the trained capture ``scene_path`` (a PLY), or None: the model folder's when the PLY
    sits in the trainer's layout (``MODEL/point_cloud/iteration_N/point_cloud.ply`` -> ``MODEL/cameras.json``),
    else one beside the PLY. Raises nothing."""
    folder = os.path.dirname(os.path.abspath(os.fspath(scene_path)))
    candidates = []
    parent = os.path.dirname(folder)
    if os.path.basename(folder).startswith("iteration_") and os.path.basename(parent) == "point_cloud":
        candidates.append(os.path.join(os.path.dirname(parent), CAMERAS_FILE))
    candidates.append(os.path.join(folder, CAMERAS_FILE))
    return next((c for c in candidates if os.path.isfile(c)), None)


def read_camera_rotations(path) -> np.ndarray:
    """(C, 3, 3) float64 camera-to-world rotations of a ``cameras.json`` (as the file stores them; not checked to
    be rotations). Raises SceneFormatError when the file is not JSON, not a list of camera objects, or a camera's
    ``rotation`` is not 3 x 3 numbers; OSError when it cannot be read."""
    path = os.fspath(path)
    try:
        with open(path, "r", encoding="utf-8") as fh:
            data = json.load(fh)
    except (ValueError, RecursionError) as exc:
        raise SceneFormatError(f"{path}: not a readable cameras.json ({exc})") from None
    if not isinstance(data, list) or not data:
        raise SceneFormatError(f"{path}: a cameras.json is a non-empty list of cameras")
    out = np.empty((len(data), 3, 3), dtype=np.float64)
    for i, cam in enumerate(data):
        rot = cam.get("rotation") if isinstance(cam, dict) else None
        try:
            r = np.asarray(rot, dtype=np.float64)
        except (TypeError, ValueError):
            r = None
        if r is None or r.shape != (3, 3):
            raise SceneFormatError(f"{path}: camera {i} has no 3 x 3 'rotation'")
        out[i] = r
    return out
