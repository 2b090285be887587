"""The Gaussian scene type: raw (pre-activation) 3DGS parameters as torch tensors.

Conventions follow the INRIA 3DGS PLY layout (the layout the original 3DGS training code writes):
quaternions are wxyz and *not* normalised, scales are log standard deviations, opacities are logits,
and SH coefficients are stored per coefficient with the 3 colour channels last.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, Optional, Tuple

import torch

#: Degree-0 real spherical-harmonics basis value, 1 / (2 sqrt(pi)).
C0 = 0.28209479177387814


@dataclass
class GaussianScene:
    """A set of N 3D Gaussians with raw, pre-activation parameters.

    Attributes:
        means: (N, 3) float32, scene units. Gaussian centres.
        quats: (N, 4) float32, wxyz, raw (not normalised; norms of 0.3-2.7 occur in real files).
        log_scales: (N, 3) float32, natural log of the per-axis standard deviations (scene units).
        opacity_logits: (N,) float32, logit of the opacity.
        sh_dc: (N, 3) float32, degree-0 SH coefficient per channel (``rgb = 0.5 + C0 * sh_dc``).
        sh_rest: (N, K, 3) float32, higher SH bands, K in {0, 3, 8, 15, 24}; coefficient-major, channel last.
        extra: name -> (N,) float32 array of additional per-vertex properties read from a PLY (kept and
            written back by :func:`physskin_gs.io.save_scene`).
        source: path or description of where the scene came from (informational).
        format: detected input format (``"inria-ply"``, ``"splat"``, ``"compressed-ply"``, ...).
        up_hint: (3,) up vector recorded in the file (``comment physskin_gs up_axis X Y Z`` in the PLYs that
            physskin_gs exports; +y for a glTF mesh, whose specification fixes it), or None; the ``auto`` up
            rule uses it before the format's convention.
        up_hint_source: where ``up_hint`` came from when not from the file itself (the capture's cameras:
            :func:`physskin_gs.pipeline.with_camera_up`), for the log; None: recorded in the file.
        object_only: the scene is one object and nothing else (Gaussians sampled on a mesh, e.g. by ``convert
            chair.glb chair.ply``, which records it in the PLY header): the scene analysis looks for no support
            in it, as for the mesh itself (a converted office chair's foot was taken for its floor).
    """

    means: torch.Tensor
    quats: torch.Tensor
    log_scales: torch.Tensor
    opacity_logits: torch.Tensor
    sh_dc: torch.Tensor
    sh_rest: torch.Tensor
    extra: Dict[str, torch.Tensor] = field(default_factory=dict)
    source: Optional[str] = None
    format: Optional[str] = None
    up_hint: Optional[Tuple[float, float, float]] = None
    up_hint_source: Optional[str] = None
    object_only: bool = False

    def __post_init__(self) -> None:
        n = self.means.shape[0]
        checks = {
            "means": (self.means, (n, 3)),
            "quats": (self.quats, (n, 4)),
            "log_scales": (self.log_scales, (n, 3)),
            "opacity_logits": (self.opacity_logits, (n,)),
            "sh_dc": (self.sh_dc, (n, 3)),
        }
        for name, (t, shape) in checks.items():
            if tuple(t.shape) != shape:
                raise ValueError(f"GaussianScene.{name} has shape {tuple(t.shape)}, expected {shape}")
        if self.sh_rest.ndim != 3 or self.sh_rest.shape[0] != n or self.sh_rest.shape[2] != 3:
            raise ValueError(f"GaussianScene.sh_rest has shape {tuple(self.sh_rest.shape)}, expected ({n}, K, 3)")
        for name, t in self.extra.items():
            if t.shape[0] != n:
                raise ValueError(f"extra property {name!r} has {t.shape[0]} rows, expected {n}")

    # ------------------------------------------------------------------ sizes
    @property
    def num_gaussians(self) -> int:
        """N, the number of Gaussians."""
        return int(self.means.shape[0])

    def __len__(self) -> int:
        return self.num_gaussians

    @property
    def sh_degree(self) -> int:
        """SH degree d with (d + 1)^2 = K + 1 coefficients per channel."""
        k = self.sh_rest.shape[1] + 1
        return int(round(k ** 0.5)) - 1

    @property
    def sh(self) -> torch.Tensor:
        """(N, K+1, 3) all SH coefficients, DC first."""
        return torch.cat([self.sh_dc[:, None, :], self.sh_rest], dim=1)

    # ------------------------------------------------------- activated values
    @property
    def scales(self) -> torch.Tensor:
        """(N, 3) per-axis standard deviations, scene units (``exp(log_scales)``)."""
        return torch.exp(self.log_scales)

    @property
    def opacities(self) -> torch.Tensor:
        """(N,) opacities in [0, 1] (``sigmoid(opacity_logits)``)."""
        return torch.sigmoid(self.opacity_logits)

    @property
    def unit_quats(self) -> torch.Tensor:
        """(N, 4) normalised wxyz quaternions; a zero quaternion becomes the identity."""
        return normalize_quats(self.quats)

    def rotations(self) -> torch.Tensor:
        """(N, 3, 3) rotation matrices of the normalised quaternions."""
        return quat_to_rotmat(self.quats)

    def covariances(self) -> torch.Tensor:
        """(N, 3, 3) covariances ``Sigma = R S^2 R^T``, scene units squared."""
        L = self.rotations() * self.scales[:, None, :]  # [N, 3, 3] = R diag(s)
        return L @ L.transpose(1, 2)

    def colors(self) -> torch.Tensor:
        """(N, 3) view-independent base colour ``clamp(0.5 + C0 * sh_dc, 0, 1)``."""
        return (0.5 + C0 * self.sh_dc).clamp(0.0, 1.0)

    # ------------------------------------------------------------ utilities
    def subset(self, index: torch.Tensor) -> "GaussianScene":
        """A new scene holding the rows selected by ``index`` (bool mask (N,) or int64 indices)."""
        return replace(
            self,
            means=self.means[index],
            quats=self.quats[index],
            log_scales=self.log_scales[index],
            opacity_logits=self.opacity_logits[index],
            sh_dc=self.sh_dc[index],
            sh_rest=self.sh_rest[index],
            extra={k: v[index] for k, v in self.extra.items()},
        )

    def to(self, device) -> "GaussianScene":
        """A new scene with every tensor (``extra`` included) on ``device`` (str or torch.device)."""
        return replace(
            self,
            means=self.means.to(device),
            quats=self.quats.to(device),
            log_scales=self.log_scales.to(device),
            opacity_logits=self.opacity_logits.to(device),
            sh_dc=self.sh_dc.to(device),
            sh_rest=self.sh_rest.to(device),
            extra={k: v.to(device) for k, v in self.extra.items()},
        )

    def with_sh_degree(self, degree: int) -> "GaussianScene":
        """Copy truncated to SH ``degree`` (keeps the first (d+1)^2-1 coefficients per channel).

        Raises ValueError if ``degree`` exceeds :attr:`sh_degree`.
        """
        if degree > self.sh_degree:
            raise ValueError(f"cannot raise SH degree {self.sh_degree} to {degree}")
        k = (degree + 1) ** 2 - 1
        return replace(self, sh_rest=self.sh_rest[:, :k].clone())


#: An axis is recentred for float32 work when the centre of the points' range lies farther from 0 than this many
#: times the range (:func:`float32_local_origin`).
FAR_ORIGIN_RATIO = 8.0


def finite_bounds(points: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(lo (3,), hi (3,)) float64 CPU per-axis range of the finite rows of points (N, 3), any float dtype or
    device; zeros when none is finite (or N = 0). Raises nothing."""
    P = points.detach().reshape(-1, 3)
    ok = torch.isfinite(P).all(1)
    if not bool(ok.any()):
        return torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    lo, hi = torch.aminmax(P if bool(ok.all()) else P[ok], dim=0)
    return lo.double().cpu(), hi.double().cpu()


def float32_local_origin(points: torch.Tensor, bounds: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
                         ) -> torch.Tensor:
    """(3,) float64 origin, each value exactly a float32, for float32 work on points far from the scene's origin.

    Per axis: the centre of the finite points' range, rounded to float32, where it lies more than
    :data:`FAR_ORIGIN_RATIO` times the range from 0, else 0. On such an axis every point lies within 1/16 of the
    origin's value, so ``points - origin`` is exact in float32 (Sterbenz's lemma) and the local values keep the
    points' own precision: a capture 1e5 units from its origin, 1 unit across, holds its positions to 0.008 units,
    and an affine map applied to them in float32 without the shift loses several times that in cancellation.
    On other axes 0 keeps every value as it is (so a scene near its origin is computed exactly as before).

    Args: points: (N, 3) any float dtype, scene units (non-finite rows ignored; none finite gives zeros).
        bounds: their :func:`finite_bounds`, when already computed.
    """
    lo, hi = finite_bounds(points) if bounds is None else bounds
    c = ((lo + hi) / 2).float().double()
    return torch.where(c.abs() > FAR_ORIGIN_RATIO * (hi - lo), c, torch.zeros_like(c))


def normalize_quats(quats: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Normalise wxyz quaternions (..., 4) float -> (..., 4) same dtype; quaternions with a norm <= ``eps``
    or a non-finite norm become the identity (1, 0, 0, 0). Raises nothing."""
    norm = quats.norm(dim=-1, keepdim=True)
    ok = torch.isfinite(norm) & (norm > eps)
    ident = torch.zeros_like(quats)
    ident[..., 0] = 1.0
    return torch.where(ok, quats / norm.clamp_min(eps), ident)


def quat_to_rotmat(quats: torch.Tensor) -> torch.Tensor:
    """(..., 4) wxyz quaternions (any norm, float) -> (..., 3, 3) rotation matrices, same dtype.

    Normalised with :func:`normalize_quats` first, so zero or non-finite quaternions give the identity.
    """
    q = normalize_quats(quats)
    w, x, y, z = q.unbind(-1)
    R = torch.stack(
        [
            1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
            2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
            2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
        ],
        dim=-1,
    )
    return R.reshape(q.shape[:-1] + (3, 3))


def rotmat_to_quat(R: torch.Tensor) -> torch.Tensor:
    """(..., 3, 3) proper rotation matrices -> (..., 4) unit wxyz quaternions with w >= 0.

    Uses the numerically stable branch on the largest of (w, x, y, z) (Shepperd's method).
    """
    m = R
    t = torch.stack(
        [
            1 + m[..., 0, 0] + m[..., 1, 1] + m[..., 2, 2],
            1 + m[..., 0, 0] - m[..., 1, 1] - m[..., 2, 2],
            1 - m[..., 0, 0] + m[..., 1, 1] - m[..., 2, 2],
            1 - m[..., 0, 0] - m[..., 1, 1] + m[..., 2, 2],
        ],
        dim=-1,
    )  # [..., 4] = 4 * (w^2, x^2, y^2, z^2)
    idx = t.argmax(dim=-1, keepdim=True)
    s = torch.sqrt(t.gather(-1, idx).clamp_min(1e-12)) * 2  # 4 * |largest|
    s = s[..., 0]
    cands = [
        torch.stack([s / 4, (m[..., 2, 1] - m[..., 1, 2]) / s, (m[..., 0, 2] - m[..., 2, 0]) / s, (m[..., 1, 0] - m[..., 0, 1]) / s], -1),
        torch.stack([(m[..., 2, 1] - m[..., 1, 2]) / s, s / 4, (m[..., 0, 1] + m[..., 1, 0]) / s, (m[..., 0, 2] + m[..., 2, 0]) / s], -1),
        torch.stack([(m[..., 0, 2] - m[..., 2, 0]) / s, (m[..., 0, 1] + m[..., 1, 0]) / s, s / 4, (m[..., 1, 2] + m[..., 2, 1]) / s], -1),
        torch.stack([(m[..., 1, 0] - m[..., 0, 1]) / s, (m[..., 0, 2] + m[..., 2, 0]) / s, (m[..., 1, 2] + m[..., 2, 1]) / s, s / 4], -1),
    ]
    q = torch.stack(cands, dim=-2).gather(-2, idx[..., None].expand(*idx.shape[:-1], 1, 4))[..., 0, :]
    q = torch.where(q[..., :1] < 0, -q, q)
    return q / q.norm(dim=-1, keepdim=True).clamp_min(1e-12)
