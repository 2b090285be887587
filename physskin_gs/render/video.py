"""Frame and video helpers: uint8 conversion, one-call scene rendering, mp4 writing with a PNG fallback.

Video follows formats.md section 6: imageio's ffmpeg plugin (imageio-ffmpeg) writes mp4; frame sides
should be multiples of 16 (macro_block_size) or imageio resizes them. Without imageio-ffmpeg the frames
are written as ``<stem>_frames/frame0001.png, ...`` next to the requested path.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Iterable, Optional, Union

import numpy as np
import torch

from physskin_gs.errors import OptionError
from physskin_gs.render.cameras import Camera
from physskin_gs.render.rasterizer import RenderOutput, rasterize


def to_uint8(rgb: Union[torch.Tensor, np.ndarray]) -> np.ndarray:
    """(H, W, 3) float colours in [0, 1] (clamped) -> (H, W, 3) uint8 numpy array (round to nearest)."""
    if isinstance(rgb, torch.Tensor):
        rgb = rgb.detach().float().cpu().numpy()
    rgb = np.asarray(rgb, dtype=np.float32)
    return (np.clip(rgb, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def render_scene_frame(
    means: torch.Tensor,
    covars: torch.Tensor,
    opacities: torch.Tensor,
    colors: torch.Tensor,
    camera: Camera,
    background=(1.0, 1.0, 1.0),
    backend: str = "auto",
    view_rotations: Optional[torch.Tensor] = None,
) -> RenderOutput:
    """:func:`rasterize` with a :class:`Camera`; ``colors`` (N, 3) or SH (N, K+1, 3).

    ``background`` (3,) defaults to white; pass None for a transparent (black) background.
    """
    bg = None if background is None else torch.as_tensor(background, dtype=torch.float32, device=means.device)
    return rasterize(
        means, covars, opacities, colors,
        camera.viewmat.to(means.device), camera.K.to(means.device), camera.width, camera.height,
        background=bg, backend=backend, view_rotations=view_rotations,
    )


def _has_ffmpeg() -> bool:
    try:
        import imageio_ffmpeg  # noqa: F401
    except ImportError:
        return False
    return True


def write_video(
    frames: Iterable[Union[np.ndarray, torch.Tensor]],
    path: Union[str, os.PathLike],
    fps: float = 30.0,
    quality: int = 8,
) -> Path:
    """Write (H, W, 3) uint8 frames to ``path`` (mp4 via imageio-ffmpeg).

    Frames are consumed lazily (an iterator/generator works). All frames must share one size; sides
    that are not multiples of 16 are padded by edge replication (never silently resized).
    If imageio-ffmpeg is missing, writes PNG frames into ``<path stem>_frames/frame%04d.png`` instead,
    warns, and returns that folder.

    Returns:
        The path written (the video file or the PNG folder).
    Raises:
        OptionError for fps <= 0, no frames, a frame that is not (H, W, 3) uint8, or a size change.
    """
    path = Path(path)
    if not fps > 0:
        raise OptionError(f"fps must be positive, got {fps}")
    if path.parent and not path.parent.exists():
        raise FileNotFoundError(f"output folder does not exist: {path.parent}")
    import imageio.v2 as imageio

    it = iter(frames)
    use_ffmpeg = _has_ffmpeg()
    if use_ffmpeg:
        target = path
        writer = None
    else:
        target = path.with_name(path.stem + "_frames")
        target.mkdir(exist_ok=True)
        warnings.warn(f"imageio-ffmpeg is not installed; writing PNG frames to {target} instead of {path}")
    shape = None
    count = 0
    try:
        for frame in it:
            f = frame.detach().cpu().numpy() if isinstance(frame, torch.Tensor) else np.asarray(frame)
            if f.dtype != np.uint8 or f.ndim != 3 or f.shape[2] != 3:
                raise OptionError(f"video frame {count} must be (H, W, 3) uint8, got {f.shape} {f.dtype}")
            if shape is None:
                shape = f.shape
            elif f.shape != shape:
                raise OptionError(f"video frame {count} has size {f.shape}, expected {shape} like frame 0")
            count += 1
            if use_ffmpeg:
                ph, pw = (-f.shape[0]) % 16, (-f.shape[1]) % 16
                if ph or pw:
                    f = np.pad(f, ((0, ph), (0, pw), (0, 0)), mode="edge")
                if writer is None:
                    writer = imageio.get_writer(
                        str(target), fps=fps, codec="libx264", quality=quality, macro_block_size=16,
                        pixelformat="yuv420p",
                    )
                writer.append_data(f)
            else:
                imageio.imwrite(str(target / f"frame{count:04d}.png"), f)
    finally:
        if use_ffmpeg and writer is not None:
            writer.close()
    if count == 0:
        raise OptionError(f"no frames to write to {path}")
    return target
