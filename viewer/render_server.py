"""Server-rendered display mode: one render thread per browser tab.

Each thread renders the newest published simulation frame from that client's latest camera (older frames and
camera poses are skipped, never queued), encodes a JPEG and sends it as the client's background image. The
render height adapts so that one render takes about ``1 / target_fps`` seconds.

Backends: ``"gsplat"`` (CUDA only, full speed) and ``"torch"`` (our CPU EWA rasteriser, rendering.md section 2;
meant for reduced resolutions). Both go through ``physskin_gs.render.rasterize``.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Callable, Optional

import numpy as np

from .camera import CameraState, viewmat_and_K
from .sim import Frame, LatestSlot, default_threads, set_thread_torch_threads


def cuda_available() -> bool:
    """True when torch sees a CUDA device (gsplat rendering possible)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False


def render_frame(
    frame: Frame,
    cam: CameraState,
    width: int,
    height: int,
    colors: np.ndarray,
    opacities: np.ndarray,
    backend: str,
    background=(1.0, 1.0, 1.0),
) -> np.ndarray:
    """Render ``frame`` from ``cam`` at ``width`` x ``height``; returns (H, W, 3) uint8.

    Args:
        colors: (N, 3) float32 per-Gaussian RGB in [0, 1] (view-independent display colours).
        opacities: (N,) float32 in [0, 1].
        backend: ``"torch"`` or ``"gsplat"`` (passed to ``physskin_gs.render.rasterize``).
    """
    import torch

    from physskin_gs.render import rasterize

    viewmat, K = viewmat_and_K(cam, width, height)
    dev = torch.device("cuda") if backend == "gsplat" else torch.device("cpu")
    means, covars = frame.means_t, frame.covars_t
    out = rasterize(
        means.to(dev, torch.float32),
        covars.to(dev, torch.float32),
        torch.as_tensor(opacities, device=dev, dtype=torch.float32),
        torch.as_tensor(colors, device=dev, dtype=torch.float32),
        torch.as_tensor(viewmat, device=dev),
        torch.as_tensor(K, device=dev),
        int(width),
        int(height),
        background=torch.tensor(background, device=dev, dtype=torch.float32),
        backend=backend,
    )
    rgb = out.rgb if hasattr(out, "rgb") else out[0]
    return (rgb.detach().clamp(0, 1) * 255).to(torch.uint8).cpu().numpy()


class ClientRenderThread:
    """Renders for one client until stopped.

    Args:
        client: the viser ClientHandle (``.camera``, ``.scene.set_background_image``).
        slot: the simulation's LatestSlot.
        get_colors: ``() -> (colors (N, 3), opacities (N,))`` display colours of every Gaussian.
        backend: ``"torch"`` or ``"gsplat"``.
        target_fps: renders per second to aim for; the height adapts between ``min_height`` and the client's
            viewport height (capped at ``max_height``).
        on_error: ``(where, exc, tb)`` reporter; the thread keeps running after an error (retrying at most
            once a second).
        render_fn: injectable renderer (tests), same signature as :func:`render_frame`.
    """

    def __init__(
        self,
        client,
        slot: LatestSlot,
        get_colors: Callable[[], tuple],
        *,
        backend: str = "torch",
        target_fps: float = 8.0,
        initial_height: int = 240,
        min_height: int = 64,
        max_height: int = 1080,
        jpeg_quality: int = 80,
        on_error: Optional[Callable[[str, BaseException, str], None]] = None,
        render_fn: Callable[..., np.ndarray] = render_frame,
    ) -> None:
        self.client = client
        self.slot = slot
        self.get_colors = get_colors
        self.backend = backend
        self.target_fps = float(target_fps)
        self.height = int(initial_height)
        self.min_height = int(min_height)
        self.max_height = int(max_height)
        self.jpeg_quality = int(jpeg_quality)
        self.on_error = on_error
        self.render_fn = render_fn
        self.renders = 0
        self.last_ms = 0.0
        self._camera_version = 0
        self._color_cache = None
        self._stop = threading.Event()
        self._kick = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"physskin-render-{client.client_id}", daemon=True)

    def start(self) -> "ClientRenderThread":
        """Start the render thread; returns self."""
        self._thread.start()
        return self

    def camera_changed(self) -> None:
        """Note that the client's camera moved, so the next frame is rendered even if the simulation is idle."""
        self._camera_version += 1
        self._kick.set()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread and join it for at most ``timeout`` s (not when called from the thread itself)."""
        self._stop.set()
        self._kick.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _camera(self) -> Optional[CameraState]:
        try:
            c = self.client.camera
            aspect = float(c.aspect) if c.aspect else float(c.image_width) / max(float(c.image_height), 1.0)
            return CameraState(tuple(c.wxyz), tuple(c.position), float(c.fov), aspect), int(c.image_height)
        except Exception:  # noqa: BLE001 - no camera message yet
            return None

    def _device_colors(self):
        """Display colours as tensors on the render device, converted once per colour change."""
        colors, opac = self.get_colors()
        cache = self._color_cache
        if cache is None or cache[0] is not colors or cache[1] is not opac:
            import torch

            dev = torch.device("cuda") if self.backend == "gsplat" else torch.device("cpu")
            cache = (colors, opac, torch.as_tensor(colors, dtype=torch.float32, device=dev),
                     torch.as_tensor(opac, dtype=torch.float32, device=dev))
            self._color_cache = cache
        return cache[2], cache[3]

    def _adapt(self, seconds: float, viewport_h: int) -> None:
        target = 1.0 / self.target_fps
        hi = max(self.min_height, min(self.max_height, viewport_h or self.max_height))
        if seconds > 1.15 * target:
            self.height = int(self.height * max(0.5, (target / seconds) ** 0.5))
        elif seconds < 0.7 * target:
            self.height = int(self.height * min(1.25, (target / max(seconds, 1e-4)) ** 0.5))
        self.height = int(np.clip(self.height, self.min_height, hi))

    def _run(self) -> None:
        # a new thread starts with whatever torch thread count some other thread set last: set it explicitly
        set_thread_torch_threads(default_threads()[1])
        seen_frame, seen_cam = -1, -1
        while not self._stop.is_set():
            if self._camera_version == seen_cam and self.slot.wait_newer(seen_frame, 0.02) is None:
                continue  # nothing new: neither a frame nor a camera move
            frame = self.slot.get()
            got = self._camera()
            if got is None or frame is None:
                self._stop.wait(0.05)
                continue
            cam, viewport_h = got
            seen_frame, seen_cam = frame.version, self._camera_version
            try:
                t0 = time.perf_counter()
                w, h = cam.size_at(self.height)
                colors, opac = self._device_colors()
                img = self.render_fn(frame, cam, w, h, colors, opac, self.backend)
                self.client.scene.set_background_image(img, format="jpeg", jpeg_quality=self.jpeg_quality)
                dt = time.perf_counter() - t0
                self.last_ms = dt * 1e3
                self.renders += 1
                self._adapt(dt, viewport_h)
            except Exception as exc:  # noqa: BLE001 - shown in the page, the server keeps running
                if self.on_error is not None:
                    self.on_error(f"render (client {self.client.client_id})", exc, traceback.format_exc())
                self._stop.wait(1.0)
