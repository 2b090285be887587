"""Test doubles for the viewer: a small synthetic scene and a fake AnimatedScene.

:class:`FakeAnimatedScene` implements the AnimatedScene interface the viewer uses (physskin_gs/pipeline.py) with
toy dynamics: each handle carries a translation ``u_h`` with a damped spring back to rest, and a point moves by
the weight-blended translation ``x = x0 + sum_h w_h u_h`` (translation-only LBS). Drags add a spring pulling the
dragged Gaussians toward the target, with the force spread over handles by the skinning weights. This is
enough to test the viewer's plumbing (drag -> state moves toward the target; release -> springs back) without
the real solver, and it is cheap enough for benchmarks of the viewer alone.
"""

from __future__ import annotations

import dataclasses
import time
from types import SimpleNamespace
from typing import Dict, Optional

import numpy as np
import torch

from physskin_gs.deform import rest_covariances
from physskin_gs.scene import C0, GaussianScene


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02) -> bool:
    """Poll ``predicate()`` every ``interval`` s for up to ``timeout`` s; True once it holds.

    Returns the predicate's final value (as bool) after the deadline; raises whatever ``predicate`` raises.
    """
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def make_blob_scene(n: int = 2000, seed: int = 0, size: float = 1.0, log_scale: float = -4.0) -> GaussianScene:
    """A coloured bar of ``n`` Gaussians (long along x, ``size`` units) for viewer tests; colour varies along x."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, 3, generator=g)
    means = (u - 0.5) * torch.tensor([size, 0.3 * size, 0.3 * size])
    t = u[:, 0:1]
    rgb = torch.cat([t, 0.4 * torch.ones_like(t), 1 - t], dim=1)
    return GaussianScene(
        means=means.float(),
        quats=torch.tensor([[1.0, 0.0, 0.0, 0.0]]).repeat(n, 1),
        log_scales=torch.full((n, 3), float(log_scale)) + 0.3 * torch.rand(n, 3, generator=g),
        opacity_logits=torch.full((n,), 3.0),
        sh_dc=((rgb - 0.5) / C0).float(),
        sh_rest=torch.zeros(n, 0, 3),
        source="synthetic blob",
        format="synthetic",
    )


def make_capture_scene(n_object: int = 2000, n_support: int = 1500, n_floaters: int = 30, seed: int = 0,
                       up_axis: int = 2) -> GaussianScene:
    """A tiny "real capture" for the viewer's selection tests: an orange block standing on a wide grey slab, plus
    a green clump of floaters far off, with up along +axis ``up_axis`` (0, 1 or 2).

    Rows are in the order slab (``n_support``), block (``n_object``), floaters (``n_floaters``). The block spans
    [-0.3, 0.3] across and [0.05, 0.9] along up; the slab is 3 x 3 and 0.02 thick at 0..0.02 along up; the floaters
    sit around (2.5, 2.5, 2.0) (in the frame where up is the last axis).
    """
    rng = np.random.default_rng(seed)
    slab = np.column_stack([rng.uniform(-1.5, 1.5, (n_support, 2)), rng.uniform(0.0, 0.02, n_support)])
    block = rng.uniform([-0.3, -0.3, 0.05], [0.3, 0.3, 0.9], (n_object, 3))
    floaters = rng.uniform(-0.2, 0.2, (n_floaters, 3)) + np.array([2.5, 2.5, 2.0])
    pts = np.concatenate([slab, block, floaters])
    order = [a for a in range(3) if a != up_axis] + [up_axis]
    pts = pts[:, np.argsort(order)]  # the last column (up) goes to column up_axis
    n = pts.shape[0]
    rgb = np.empty((n, 3))
    rgb[:n_support] = (0.5, 0.5, 0.5)
    rgb[n_support:n_support + n_object] = (0.9, 0.45, 0.1)
    rgb[n_support + n_object:] = (0.1, 0.8, 0.2)
    return GaussianScene(
        means=torch.from_numpy(pts).float(),
        quats=torch.tensor([[1.0, 0.0, 0.0, 0.0]]).repeat(n, 1),
        log_scales=torch.full((n, 3), -4.0),
        opacity_logits=torch.full((n,), 3.0),
        sh_dc=torch.from_numpy((rgb - 0.5) / C0).float(),
        sh_rest=torch.zeros(n, 0, 3),
        source="synthetic capture",
        format="synthetic",
    )


class FakeDeformer:
    """The fake scene's deformer (same contract as :class:`physskin_gs.deform.GaussianDeformer.deform`).

    ``deform(Z)`` with Z (H, 3, 4) handle transforms (only the translations ``Z[:, :, 3]`` are used: the fake's
    LBS is translation-only) returns (means (N, 3), covars (N, 3, 3)) float32 buffers owned by the deformer and
    overwritten by the next call, like the real one.
    """

    def __init__(self, x0: torch.Tensor, W: torch.Tensor, cov0: torch.Tensor) -> None:
        self.x0, self.W, self.cov0 = x0, W, cov0
        self.N = x0.shape[0]
        self.means = torch.empty_like(x0)
        self.covars = torch.empty_like(cov0)

    def deform(self, Z: torch.Tensor):
        torch.add(self.x0, self.W @ Z[:, :, 3].to(torch.float32), out=self.means)  # [N, 3] = x0 + W u
        self.covars.copy_(self.cov0)
        return self.means, self.covars


class FakeAnimatedScene:
    """Toy stand-in for ``physskin_gs.pipeline.AnimatedScene`` (same method names and return types).

    Args:
        scene: the GaussianScene; every Gaussian is ``moving``.
        num_handles: handles are spread along the scene's longest axis; weights are a normalised Gaussian
            kernel of the distance to each handle's rest centre.
        stiffness: spring constant pulling each handle back to rest (1/s^2).
        drag_stiffness: spring constant of a drag (1/s^2).
        step_cost_s: optional sleep per step to imitate a slower solver.
        moving: optional (N,) bool mask of the rows that move (default: every row). The other rows are static
            (the scene analysis' support / background): the deformer covers the moving rows only and
            ``deformed_gaussians()`` keeps the static rows at rest, as the real AnimatedScene does. Handles and
            weights are then built from the moving rows.
    """

    def __init__(
        self,
        scene: GaussianScene,
        num_handles: int = 4,
        stiffness: float = 40.0,
        drag_stiffness: float = 200.0,
        dt: float = 0.03,
        step_cost_s: float = 0.0,
        moving=None,
    ) -> None:
        self.scene = scene
        n = scene.num_gaussians
        self.moving = torch.ones(n, dtype=torch.bool) if moving is None else torch.as_tensor(moving, dtype=torch.bool)
        if self.moving.shape != (n,) or not bool(self.moving.any()):
            raise ValueError(f"moving must be an ({n},) bool mask with at least one True")
        self._all = bool(self.moving.all())
        self._rest_means = scene.means.float()
        self._rest_covars = rest_covariances(scene.quats, scene.log_scales)  # as AnimatedScene's static rows
        mov = self.moving
        self.x0 = scene.means[mov].double().numpy()  # [M, 3] the moving rows (all rows by default)
        self.cov0 = self._rest_covars[mov]
        n = self.x0.shape[0]
        self.dt = dt
        self.frame = 0
        self.up_vector = np.array([0.0, 0.0, 1.0])
        self.stiffness = stiffness
        self.drag_stiffness = drag_stiffness
        self.damping = 4.0
        self.step_cost_s = step_cost_s
        axis = int(np.argmax(np.ptp(self.x0, axis=0)))
        lo, hi = self.x0[:, axis].min(), self.x0[:, axis].max()
        centres = np.zeros((num_handles, 3))
        centres[:, axis] = np.linspace(lo, hi, num_handles + 2)[1:-1] if num_handles > 0 else []
        centres += self.x0.mean(0) * (np.arange(3) != axis)
        sigma = (hi - lo) / max(num_handles, 1) * 0.6 + 1e-9
        d2 = ((self.x0[:, None, :] - centres[None]) ** 2).sum(-1)
        w = np.exp(-0.5 * d2 / sigma**2) + 1e-12
        self.W = w / w.sum(1, keepdims=True)  # [N, H]
        self._W_t = torch.from_numpy(self.W).float()
        self._x0_t = torch.from_numpy(self.x0).float()
        self._sh = scene.sh
        self._opac = scene.opacities
        self._view_rot = torch.eye(3).expand(scene.num_gaussians, 3, 3)
        self.num_handles = num_handles
        self.u = np.zeros((num_handles, 3))
        self.v = np.zeros((num_handles, 3))
        self._drags: Dict[int, dict] = {}
        self._next_id = 0
        self.material = {"E": 2e4, "nu": 0.45, "density": 100.0}
        self.gravity = 0.0
        self.gravity_direction: Optional[np.ndarray] = None  # (3,) float64 once set_gravity gets one
        self.floor = (False, None)
        self.pin = None
        self.fail_next_step = False  # tests: make the next step raise
        self.deformer = FakeDeformer(self._x0_t, self._W_t, self.cov0)  # used by the viewer's split path

    # ------------------------------------------------------------------ simulation
    def _positions(self) -> np.ndarray:
        u = torch.from_numpy(self.u).float()
        return (self._x0_t + self._W_t @ u).double().numpy()  # [N, 3]

    def _positions_t(self) -> torch.Tensor:
        return self._x0_t + self._W_t @ torch.from_numpy(self.u).float()  # [N, 3] float32

    def step(self, n: int = 1) -> dict:
        t0 = time.perf_counter()
        for _ in range(n):
            if self.fail_next_step:
                self.fail_next_step = False
                raise RuntimeError("fake solver failure (test)")
            force = -self.stiffness * self.u - self.damping * self.v
            for d in self._drags.values():
                idx, wd = d["index"], d["weights"]
                cur = ((self.x0[idx] + self.W[idx] @ self.u) * wd[:, None]).sum(0)
                pull = self.drag_stiffness * (d["target"] - cur)  # [3]
                share = (self.W[idx] * wd[:, None]).sum(0)  # [H] how much each handle moves the dragged points
                force += share[:, None] * pull[None, :] / max(share.max(), 1e-12)
            self.v += self.dt * force
            self.u += self.dt * self.v
            self.frame += 1
        if self.step_cost_s:
            time.sleep(self.step_cost_s)
        energy = 0.5 * self.stiffness * float((self.u**2).sum())
        return {"ms": (time.perf_counter() - t0) * 1e3, "newton_iters": 1, "energy": energy}

    def reset(self) -> None:
        self.u[:] = 0
        self.v[:] = 0
        self.frame = 0

    def _full_means(self) -> torch.Tensor:
        """(N, 3) float32 every row: the moving ones deformed, the static ones at rest."""
        if self._all:
            return self._positions_t()
        means = self._rest_means.clone()
        means[self.moving] = self._positions_t()
        return means

    def deformed_gaussians(self):
        return SimpleNamespace(
            means=self._full_means(),
            covars=self.cov0 if self._all else self._rest_covars,
            view_rotations=self._view_rot,
            opacities=self._opac,
            sh=self._sh,
        )

    def handle_transforms_scene(self) -> torch.Tensor:
        """(H, 3, 4) float64 handle transforms: identity linear part, translation ``u_h``."""
        Z = torch.zeros(self.num_handles, 3, 4, dtype=torch.float64)
        Z[:, :, :3] = torch.eye(3, dtype=torch.float64)
        Z[:, :, 3] = torch.from_numpy(self.u)
        return Z

    def deformed_scene(self) -> GaussianScene:
        return dataclasses.replace(self.scene, means=self._full_means())

    @property
    def moving_index(self) -> torch.Tensor:
        """(M,) int64 rows that move, as ``AnimatedScene.moving_index``."""
        return torch.nonzero(self.moving).flatten()

    def export_rest_scene(self) -> GaussianScene:
        """The rest scene (a fake scene has no invalid rows to sanitise)."""
        return self.scene

    def deformed_rows(self) -> Dict[str, torch.Tensor]:
        """Moving rows as ``AnimatedScene.deformed_rows`` gives them (rotations and scales unchanged)."""
        idx = self.moving_index
        out = {"index": idx, "means": self._full_means()[idx], "quats": self.scene.quats[idx],
               "log_scales": self.scene.log_scales[idx]}
        if self.scene.sh_rest.shape[1]:
            out["sh_rest"] = self.scene.sh_rest[idx]
        return out

    # ------------------------------------------------------------------ handles and drags
    def handle_positions(self) -> np.ndarray:
        x = self._positions_t().double()
        W = self._W_t.double()
        return ((W.T @ x) / W.sum(0)[:, None]).numpy()  # [H, 3] weight-weighted centroids

    def skinning_weights(self) -> torch.Tensor:
        return torch.from_numpy(self.W).float()

    def _new_drag(self, index: np.ndarray, weights: np.ndarray, target: np.ndarray) -> int:
        did = self._next_id
        self._next_id += 1
        self._drags[did] = {"index": index, "weights": weights / weights.sum(), "target": np.asarray(target, float)}
        return did

    def start_drag(self, point, radius: Optional[float] = None) -> int:
        x = self._positions()
        p = np.asarray(point, dtype=np.float64)
        d = np.linalg.norm(x - p, axis=1)
        r = radius if radius is not None else 0.1 * float(np.ptp(self.x0, axis=0).max())
        idx = np.nonzero(d <= r)[0]
        if idx.size == 0:
            idx = np.array([int(np.argmin(d))])
        return self._new_drag(idx, np.ones(idx.size), p)

    def start_handle_drag(self, handle: int) -> int:
        if not 0 <= handle < self.num_handles:
            raise IndexError(f"handle {handle} out of range (0..{self.num_handles - 1})")
        idx = np.nonzero(np.argmax(self.W, axis=1) == handle)[0]
        return self._new_drag(idx, self.W[idx, handle], self.handle_positions()[handle])

    def update_drag(self, drag_id: int, target) -> None:
        self._drags[drag_id]["target"] = np.asarray(target, dtype=np.float64)

    def end_drag(self, drag_id: int) -> None:
        self._drags.pop(drag_id, None)

    @property
    def num_drags(self) -> int:
        return len(self._drags)

    # ------------------------------------------------------------------ parameters
    def set_material(self, E=None, nu=None, density=None) -> None:
        for k, v in (("E", E), ("nu", nu), ("density", density)):
            if v is not None:
                self.material[k] = float(v)
        self.stiffness = 40.0 * self.material["E"] / 2e4

    def set_gravity(self, g, direction=None) -> None:
        self.gravity = float(g)
        self.gravity_direction = None if direction is None else np.asarray(direction, dtype=np.float64)

    def set_floor(self, enabled, height=None) -> None:
        self.floor = (bool(enabled), height)

    def set_damping(self, c) -> None:
        self.damping = 4.0 * float(c) / 0.02

    def set_pin(self, spec) -> None:
        self.pin = spec


# ------------------------------------------------------------------------------------------- websocket client
class ViserWsClient:
    """A minimal browser stand-in speaking viser's websocket protocol (rendering.md section 5).

    Sends camera, transform-control and GUI messages as msgpack dicts; a reader thread decodes what the
    server sends (zstd-compressed msgpack followed by 8-byte-aligned binary buffers) and keeps the latest
    message of each (type, name) plus counts per type. Every wait is bounded.
    """

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0) -> None:
        import threading

        import msgspec
        import viser
        import zstandard
        from websockets.sync.client import connect

        self._msgpack = msgspec.msgpack
        self._zstd = zstandard.ZstdDecompressor()
        self.ws = connect(
            f"ws://{host}:{port}",
            subprotocols=[f"viser-v{viser.__version__}"],
            open_timeout=timeout,
            max_size=None,
        )
        self.counts: Dict[str, int] = {}
        self.name_counts: Dict[tuple, int] = {}  # (type, name) -> messages received
        self.first_seen: Dict[tuple, float] = {}  # (type, name) -> time.monotonic() of the first one
        self._seq: Dict[tuple, int] = {}  # (type, name) -> arrival number of the newest one
        self._n = 0
        self.gui_updates: Dict[str, list] = {}  # GUI uuid -> every GuiUpdateMessage ``updates`` dict, in order
        self.latest: Dict[tuple, dict] = {}
        self.decode_errors: list = []
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._read, name="ws-test-client", daemon=True)
        self._thread.start()

    # -------------------------------------------------------------- receiving
    def _decode(self, raw: bytes) -> list:
        n_inner = int.from_bytes(raw[0:8], "little")
        n_comp = int.from_bytes(raw[8:16], "little")
        inner = self._zstd.decompress(raw[16 : 16 + n_comp], max_output_size=n_inner)
        payload = self._msgpack.decode(inner)
        offset = 16 + n_comp
        buffers = []
        view = memoryview(raw)  # zero-copy slices (a browser maps typed arrays onto the message the same way)
        for length in payload.get("binaryBufferLengths", ()):
            offset += (8 - offset % 8) % 8
            buffers.append(view[offset : offset + length])
            offset += length

        def resolve(v):
            if isinstance(v, dict):
                if "__binary_index" in v and "dtype" in v:
                    return np.frombuffer(buffers[v["__binary_index"]], dtype=np.dtype(v["dtype"]))
                return {k: resolve(x) for k, x in v.items()}
            if isinstance(v, list):
                return [resolve(x) for x in v]
            return v

        return [resolve(m) for m in payload.get("messages", ())]

    def _read(self) -> None:
        while not self._closed:
            try:
                raw = self.ws.recv(timeout=0.2)
            except TimeoutError:
                continue
            except Exception:  # noqa: BLE001 - connection closed
                return
            if isinstance(raw, str):
                continue
            try:
                msgs = self._decode(raw)
            except Exception as exc:  # noqa: BLE001
                self.decode_errors.append(repr(exc))
                continue
            now = time.monotonic()
            with self._lock:
                for m in msgs:
                    t = m.get("type", "?")
                    key = (t, m.get("name"))
                    self.counts[t] = self.counts.get(t, 0) + 1
                    self.name_counts[key] = self.name_counts.get(key, 0) + 1
                    self.first_seen.setdefault(key, now)
                    self._n += 1
                    self._seq[key] = self._n
                    self.latest[key] = m
                    if t == "GuiUpdateMessage":
                        self.gui_updates.setdefault(m.get("uuid"), []).append(dict(m.get("updates", {})))

    def count(self, msg_type: str, name=None) -> int:
        """Messages of ``msg_type`` received so far (with ``name``: only those for that scene node)."""
        with self._lock:
            if name is not None:
                return self.name_counts.get((msg_type, name), 0)
            return self.counts.get(msg_type, 0)

    def splat_buffer(self, name: str) -> Optional[np.ndarray]:
        """The newest (R, 8) uint32 splat records received for node ``name`` (its add message or a later buffer
        update), or None when none arrived."""
        with self._lock:
            add = self.latest.get(("GaussianSplatsMessage", name))
            upd = self.latest.get(("SceneNodeUpdateMessage", name))
            n_add = self._seq.get(("GaussianSplatsMessage", name), 0)
            n_upd = self._seq.get(("SceneNodeUpdateMessage", name), 0)
        buf = None
        if add is not None:
            buf = add["props"]["buffer"]
        if upd is not None and "buffer" in upd.get("updates", {}) and n_upd > n_add:
            buf = upd["updates"]["buffer"]
        if buf is None:
            return None
        return np.asarray(buf).view(np.uint32).reshape(-1, 8)

    def get(self, msg_type: str, name=None) -> Optional[dict]:
        with self._lock:
            return self.latest.get((msg_type, name))

    def wait_for(self, predicate, timeout: float = 10.0, interval: float = 0.02) -> bool:
        """:func:`wait_until` (kept as a method for callers holding only the client)."""
        return wait_until(predicate, timeout, interval)

    # -------------------------------------------------------------- sending
    def send(self, msg_type: str, **fields) -> None:
        self.ws.send(self._msgpack.encode({"type": msg_type, **fields}))

    def send_camera(self, position, look_at, up=(0.0, 0.0, 1.0), fov: float = 0.9, width: int = 320, height: int = 240) -> None:
        from .camera import look_at_wxyz

        wxyz = look_at_wxyz(position, look_at, up)
        self.send(
            "ViewerCameraMessage",
            wxyz=[float(v) for v in wxyz],
            position=[float(v) for v in position],
            fov=float(fov),
            near=0.01,
            far=1000.0,
            image_height=int(height),
            image_width=int(width),
            look_at=[float(v) for v in look_at],
            up_direction=[float(v) for v in up],
        )

    def drag_start(self, name: str, owner: str = "") -> None:
        self.send("TransformControlsDragStartMessage", name=name, owner=owner)

    def drag_to(self, name: str, position, owner: str = "") -> None:
        self.send(
            "TransformControlsUpdateMessage",
            name=name,
            wxyz=[1.0, 0.0, 0.0, 0.0],
            position=[float(v) for v in position],
            owner=owner,
        )

    def drag_end(self, name: str, owner: str = "") -> None:
        self.send("TransformControlsDragEndMessage", name=name, owner=owner)

    def click(self, origin, direction) -> None:
        self.send(
            "ScenePointerMessage",
            event_type="click",
            ray_origin=[float(v) for v in origin],
            ray_direction=[float(v) for v in direction],
            screen_pos=[[0.5, 0.5]],
            modifier=None,
        )

    def gui_set(self, gui_handle, value) -> None:
        """Set a GUI input's value as a browser would (tests only: uses the handle's private uuid)."""
        self.send("GuiUpdateMessage", uuid=gui_handle._impl.uuid, updates={"value": value})

    def close(self) -> None:
        self._closed = True
        try:
            self.ws.close()
        except Exception:  # noqa: BLE001
            pass
        self._thread.join(2.0)


# ------------------------------------------------------------------------------------------- headless browser
def _find_chromium() -> str:
    """The Chromium binary: ``$PHYSSKIN_CHROMIUM``, else ``chromium`` (or ``chromium-browser``) on the PATH; the
    bare name ``chromium`` when none is found (callers check it exists with :func:`shutil.which`)."""
    import os
    import shutil

    env = os.environ.get("PHYSSKIN_CHROMIUM")
    if env:
        return env
    return shutil.which("chromium") or shutil.which("chromium-browser") or "chromium"


CHROMIUM = _find_chromium()


class HeadlessChromium:
    """Debian's headless Chromium driven over the DevTools protocol (screenshots of the live page).

    WebGL runs on SwiftShader (CPU), which is slow: use tiny scenes, small windows and generous timeouts
    (rendering.md section 5). Every wait is bounded; :meth:`close` kills the browser and removes its profile.
    """

    def __init__(self, url: str, width: int = 800, height: int = 600, timeout: float = 60.0, binary: str = CHROMIUM) -> None:
        import json
        import shutil
        import subprocess
        import tempfile
        import urllib.request
        from pathlib import Path

        from websockets.sync.client import connect

        self._shutil = shutil
        self.profile = tempfile.mkdtemp(prefix="physskin-chromium-")
        self.proc = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--use-angle=swiftshader",
                "--enable-unsafe-swiftshader",
                "--hide-scrollbars",
                "--remote-allow-origins=*",
                "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}",
                url,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            port_file = Path(self.profile) / "DevToolsActivePort"
            end = time.monotonic() + timeout
            while not port_file.exists() or not port_file.read_text().strip():
                if time.monotonic() > end or self.proc.poll() is not None:
                    raise RuntimeError("chromium did not start (no DevToolsActivePort)")
                time.sleep(0.1)
            port = int(port_file.read_text().split()[0])
            ws_url = None
            while ws_url is None:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                    pages = [p for p in json.loads(r.read()) if p.get("type") == "page"]
                if pages:
                    ws_url = pages[0]["webSocketDebuggerUrl"]
                elif time.monotonic() > end:
                    raise RuntimeError("chromium has no page target")
                else:
                    time.sleep(0.1)
            self.ws = connect(ws_url, max_size=None, open_timeout=timeout)
        except BaseException:
            self.close()
            raise
        self._id = 0
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def call(self, method: str, timeout: float = 60.0, **params) -> dict:
        """Send one DevTools command and wait (bounded) for its result."""
        import json

        self._id += 1
        my_id = self._id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"DevTools {method} timed out")
            msg = json.loads(self.ws.recv(timeout=left))
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"DevTools {method}: {msg['error']}")
                return msg.get("result", {})

    def screenshot(self, timeout: float = 60.0) -> np.ndarray:
        """The page as an (H, W, 3) uint8 array."""
        import base64
        import io

        import imageio.v2 as imageio

        data = self.call("Page.captureScreenshot", timeout=timeout, format="png")["data"]
        img = imageio.imread(io.BytesIO(base64.b64decode(data)))
        return np.asarray(img)[..., :3]

    def close(self) -> None:
        try:
            if getattr(self, "ws", None) is not None:
                self.ws.close()
        except Exception:  # noqa: BLE001
            pass
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except Exception:  # noqa: BLE001
                self.proc.kill()
                self.proc.wait(5)
        self._shutil.rmtree(self.profile, ignore_errors=True)


@dataclasses.dataclass
class FakeAnimationConfig:
    """Stand-in for ``physskin_gs.pipeline.AnimationConfig`` in fake pipeline modules (the fields the viewer reads).

    Units as ``AnimationConfig``: ``E`` Pa, ``nu`` dimensionless, ``density`` kg/m^3, ``dt`` s, ``gravity`` m/s^2,
    ``floor_height`` scene units along up (None: chosen by the pipeline), ``damping`` the Rayleigh coefficient c
    (dimensionless). ``pin``: None, ``"below:F"`` or ``"box:xmin,...,zmax"``.
    """

    E: float = 2e4
    nu: float = 0.45
    density: float = 100.0
    dt: float = 0.03
    gravity: float = 9.8
    floor: bool = True
    floor_height: Optional[float] = None
    damping: float = 0.02
    skinning: str = "pretrained"
    pin: Optional[str] = None
