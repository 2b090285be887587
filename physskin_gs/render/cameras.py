"""Pinhole cameras in the OpenCV convention (formats.md section 5).

A :class:`Camera` holds a world-to-camera ``viewmat`` (4, 4) (+x right, +y down, +z forward) and
intrinsics ``K`` (3, 3) = [[fx, 0, cx], [0, fy, cy], [0, 0, 1]] in pixels with pixel centres at +0.5,
as gsplat expects. Helpers build orbit cameras around a target, frame a scene from a robust
(percentile) bounding box, and convert a viser client camera (camera-to-world wxyz + position,
vertical fov) to viewmat and K.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

import torch

from physskin_gs.errors import OptionError
from physskin_gs.scene import quat_to_rotmat

UpSpec = Union[str, Sequence[float], torch.Tensor]

_UP_AXES = {
    "y": (0.0, 1.0, 0.0),
    "-y": (0.0, -1.0, 0.0),
    "z": (0.0, 0.0, 1.0),
    "-z": (0.0, 0.0, -1.0),
    "x": (1.0, 0.0, 0.0),
    "-x": (-1.0, 0.0, 0.0),
}


@dataclass
class Camera:
    """A pinhole camera.

    Attributes:
        viewmat: (4, 4) float32 world-to-camera transform, OpenCV axes.
        K: (3, 3) float32 intrinsics in pixels.
        width, height: image size in pixels.
    """

    viewmat: torch.Tensor
    K: torch.Tensor
    width: int
    height: int

    def __post_init__(self) -> None:
        validate_camera(self.viewmat, self.K, self.width, self.height)

    @property
    def center(self) -> torch.Tensor:
        """(3,) camera centre in world coordinates."""
        return camera_center(self.viewmat)

    def to(self, device) -> "Camera":
        return Camera(self.viewmat.to(device), self.K.to(device), self.width, self.height)


def validate_camera(viewmat: torch.Tensor, K: torch.Tensor, width: int, height: int) -> None:
    """Check a camera; raises OptionError naming the problem.

    Checks: viewmat is a finite (4, 4) rigid transform (last row 0 0 0 1, orthonormal rotation with
    det +1 to 1e-3), K is finite (3, 3) with fx, fy > 0 and last row (0, 0, 1), and width/height are
    positive integers.
    """
    if not isinstance(viewmat, torch.Tensor) or tuple(viewmat.shape) != (4, 4):
        raise OptionError(f"viewmat must be a (4, 4) tensor, got {_shape(viewmat)}")
    if not isinstance(K, torch.Tensor) or tuple(K.shape) != (3, 3):
        raise OptionError(f"K must be a (3, 3) tensor, got {_shape(K)}")
    if isinstance(width, bool) or isinstance(height, bool):
        raise OptionError("width and height must be integers")
    try:
        w_ok = int(width) == width and int(width) > 0
        h_ok = int(height) == height and int(height) > 0
    except (TypeError, ValueError):
        w_ok = h_ok = False
    if not (w_ok and h_ok):
        raise OptionError(f"image size must be positive integers, got width={width!r}, height={height!r}")
    vm = viewmat.detach().double().cpu()
    Kd = K.detach().double().cpu()
    if not torch.isfinite(vm).all():
        raise OptionError("viewmat contains NaN or infinite values")
    if not torch.isfinite(Kd).all():
        raise OptionError("K contains NaN or infinite values")
    if not torch.allclose(vm[3], torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=torch.float64), atol=1e-6):
        raise OptionError(f"viewmat last row must be (0, 0, 0, 1), got {vm[3].tolist()}")
    R = vm[:3, :3]
    if (R @ R.T - torch.eye(3, dtype=torch.float64)).abs().max() > 1e-3 or torch.det(R) < 0:
        raise OptionError("viewmat rotation block is not a proper rotation (world-to-camera must be rigid)")
    if Kd[0, 0] <= 0 or Kd[1, 1] <= 0:
        raise OptionError(f"K focal lengths must be positive, got fx={Kd[0, 0].item()}, fy={Kd[1, 1].item()}")
    if not torch.allclose(Kd[2], torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64), atol=1e-6):
        raise OptionError(f"K last row must be (0, 0, 1), got {Kd[2].tolist()}")
    if Kd[1, 0] != 0 or Kd[0, 1] != 0:
        raise OptionError("K must have zero skew (K[0,1] and K[1,0] must be 0)")


def _shape(x) -> str:
    return str(tuple(x.shape)) if isinstance(x, torch.Tensor) else type(x).__name__


def camera_center(viewmat: torch.Tensor) -> torch.Tensor:
    """(3,) world position of the camera of a world-to-camera ``viewmat`` (4, 4): ``-R^T t``."""
    R = viewmat[:3, :3]
    t = viewmat[:3, 3]
    return -(R.T @ t)


def intrinsics_from_fov(width: int, height: int, fov_y: float) -> torch.Tensor:
    """(3, 3) float32 K for a vertical field of view ``fov_y`` (radians), square pixels, centred.

    ``fy = H / (2 tan(fov_y / 2))``, ``fx = fy``, ``cx = W / 2``, ``cy = H / 2`` (formats.md 5).
    Raises OptionError unless 0 < fov_y < pi.
    """
    if not (0.0 < float(fov_y) < math.pi):
        raise OptionError(f"vertical field of view must be in (0, pi) radians, got {fov_y}")
    fy = height / (2.0 * math.tan(float(fov_y) / 2.0))
    return torch.tensor([[fy, 0.0, width / 2.0], [0.0, fy, height / 2.0], [0.0, 0.0, 1.0]], dtype=torch.float32)


def up_vector(up: UpSpec) -> torch.Tensor:
    """(3,) float64 unit up vector from ``"y" | "-y" | "z" | "-z" | "x" | "-x"`` or a 3-vector.

    Raises OptionError for an unknown name or a zero/non-finite vector.
    """
    if isinstance(up, str):
        key = up.strip().lower().lstrip("+")
        if key not in _UP_AXES:
            raise OptionError(f"unknown up axis {up!r}; use one of y, -y, z, -z, x, -x or a 3-vector")
        return torch.tensor(_UP_AXES[key], dtype=torch.float64)
    v = torch.as_tensor(up, dtype=torch.float64).reshape(-1)
    if v.numel() != 3 or not torch.isfinite(v).all() or v.norm() < 1e-12:
        raise OptionError(f"up vector must be a finite non-zero 3-vector, got {up!r}")
    return v / v.norm()


def look_at(eye, target, up: UpSpec = "z") -> torch.Tensor:
    """(4, 4) float32 world-to-camera viewmat (OpenCV) for a camera at ``eye`` looking at ``target``.

    The camera's image "up" (-y in OpenCV) is aligned with ``up`` projected on the image plane.
    Raises OptionError if eye == target or the view direction is parallel to ``up``.
    """
    eye = torch.as_tensor(eye, dtype=torch.float64).reshape(3)
    target = torch.as_tensor(target, dtype=torch.float64).reshape(3)
    u = up_vector(up)
    fwd = target - eye
    if fwd.norm() < 1e-12:
        raise OptionError("camera eye and target coincide")
    fwd = fwd / fwd.norm()
    right = torch.linalg.cross(fwd, u)
    if right.norm() < 1e-9:
        raise OptionError("view direction is parallel to the up vector; change elevation or up axis")
    right = right / right.norm()
    down = torch.linalg.cross(fwd, right)  # +y (down) in OpenCV
    R_c2w = torch.stack([right, down, fwd], dim=1)  # columns = camera axes in world
    vm = torch.eye(4, dtype=torch.float64)
    vm[:3, :3] = R_c2w.T
    vm[:3, 3] = -(R_c2w.T @ eye)
    return vm.float()


def _orbit_basis(up: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Two unit vectors (a, b) spanning the plane orthogonal to ``up`` (right-handed: a x b = up)."""
    helper = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    if abs(float(up @ helper)) > 0.9:
        helper = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
    a = helper - (helper @ up) * up
    a = a / a.norm()
    b = torch.linalg.cross(up, a)
    return a, b


