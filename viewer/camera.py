"""Viewer camera conversions (formats.md section 5).

viser reports each client's camera as a camera-to-world pose in the OpenCV convention (+x right, +y down,
+z forward) with a vertical field of view. The renderers take a world-to-camera ``viewmat`` and pinhole
intrinsics ``K`` in pixels. Pure numpy: no viser import, so tests can call it directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Tuple

import numpy as np


def quat_wxyz_to_rotmat(wxyz: Sequence[float]) -> np.ndarray:
    """Unit (or any non-zero) wxyz quaternion -> (3, 3) float64 rotation matrix."""
    q = np.asarray(wxyz, dtype=np.float64)
    n = np.linalg.norm(q)
    if not np.isfinite(n) or n < 1e-12:
        return np.eye(3)
    w, x, y, z = q / n
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


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
    """
    R = quat_wxyz_to_rotmat(cam.wxyz)  # camera-to-world rotation
    t = np.asarray(cam.position, dtype=np.float64)
    viewmat = np.eye(4)
    viewmat[:3, :3] = R.T
    viewmat[:3, 3] = -R.T @ t
    fy = height / (2.0 * np.tan(cam.fov / 2.0))
    K = np.array([[fy, 0.0, width / 2.0], [0.0, fy, height / 2.0], [0.0, 0.0, 1.0]])
    return viewmat.astype(np.float32), K.astype(np.float32)


def look_at_wxyz(position: Sequence[float], target: Sequence[float], up: Sequence[float]) -> np.ndarray:
    """wxyz quaternion of an OpenCV camera at ``position`` looking at ``target`` with ``up`` pointing up on screen.

    OpenCV axes: +z forward (towards the target), +y down (against ``up``), +x = y cross z (right).
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
    """(3, 3) proper rotation -> (4,) unit wxyz quaternion with w >= 0."""
    m = np.asarray(R, dtype=np.float64)
    tr = np.trace(m)
    if tr > 0:
        s = np.sqrt(tr + 1.0) * 2
        q = [0.25 * s, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s]
    elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
        s = np.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2]) * 2
        q = [(m[2, 1] - m[1, 2]) / s, 0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s]
    elif m[1, 1] > m[2, 2]:
        s = np.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2]) * 2
        q = [(m[0, 2] - m[2, 0]) / s, (m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s]
    else:
        s = np.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1]) * 2
        q = [(m[1, 0] - m[0, 1]) / s, (m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s]
    q = np.asarray(q)
    q /= np.linalg.norm(q)
    return -q if q[0] < 0 else q
