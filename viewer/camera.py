"""Viewer camera conversions (formats.md section 5).

viser reports each client's camera as a camera-to-world pose in the OpenCV convention (+x right, +y down,
+z forward) with a vertical field of view. The renderers take a world-to-camera ``viewmat`` and pinhole
intrinsics ``K`` in pixels. The conversions themselves live in ``physskin_gs.render.cameras`` and
``physskin_gs.scene``; this module adapts them to numpy. No viser import, so tests can call it directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Tuple

import numpy as np
import torch

from physskin_gs.render.cameras import camera_from_viser
from physskin_gs.scene import quat_to_rotmat, rotmat_to_quat


def quat_wxyz_to_rotmat(wxyz: Sequence[float]) -> np.ndarray:
    """(4,) wxyz quaternion (any non-zero norm) -> (3, 3) float64 rotation matrix.

    A zero or non-finite quaternion gives the identity (no error). Wraps :func:`physskin_gs.scene.quat_to_rotmat`.
    """
    q = np.asarray(wxyz, dtype=np.float64)
    n = np.linalg.norm(q)
    if not np.isfinite(n) or n < 1e-12:
        return np.eye(3)
    return quat_to_rotmat(torch.as_tensor(q)).numpy()


@dataclass(frozen=True)
class CameraState:
    """A snapshot of one client's camera (what a render needs).

    Attributes:
        wxyz: camera-to-world rotation, wxyz quaternion, OpenCV axes.
        position: (3,) camera centre in world units.
        fov: vertical field of view, radians.
        aspect: width / height of the browser viewport.
    """

    wxyz: Tuple[float, float, float, float]
    position: Tuple[float, float, float]
    fov: float
    aspect: float

    def size_at(self, height: int) -> Tuple[int, int]:
        """(width, height) in pixels for a render ``height`` pixels tall with this camera's aspect ratio."""
        height = max(int(height), 8)
        return max(int(round(height * self.aspect)), 8), height


def viewmat_and_K(cam: CameraState, width: int, height: int) -> Tuple[np.ndarray, np.ndarray]:
    """World-to-camera matrix and intrinsics for ``cam`` rendered at ``width`` x ``height`` pixels.

    Returns:
        viewmat: (4, 4) float32, world-to-camera, OpenCV (``inverse([R | t; 0 0 0 1])``).
        K: (3, 3) float32, ``fy = H / (2 tan(fov / 2))``, ``fx = fy``, ``cx = W / 2``, ``cy = H / 2``
        (formats.md section 5).

    Raises:
        OptionError: non-finite or zero quaternion, non-finite position, or ``fov`` outside (0, pi)
        (from :func:`physskin_gs.render.cameras.camera_from_viser`, which this wraps).
    """
    cam_t = camera_from_viser(cam.wxyz, cam.position, cam.fov, width, height)
    return cam_t.viewmat.numpy(), cam_t.K.numpy()


def look_at_wxyz(position: Sequence[float], target: Sequence[float], up: Sequence[float]) -> np.ndarray:
    """(4,) float64 wxyz quaternion of an OpenCV camera at ``position`` looking at ``target`` with ``up`` up on screen.

    ``position``, ``target``, ``up``: (3,) world coordinates. OpenCV axes: +z forward (towards the target),
    +y down (against ``up``), +x = y cross z (right).
    """
    p = np.asarray(position, dtype=np.float64)
    z = np.asarray(target, dtype=np.float64) - p
    z /= np.linalg.norm(z)
    u = np.asarray(up, dtype=np.float64)
    y = -(u - np.dot(u, z) * z)
    if np.linalg.norm(y) < 1e-9:  # up parallel to the view direction: pick any perpendicular
        y = np.cross(z, [1.0, 0.0, 0.0] if abs(z[0]) < 0.9 else [0.0, 1.0, 0.0])
    y /= np.linalg.norm(y)
    x = np.cross(y, z)
    R = np.stack([x, y, z], axis=1)  # columns are the camera axes in world coordinates
    return rotmat_to_wxyz(R)


def rotmat_to_wxyz(R: np.ndarray) -> np.ndarray:
    """(3, 3) proper rotation -> (4,) float64 unit wxyz quaternion with w >= 0.

    Wraps :func:`physskin_gs.scene.rotmat_to_quat`.
    """
    return rotmat_to_quat(torch.as_tensor(np.asarray(R, dtype=np.float64))).numpy()
