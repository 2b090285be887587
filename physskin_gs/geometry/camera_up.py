"""Which way is up, from the cameras that took the capture.

A photographer holds the camera level: its image rows are horizontal (no roll) and its image's up points more up
than down, whatever the camera's pitch. The trainer's camera poses (graphdeco-inria's ``cameras.json``: per
camera the camera-to-world rotation, whose columns are the camera's x (image right), y (image down) and z (viewing
direction) in the capture's world frame, COLMAP's camera convention) are in the same world frame as the trained
Gaussians, so they say which way is up in it even when the capture holds no floor and the object gives no clue.

:func:`camera_up` takes the camera *right* vectors, which are horizontal for a level camera at any pitch: when they
point in many directions (cameras around the object), up is the normal of the plane they span (the eigenvector of
the smallest eigenvalue of their scatter), signed by the cameras' mean up; when they all point one way (a
forward-facing capture), up is the cameras' mean up with its part along the mean right removed. The answer is
refused (None, with the reason) when the cameras are not held level: right vectors more than ``max_roll_deg`` off
the horizontal plane (rms), or image ups less than ``min_upright`` along the answer on average (a capture whose
portrait images were stored sideways has vertical right vectors and horizontal ups).

Pure numpy; the directions are unit 3-vectors in the capture's world frame (scene units play no part).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

__all__ = ["CameraUp", "camera_up", "MIN_CAMERAS"]

#: fewest cameras that give an answer
MIN_CAMERAS = 3


@dataclass
class CameraUp:
    """The answer of :func:`camera_up`.

    Attributes:
        up: (3,) float64 unit vector in the cameras' world frame, or None when the cameras do not say.
        reason: one line: how it was found (cameras around the object or facing one way, roll, uprightness), or
            why not.
        num_cameras: cameras used.
        roll_deg: rms angle of the camera right vectors out of the plane normal to ``up`` (degrees), or None.
    """

    up: Optional[np.ndarray]
    reason: str
    num_cameras: int
    roll_deg: Optional[float] = None


def camera_up(rotations, max_roll_deg: float = 8.0, min_upright: float = 0.5,
              min_spread: float = 0.01) -> CameraUp:
    """The capture's up direction from its cameras' orientations.

    Args:
        rotations: (C, 3, 3) camera-to-world rotations (columns: the camera's x = image right, y = image down, z =
            viewing direction, in world coordinates; COLMAP / OpenCV cameras, as graphdeco-inria's ``cameras.json``
            stores them). Rows that are not rotations (det not within 0.1 of 1, or columns not orthonormal within
            0.05) are dropped.
        max_roll_deg: largest rms angle (degrees) of the right vectors out of the horizontal plane.
        min_upright: smallest mean cosine between the cameras' image up (-y) and the answer.
        min_spread: smallest ratio of the right vectors' second to first scatter eigenvalue for the "around the
            object" rule (0.01: about 20 degrees of spread in heading); below it the "facing one way" rule.

    Returns:
        :class:`CameraUp` (``up`` None when fewer than :data:`MIN_CAMERAS` valid rotations, or the cameras are not
        held level). Raises nothing.
    """
    R = np.asarray(rotations, dtype=np.float64)
    if R.ndim != 3 or R.shape[1:] != (3, 3):
        return CameraUp(None, f"camera rotations of shape {R.shape}, expected (C, 3, 3)", 0)
    finite = np.isfinite(R).all(axis=(1, 2))
    R = R[finite]
    ortho = np.abs(np.einsum("cji,cjk->cik", R, R) - np.eye(3)).max(axis=(1, 2)) < 0.05 if len(R) else \
        np.zeros(0, bool)
    det_ok = np.abs(np.linalg.det(R) - 1.0) < 0.1 if len(R) else np.zeros(0, bool)
    R = R[ortho & det_ok]
    n = int(R.shape[0])
    if n < MIN_CAMERAS:
        return CameraUp(None, f"{n} valid camera rotation{'s' if n != 1 else ''} (at least {MIN_CAMERAS} needed)", n)
    right = R[:, :, 0]  # [C, 3] image right in world
    img_up = -R[:, :, 1]  # [C, 3] image up (COLMAP's y points down the image)
    scatter = right.T @ right / n  # [3, 3]
    evals, evecs = np.linalg.eigh(scatter)  # ascending
    mean_up = img_up.mean(0)
    if evals[1] >= min_spread * evals[2]:
        up = evecs[:, 0]
        rule = "the normal of the plane of the cameras' right vectors, the cameras standing around the object"
    else:
        r = right.mean(0)
        r /= max(np.linalg.norm(r), 1e-12)
        up = mean_up - (mean_up @ r) * r
        rule = "the cameras' mean image up, the cameras facing one way"
    norm = float(np.linalg.norm(up))
    if not np.isfinite(norm) or norm < 1e-9:
        return CameraUp(None, "the cameras' image ups cancel out", n)
    up = up / norm
    if float(mean_up @ up) < 0:
        up = -up
    roll = float(np.degrees(np.arcsin(np.clip(np.sqrt(np.mean((right @ up) ** 2)), 0.0, 1.0))))
    upright = float((img_up @ up).mean())
    if roll > max_roll_deg:
        return CameraUp(None, f"the {n} cameras are not held level: their right vectors lie {roll:.0f} degrees rms "
                              f"out of one plane, at most {max_roll_deg:g}", n, roll)
    if upright < min_upright:
        return CameraUp(None, f"the {n} cameras' images are not upright along the level they share, mean cosine "
                              f"{upright:.2f} < {min_upright:g}: sideways or upside-down images", n, roll)
    return CameraUp(up, f"{rule}; {n} cameras, roll {roll:.1f} degrees rms, image up {upright:.2f} along it", n, roll)
