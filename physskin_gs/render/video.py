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

from physskin_gs import interrupts
from physskin_gs.errors import OptionError, PhysSkinError
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


def video_frame_count(path: Union[str, os.PathLike]) -> Optional[int]:
    """Number of video frames in the file at ``path`` as ffmpeg reads it (packets copied, nothing decoded), or
    None when ffmpeg is not available. A file ffmpeg cannot open (missing, truncated, no video stream) gives 0."""
    try:
        import imageio_ffmpeg
    except ImportError:
        return None
    import re
    import subprocess

    try:
        exe = imageio_ffmpeg.get_ffmpeg_exe()
        proc = subprocess.run(
            [exe, "-nostdin", "-v", "error", "-stats", "-i", os.fspath(path), "-map", "0:v:0", "-c", "copy",
             "-f", "null", "-"], capture_output=True, timeout=600,
        )
    except (OSError, RuntimeError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return 0
    found = re.findall(rb"frame=\s*(\d+)", proc.stderr)
    return int(found[-1]) if found else 0


def write_video(
    frames: Iterable[Union[np.ndarray, torch.Tensor]],
    path: Union[str, os.PathLike],
    fps: float = 30.0,
    quality: int = 8,
) -> Path:
    """Write (H, W, 3) uint8 frames to ``path`` (mp4, mov or mkv as H.264, webm as VP9, via imageio-ffmpeg; gif
    through imageio, looping, held in memory and written atomically, without ffmpeg: :func:`_write_gif`).

    Frames are consumed lazily (an iterator/generator works). All frames must share one size; sides
    that are not multiples of 16 are padded by edge replication (never silently resized).
    The video is written to a temporary name beside ``path``, checked (it exists and ffmpeg reads back as many
    frames as were given), then renamed into place; a failed write leaves no file at ``path``.
    If imageio-ffmpeg is missing, writes PNG frames into ``<path stem>_frames/frame%04d.png`` instead (or
    ``<path stem>_frames_2``, ``_3``, ... when that folder exists and is not empty: nothing is written over), warns,
    and returns that folder.

    Returns:
        The path written (the video file or the PNG folder).
    Raises:
        OptionError for fps <= 0, no frames, a frame that is not (H, W, 3) uint8, or a size change.
        FileNotFoundError: the output folder does not exist.
        PhysSkinError: the video could not be written (ffmpeg failed, the file is missing or incomplete); the
            message names the file and what went wrong.
    """
    path = Path(path)
    if not fps > 0 or not np.isfinite(fps):
        raise OptionError(f"fps must be a positive finite number, got {fps}")
    if path.parent and not path.parent.exists():
        raise FileNotFoundError(f"output folder does not exist: {path.parent}")
    if path.parent and not path.parent.is_dir():
        raise PhysSkinError(f"could not write video {path}: {path.parent} is not a folder")
    if path.suffix.lower() == ".gif":
        return _write_gif(frames, path, fps)
    import imageio.v2 as imageio

    it = iter(frames)
    use_ffmpeg = _has_ffmpeg()
    if use_ffmpeg:
        target = path
        partial = path.with_name(f".{path.stem}.partial{path.suffix}")
        writer = None
    else:
        target = path.with_name(path.stem + "_frames")
        k = 2
        while target.exists() and (not target.is_dir() or any(target.iterdir())):  # never into an earlier one
            target = path.with_name(f"{path.stem}_frames_{k}")
            k += 1
        partial = None
        try:
            target.mkdir(exist_ok=True)
        except OSError as exc:
            raise PhysSkinError(f"could not create the frame folder {target}: {exc.strerror or exc}") from None
        warnings.warn(f"imageio-ffmpeg is not installed; writing PNG frames to {target} instead of {path}")
    shape = None
    count = 0
    ok = False
    try:
        for frame in it:
            f = _frame_array(frame, count, shape)
            shape = f.shape
            count += 1
            try:
                if use_ffmpeg:
                    ph, pw = (-f.shape[0]) % 16, (-f.shape[1]) % 16
                    if ph or pw:
                        f = np.pad(f, ((0, ph), (0, pw), (0, 0)), mode="edge")
                    if writer is None:
                        writer = imageio.get_writer(str(partial), fps=fps, macro_block_size=16, pixelformat="yuv420p",
                                                    **_codec_options(path, quality))
                        # the first frame starts ffmpeg: a Ctrl-C in the middle of that fork (or in its post-fork
                        # hooks) would leave an ffmpeg the writer does not know of, writing an empty partial file
                        # after we have gone; it is raised once the writer holds the process (and then closes it)
                        with interrupts.deferred():
                            writer.append_data(f)
                    else:
                        writer.append_data(f)
                else:
                    imageio.imwrite(str(target / f"frame{count:04d}.png"), f)
            except (OSError, RuntimeError, ValueError) as exc:
                raise PhysSkinError(f"could not write video {path}: {exc}") from None
        ok = True
    finally:
        try:
            if use_ffmpeg and writer is not None:
                try:
                    writer.close()
                except (OSError, RuntimeError, ValueError) as exc:
                    if ok:
                        ok = False
                        raise PhysSkinError(f"could not write video {path}: {exc}") from None
                except BaseException:  # an interrupt while ffmpeg finishes: the partial file goes too
                    ok = False
                    raise
        finally:
            if not ok and partial is not None:
                _unlink(partial)
    if count == 0:
        raise OptionError(f"no frames to write to {path}")
    if use_ffmpeg:
        try:
            _check_video(partial, path, count)
            interrupts.check()  # an interrupt that ffmpeg's reader swallowed: no video replaces the old one
        except BaseException:
            _unlink(partial)
            raise
        os.replace(partial, path)
        interrupts.note_written(path)
    else:
        missing = [i for i in range(1, count + 1) if not (target / f"frame{i:04d}.png").is_file()]
        if missing:
            raise PhysSkinError(f"could not write frame {missing[0]} of {count} to {target}")
    return target


def _frame_array(frame, index: int, shape) -> np.ndarray:
    """Video frame ``index`` as an (H, W, 3) uint8 numpy array (from a tensor or an array). Raises OptionError for
    another dtype or layout, or a size other than ``shape`` (frame 0's; None: any)."""
    f = frame.detach().cpu().numpy() if isinstance(frame, torch.Tensor) else np.asarray(frame)
    if f.dtype != np.uint8 or f.ndim != 3 or f.shape[2] != 3:
        raise OptionError(f"video frame {index} must be (H, W, 3) uint8, got {f.shape} {f.dtype}")
    if shape is not None and f.shape != shape:
        raise OptionError(f"video frame {index} has size {f.shape}, expected {shape} like frame 0")
    return f


def _write_gif(frames, path: Path, fps: float) -> Path:
    """An animated, looping GIF of ``frames`` at ``fps`` (imageio; whole in memory), written to a temporary name
    beside ``path`` and renamed. A GIF stores whole centiseconds per frame: the nearest one, at least 20 ms
    (browsers slow shorter ones); imageio takes milliseconds (``1 / fps`` wrote 0 ms delays, played at about 10
    fps). Raises OptionError (no frames, a bad frame), PhysSkinError (the file could not be written)."""
    import imageio.v2 as imageio

    from physskin_gs.io._shared import atomic_output

    data = []
    for f in frames:
        data.append(_frame_array(f, len(data), data[0].shape if data else None))
    if not data:
        raise OptionError(f"no frames to write to {path}")
    delay = max(20.0, 10.0 * round(100.0 / fps))
    try:
        with atomic_output(path) as tmp:
            imageio.mimsave(tmp, data, duration=delay, loop=0)
    except (OSError, RuntimeError, ValueError) as exc:
        raise PhysSkinError(f"could not write video {path}: {exc}") from None
    return path


def _codec_options(path: Path, quality: int) -> dict:
    """imageio-ffmpeg writer options for ``path``'s container: VP9 at a constant quality for ``.webm`` (which
    holds no H.264: ffmpeg refused every frame, and the run ended with a misleading "held 0 of N frames"), H.264
    at ``quality`` (0-10) otherwise (.mp4, .mov, .mkv)."""
    if path.suffix.lower() == ".webm":
        crf = int(round(50 - 3 * min(max(quality, 0), 10)))  # quality 8 -> crf 26; 10 -> 20 (lower is better)
        return {"codec": "libvpx-vp9", "quality": None, "output_params": ["-crf", str(crf), "-b:v", "0"]}
    return {"codec": "libx264", "quality": quality}


def _unlink(p: Optional[Path]) -> None:
    try:
        if p is not None:
            p.unlink()
    except OSError:
        pass


def _check_video(written: Path, path: Path, count: int) -> None:
    """Raise PhysSkinError (and remove ``written``) unless it is a non-empty video holding ``count`` frames."""
    if not written.is_file() or written.stat().st_size == 0:
        _unlink(written)
        raise PhysSkinError(f"could not write video {path}: ffmpeg produced no file (see its message above)")
    n = video_frame_count(written)
    if n is not None and n != count:
        _unlink(written)
        raise PhysSkinError(f"could not write video {path}: the new file held {n} of {count} frames (ffmpeg stopped "
                            "early: a full disk or a file-size limit?)")