def orbit_camera(
    azimuth: float,
    elevation: float,
    distance: float,
    target=(0.0, 0.0, 0.0),
    up: UpSpec = "z",
    width: int = 512,
    height: int = 512,
    fov_y: float = math.radians(40.0),
) -> Camera:
    """A camera on a sphere around ``target``, looking at it.

    Args:
        azimuth: degrees around the up axis (0 = along the first horizontal axis; for up z that is +x,
            for up y / -y it is +z / +x ... see ``_orbit_basis``).
        elevation: degrees above the horizontal plane, in (-90, 90).
        distance: > 0, scene units.
        target: (3,) look-at point.
        up: up axis name or 3-vector.
        width, height, fov_y: image size (pixels) and vertical field of view (radians).
    Raises:
        OptionError for distance <= 0, |elevation| >= 90 or a bad up axis / fov.
    """
    if not (math.isfinite(distance) and distance > 0):
        raise OptionError(f"camera distance must be positive, got {distance}")
    if not (math.isfinite(elevation) and abs(elevation) < 90.0):
        raise OptionError(f"elevation must be strictly between -90 and 90 degrees, got {elevation}")
    if not math.isfinite(azimuth):
        raise OptionError(f"azimuth must be finite, got {azimuth}")
    u = up_vector(up)
    a, b = _orbit_basis(u)
    az, el = math.radians(azimuth), math.radians(elevation)
    direction = math.cos(el) * (math.cos(az) * a + math.sin(az) * b) + math.sin(el) * u
    tgt = torch.as_tensor(target, dtype=torch.float64).reshape(3)
    eye = tgt + distance * direction
    return Camera(look_at(eye, tgt, u), intrinsics_from_fov(width, height, fov_y), int(width), int(height))


