"""Rendering: one :func:`rasterize` for every caller (gsplat on CUDA, pure-torch EWA splatting on CPU),
OpenCV cameras, SH evaluation and video writing. See ``docs/how-it-works.md``."""

from physskin_gs.render.cameras import (
    Camera,
    auto_frame,
    camera_center,
    camera_from_viser,
    intrinsics_from_fov,
    look_at,
    orbit_camera,
    robust_bounds,
    up_vector,
    validate_camera,
)
from physskin_gs.render.rasterizer import (
    RenderOutput,
    gaussian_colors,
    project_gaussians,
    rasterize,
    rasterize_pairs_reference,
    rasterize_tiles,
)
from physskin_gs.render.sh import eval_sh, sh_basis, sh_to_rgb
from physskin_gs.render.video import render_scene_frame, to_uint8, write_video

__all__ = [
    "Camera",
    "RenderOutput",
    "auto_frame",
    "camera_center",
    "camera_from_viser",
    "eval_sh",
    "gaussian_colors",
    "intrinsics_from_fov",
    "look_at",
    "orbit_camera",
    "project_gaussians",
    "rasterize",
    "rasterize_pairs_reference",
    "rasterize_tiles",
    "render_scene_frame",
    "robust_bounds",
    "sh_basis",
    "sh_to_rgb",
    "to_uint8",
    "up_vector",
    "validate_camera",
    "write_video",
]