def robust_bounds(means: torch.Tensor, lo: float = 1.0, hi: float = 99.0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-axis percentile box of points, ignoring outliers.

    Args:
        means: (N, 3) points; non-finite rows are ignored.
        lo, hi: percentiles in [0, 100], lo < hi.
    Returns:
        (lo_corner (3,), hi_corner (3,)) float32.
    Raises:
        OptionError if there is no finite point.
    """
    m = means.detach().float().cpu()
    m = m[torch.isfinite(m).all(dim=1)]
    if m.shape[0] == 0:
        raise OptionError("scene has no finite Gaussian centre to frame")
    if m.shape[0] > 200_000:  # quantile on a subsample: same answer to sampling noise, far faster
        g = torch.Generator().manual_seed(0)
        m = m[torch.randperm(m.shape[0], generator=g)[:200_000]]
    q = torch.tensor([lo / 100.0, hi / 100.0])
    qs = torch.quantile(m, q, dim=0)  # [2, 3]
    return qs[0], qs[1]


def auto_frame(
    means: torch.Tensor,
    up: UpSpec = "z",
    azimuth: float = 45.0,
    elevation: float = 20.0,
    width: int = 512,
    height: int = 512,
    fov_y: float = math.radians(40.0),
    distance: Optional[float] = None,
    margin: float = 1.1,
    percentiles: Tuple[float, float] = (1.0, 99.0),
    sizes: Optional[torch.Tensor] = None,
) -> Camera:
    """Orbit camera that frames a scene's robust bounding box.

    The target is the centre of the ``percentiles`` box of ``means`` (N, 3); the default distance makes
    the box's bounding sphere (radius r, times ``margin``) fit the smaller field of view:
    ``distance = margin * r / sin(fov_min / 2)``. ``sizes``: optional (N,) extents of the Gaussians (scene units,
    e.g. their largest standard deviation); where the centres' box is (nearly) a point (one Gaussian, or all at
    one place) r is 3 times the largest of them instead, so the blobs themselves fill the view (with r ~ 0 the
    camera sat on them and the image came out blank).
    Raises OptionError as :func:`orbit_camera` and :func:`robust_bounds`.
    """
    lo, hi = robust_bounds(means, *percentiles)
    center = 0.5 * (lo + hi)
    radius = 0.5 * float((hi - lo).norm())
    if sizes is not None and sizes.numel():
        s = sizes.detach().float().cpu().reshape(-1)
        s = s[torch.isfinite(s)]
        blob = 3.0 * float(s.max()) if s.numel() else 0.0
        if radius < 1e-3 * blob:
            radius = blob
    radius = max(radius, 1e-6)
    if distance is None:
        fov_x = 2.0 * math.atan(math.tan(fov_y / 2.0) * width / height)
        fov_min = min(fov_y, fov_x)
        distance = margin * radius / math.sin(fov_min / 2.0)
    return orbit_camera(azimuth, elevation, float(distance), center, up, width, height, fov_y)


def camera_from_viser(wxyz, position, fov: float, width: int, height: int) -> Camera:
    """Camera from a viser client camera (formats.md 5).

    Args:
        wxyz: (4,) camera-to-world rotation quaternion (OpenCV axes: +z forward, -y up).
        position: (3,) camera centre in world coordinates.
        fov: vertical field of view in radians.
        width, height: image size in pixels.
    Returns:
        Camera with ``viewmat = inverse([R(wxyz) | position; 0 0 0 1])`` and ``fy = fx = H / (2 tan(fov/2))``.
    """
    q = torch.as_tensor(wxyz, dtype=torch.float64).reshape(4)
    p = torch.as_tensor(position, dtype=torch.float64).reshape(3)
    if not torch.isfinite(q).all() or q.norm() < 1e-12:
        raise OptionError(f"camera quaternion must be finite and non-zero, got {q.tolist()}")
    if not torch.isfinite(p).all():
        raise OptionError(f"camera position must be finite, got {p.tolist()}")
    R = quat_to_rotmat(q)  # camera-to-world
    vm = torch.eye(4, dtype=torch.float64)
    vm[:3, :3] = R.T
    vm[:3, 3] = -(R.T @ p)
    return Camera(vm.float(), intrinsics_from_fov(int(width), int(height), fov), int(width), int(height))
