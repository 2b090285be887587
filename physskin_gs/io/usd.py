"""OpenUSD export (and a reader for round trips) of Gaussian scenes as ``UsdVol.ParticleField3DGaussianSplat``.

``pxr`` (the ``usd-core`` wheel, OpenUSD >= 26.03) is an optional dependency, extra ``[usd]``. It is imported
inside the functions; without it every entry point raises :class:`~physskin_gs.errors.OptionError`.

Conventions (established against usd-core 26.11)
-----------------------------------------------
Sources: [S] the installed schema, ``pxr/pluginfo/usdVol/resources/usdVol/schema.usda`` (doc strings) and
``generatedSchema.usda``; [C] OpenUSD's reference converter
``extras/imaging/examples/hdParticleField/py3dgsPlyToUsd.py``; [R] OpenUSD's reference renderer
``extras/imaging/examples/hdParticleField/libGSRenderer/gsRenderer.cpp``; [T] checks run in this repository
(``tests/test_usd_export.py``).

Attributes of a ``ParticleField3DGaussianSplat`` prim (all from builtin applied API schemas) [S]:

=================================================  ===========  ==============================================
attribute                                          USD type     value written here (from GaussianScene)
=================================================  ===========  ==============================================
``positions``                                      point3f[]    ``means``; its length is the particle count
``orientations``                                   quatf[]      ``quats`` normalised (zero/non-finite -> identity)
``scales``                                         float3[]     ``exp(log_scales)``
``opacities``                                      float[]      ``sigmoid(opacity_logits)``
``radiance:sphericalHarmonicsCoefficients``        float3[]     ``scene.sh`` flattened, (N * (d+1)^2) float3
``radiance:sphericalHarmonicsDegree``              uniform int  d (schema fallback 3, so always authored)
``extent``                                         float3[]     [min, max] of ``positions -/+ 3 max(scales)``
=================================================  ===========  ==============================================

Half-precision twins (``positionsh``, ``orientationsh``, ``scalesh``, ``opacitiesh``,
``radiance:sphericalHarmonicsCoefficientsh``) exist; "consumers should prefer the float version" [S]. Only the
float versions are written; :func:`load_usd` falls back to the half ones when the float one is missing.

* **Scales** are linear standard deviations: "The scales here are linear scales, in line with scales provided
  elsewhere in USD, and not specified in log-format as is sometimes seen in PLY files" [S]; the unit kernel has
  standard deviation 1 ("the 3-sigma point is 3.0", ParticleFieldKernelGaussianEllipsoidAPI [S]); [C] writes
  ``exp(scale_i)``. Default when absent: unit scale.
* **Opacities** are post-sigmoid in [0, 1]: "not the transformed data sometimes seen in PLY files ... where the
  values need to be processed with a sigmoid activation function" [S]; [C] writes ``1 / (1 + exp(-v))``. Default
  when absent: 1 (fully opaque).
* **Orientations**: ``GfQuatf`` is (real, imaginary) in its constructor, ``GetReal()`` / ``GetImaginary()`` and in
  ``.usda`` text (``(1, 0, 0, 0)`` is the identity). The *numpy* layout of ``Vt.QuatfArray`` (``FromNumpy`` and
  ``numpy.asarray``) is **(i, j, k, real) = xyzw** [T: ``Gf.Quatf(1, 2, 3, 4)`` -> numpy ``[2, 3, 4, 1]``,
  ``test_vt_quatf_numpy_layout_is_xyzw``]. So 3DGS wxyz -> numpy ``q[:, [1, 2, 3, 0]]``; [C] maps PLY rot_0 to the
  real part. Quaternions are written normalised (the schema does not say whether renderers normalise; [C]
  normalises); :func:`load_usd` therefore returns unit quaternions (the original norm is lost).
* **Spherical harmonics**: per particle (d+1)^2 contiguous float3 (rgb) coefficients: "grouped in the array by
  particle, meaning each particle has N contiguous coefficients, Y(m,l) sorted first by order (m) and then
  within the order by index (l)" [S]. That wording swaps the usual names; read with [R] and [C] it is the 3DGS /
  INRIA order, band l = 0..d outer, m = -l..l inner ([R] evaluates ``C0*c0 - C1*y*c1 + C1*z*c2 - C1*x*c3 +
  C2_0*xy*c4 ...`` exactly as 3DGS does). Normalisation is the 3DGS one:
  coefficient 0 **is** 3DGS ``f_dc`` (no rescaling), ``rgb = clamp(0.5 + sum_k Y_k(dir) c_k, 0, 1)`` with
  ``Y_0 = C0 = 0.28209479``: [R] multiplies ``c0`` by ``SH_C0`` and adds ``V3f(0.5)`` before clamping; [C] copies
  ``f_dc`` verbatim into coefficient 0, reorders ``f_rest`` from channel-major to coefficient-major
  (coefficient j+1, channel k = ``f_rest[k * K + j]``) and, when only RGB is available, writes
  ``(rgb - 0.5) / C0``; the schema's default "DC signal of (0.5, 0.5, 0.5)" [S] is coefficient 0 = 0 under this
  convention. ``GaussianScene.sh`` (N, K+1, 3) is already this layout, so it is written as is. Degree 4 (K = 24)
  is written as degree 4 (the schema has no upper limit; [R] evaluates up to degree 3).
* **Extent** (Boundable, float3[2]) bounds the 3-sigma support: ``positions -/+ 3 * max(scales)`` per row, rows
  with a non-finite position or scale ignored ([C] uses the centres only, clamped to +-50000; nothing in
  UsdVol 26.11 computes it: ``ComputeExtentFromPlugins`` returns None for this prim type [T]). Time-sampled
  alongside the positions of the moving prim.
* **Stage metadata**: ``upAxis`` (``"Y"`` or ``"Z"``; OpenUSD allows no other),
  ``metersPerUnit`` (default 1.0 as [C]; unauthored it would fall back to 0.01 = centimetres), ``defaultPrim``
  ``Splats``; for sequences ``timeCodesPerSecond = framesPerSecond = fps``, ``startTimeCode = 1``,
  ``endTimeCode = last frame`` (set on close).
* **Up direction**: particle values are always written in scene space. With ``up=`` (a scene-space 3-vector,
  e.g. -Y for COLMAP-style scenes) the root ``/Splats`` gets one ``xformOp:orient`` (quatd) with the smallest
  rotation taking ``up`` onto the stage's +``upAxis``, so viewers show the scene upright. :func:`load_usd`
  returns values in the frame of that orientation (scene space for our files) and applies every other transform
  (a translation added in a DCC tool moves the Gaussians read back).

Prim layout written here
------------------------
``/Splats`` (Xform, default prim, optional up rotation) with children ``ParticleField3DGaussianSplat``:

* :func:`save_usd`: ``/Splats/Gaussians`` with every row in scene order.
* :class:`UsdSequenceWriter`: ``/Splats/Static`` (rows that never move, default values only) and
  ``/Splats/Moving`` (default values = the rest state; ``positions``, ``orientations``, ``scales``, ``extent``
  and, when ``sh`` and K > 0, the SH coefficients time-sampled at time code = frame index 1..F; ``opacities``
  and the SH degree written once). A prim with no rows is not written.

Each prim of a sequence carries the custom attribute ``uniform int[] physskin_gs:rowIndices``: the row of the
original scene of each particle, so :func:`load_usd` restores the original row order exactly (4 bytes per
Gaussian, written once). Every prim's customData holds the dictionary ``physskin_gs = {string role ("all",
"static" or "moving"), int totalRows}``.

Inversion in :func:`load_usd`: ``log_scales = log(max(scale, 1.18e-38))`` (float32 tiny: a zero scale reads
back as -87.3); ``opacity_logits = logit(clip(opacity, 1.18e-38, 1 - 2**-24))``, so logits above 16.64 read
back as 16.64 (their float32 opacity is exactly 1) and below -87.3 as -87.3. Activation and inversion run in
float64 and are stored as float32: round-trip error of a logit is about ``6e-8 / (p (1 - p))``.

Memory and speed (measured on a 2-core VM with usd-core 26.11, float32 random scenes)
------------------------------------------------------------------------------------
USD layers keep authored time samples in memory until they are saved. For crate output (``.usd``/``.usdc``) the
writer therefore saves the layer after the rest state and after every frame: saving a crate layer into the file
it was read from appends only the new values and drops them from memory (they are re-read lazily), so memory
does not grow with the frame count. Peak RSS growth of a whole export (including the caller's frame tensors):
100k moving x 10 / 90 frames without SH 108 / 112 MB; 200k moving x 30 frames with degree-3 SH 160 MB, where
saving once at the end grows by about 1.4 GB (all samples held). Crate file size: 40 bytes per moving Gaussian
per frame without SH (12 position + 16 orientation + 12 scale) plus 12 (d+1)^2 with SH (232 bytes at degree 3),
plus the rest state once (~60 + 12 (d+1)^2 bytes per Gaussian) and tens of kB of structure per frame.
Writing 100k moving Gaussians takes about 40-80 ms per frame without SH and 125-200 ms per frame with degree-3
SH (a third numpy conversion, a third ``Vt`` copies, a third the save; disk-dependent).

Text output (``.usda``) cannot be saved incrementally (every save rewrites the whole file), so it holds every
sample in memory until :meth:`UsdSequenceWriter.close`: about 290 bytes per moving Gaussian per frame at degree 3
(100k x 30 frames: +876 MB peak), 755 bytes per Gaussian per frame of text, and ~60 s to write and verify those
2.1 GB. Use it for small debugging exports.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import List, Optional

import numpy as np
import torch

from physskin_gs import interrupts
from physskin_gs.errors import OptionError, SceneFormatError
from physskin_gs.io._shared import check_output, log_scales64, logit64, positive_number, temp_file, unlink_quietly
from physskin_gs.scene import GaussianScene, normalize_quats

__all__ = ["save_usd", "load_usd", "UsdSequenceWriter", "require_pxr", "USD_EXTENSIONS", "ROW_INDEX_ATTR"]

#: Output extensions: crate (binary) for .usd/.usdc, text for .usda.
USD_EXTENSIONS = {".usd": "usdc", ".usdc": "usdc", ".usda": "usda"}
#: Custom attribute holding the original row index of each particle of a prim.
ROW_INDEX_ATTR = "physskin_gs:rowIndices"
ROLE_KEY = "physskin_gs:role"
TOTAL_KEY = "physskin_gs:totalRows"
ROOT = "/Splats"

_MISSING_PXR = ("OpenUSD export needs usd-core: pip install 'physskin_gs[usd]' (or pip install 'usd-core>=26.3'), "
                "then run the command again")
_SH_DEGREES = {1: 0, 4: 1, 9: 2, 16: 3, 25: 4}


# ----------------------------------------------------------------------------------------------- pxr access
def _pxr() -> SimpleNamespace:
    """The pxr modules used here; raises OptionError when usd-core is missing or predates the schema."""
    try:
        from pxr import Gf, Sdf, Tf, Usd, UsdGeom, UsdVol, Vt
    except ImportError as e:
        raise OptionError(_MISSING_PXR) from e
    if not hasattr(UsdVol, "ParticleField3DGaussianSplat"):
        raise OptionError("the installed usd-core has no UsdVol.ParticleField3DGaussianSplat (needs OpenUSD "
                          "26.03 or later): pip install -U 'physskin_gs[usd]'")
    return SimpleNamespace(Gf=Gf, Sdf=Sdf, Tf=Tf, Usd=Usd, UsdGeom=UsdGeom, UsdVol=UsdVol, Vt=Vt)


def require_pxr() -> None:
    """Check early (before any work) that OpenUSD export can run; raises OptionError naming the install command
    when usd-core is missing or too old."""
    _pxr()


# ------------------------------------------------------------------------------------- value conversion
def _np(t, dtype=np.float32) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu().numpy()
    return np.ascontiguousarray(np.asarray(t), dtype=dtype)


def _unit_quats_xyzw(quats_wxyz: np.ndarray) -> np.ndarray:
    """(M, 4) raw wxyz -> (M, 4) float32 unit quaternions in Vt.QuatfArray's numpy order (x, y, z, w); zero or
    non-finite quaternions become the identity (:func:`physskin_gs.scene.normalize_quats`, in float64)."""
    u = normalize_quats(torch.from_numpy(quats_wxyz.astype(np.float64))).numpy()
    return np.ascontiguousarray(u[:, [1, 2, 3, 0]], dtype=np.float32)


def _scales(log_scales: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.exp(log_scales.astype(np.float64)).astype(np.float32)


def _opacities(logits: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return (1.0 / (1.0 + np.exp(-logits.astype(np.float64)))).astype(np.float32)


def _extent(positions: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """(2, 3) float32 [min, max] of positions -/+ 3 max(scale) over the finite rows ((0, 0, 0) twice if none)."""
    r = 3.0 * scales.max(axis=1, initial=0.0).astype(np.float64) if scales.shape[0] else np.zeros(0)
    ok = np.isfinite(positions).all(axis=1) & np.isfinite(r)
    if not ok.any():
        return np.zeros((2, 3), np.float32)
    p, r = positions[ok].astype(np.float64), r[ok, None]
    return np.stack([(p - r).min(axis=0), (p + r).max(axis=0)]).astype(np.float32)


class _Rows:
    """USD-ready float32 arrays of M rows (activated values, numpy layouts of the Vt types). Inputs are raw
    3DGS arrays: means (M, 3), quats (M, 4) wxyz, log_scales (M, 3), optional logits (M,), optional SH
    dc (M, 3) + rest (M, K, 3)."""

    def __init__(self, means, quats, log_scales, logits=None, dc=None, rest=None):
        self.positions = np.ascontiguousarray(means, dtype=np.float32)
        self.orientations = _unit_quats_xyzw(quats)
        self.scales = _scales(log_scales)
        self.opacities = None if logits is None else _opacities(logits)
        self.extent = _extent(self.positions, self.scales)
        self.sh = None
        if dc is not None:
            parts = [dc[:, None, :]] + ([rest] if rest is not None and rest.shape[1] else [])
            self.sh = np.ascontiguousarray(np.concatenate(parts, axis=1).reshape(-1, 3), dtype=np.float32)

    @classmethod
    def of(cls, scene: GaussianScene, index: Optional[np.ndarray], with_sh: bool = True) -> "_Rows":
        """Rows ``index`` (None: all) of ``scene``."""
        def take(t):
            a = _np(t)
            return a if index is None else np.ascontiguousarray(a[index])

        k = scene.sh_rest.shape[1]
        return cls(take(scene.means), take(scene.quats), take(scene.log_scales), take(scene.opacity_logits),
                   take(scene.sh_dc) if with_sh else None, take(scene.sh_rest) if with_sh and k else None)


# ------------------------------------------------------------------------------------------ path checks
def _check_output(path, source: Optional[str]) -> tuple:
    """(absolute path, 'usdc' | 'usda', output folder); OptionError for a bad extension, a directory, a missing
    folder or the scene's own input file."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in USD_EXTENSIONS:
        raise OptionError(f"{path}: OpenUSD output needs a .usd, .usdc (binary crate) or .usda (text) "
                          f"extension, got {ext or 'none'!r}")
    path, out_dir = check_output(path, source)
    return os.path.abspath(path), USD_EXTENSIONS[ext], out_dir


def _temp_path(path: str, fmt: str, out_dir: str) -> str:
    """A new empty ``.NAME.XXXX.tmp.<fmt>`` in ``out_dir`` with the usual file permissions (umask read once at
    import, never changed here: writers run in background threads)."""
    fd, tmp = temp_file(path, out_dir, ".tmp." + fmt)
    os.close(fd)
    return tmp


def _check_up_axis(up_axis, up=None) -> str:
    """``"Y"`` or ``"Z"``. ``"auto"``: ``"Z"`` when the scene's ``up`` is +z (the stage then needs no rotation),
    else ``"Y"``. OptionError for anything else."""
    name = str(up_axis).upper()
    if name == "AUTO":
        if up is None:
            return "Y"
        a = np.asarray(up.detach().cpu().numpy() if isinstance(up, torch.Tensor) else up, dtype=np.float64).ravel()
        ok = a.shape == (3,) and np.isfinite(a).all() and np.linalg.norm(a) > 0
        return "Z" if ok and a[2] / np.linalg.norm(a) > 1.0 - 1e-9 else "Y"
    if name not in ("Y", "Z"):
        raise OptionError(f"up_axis must be 'Y', 'Z' (the only axes OpenUSD allows) or 'auto', got {up_axis!r}")
    return name


def _check_mpu(meters_per_unit) -> float:
    """1.0 for None, else ``meters_per_unit`` as a positive finite float (OptionError otherwise)."""
    return 1.0 if meters_per_unit is None else positive_number(meters_per_unit, "meters_per_unit")


# ---------------------------------------------------------------------------------------- stage writing
def _up_rotation(up, axis: str) -> Optional[np.ndarray]:
    """(w, x, y, z) float64 unit quaternion of the smallest rotation taking the scene direction ``up`` onto the
    stage axis (+Y or +Z); None when ``up`` is None or already that axis. OptionError for a bad vector."""
    if up is None:
        return None
    try:
        a = np.asarray(up.detach().cpu().numpy() if isinstance(up, torch.Tensor) else up, dtype=np.float64)
    except (TypeError, ValueError):
        a = np.full(1, np.nan)
    if a.shape != (3,) or not np.isfinite(a).all() or np.linalg.norm(a) < 1e-12:
        raise OptionError(f"up must be a non-zero 3-vector, got {up!r}")
    a = a / np.linalg.norm(a)
    b = np.array([0.0, 1.0, 0.0]) if axis == "Y" else np.array([0.0, 0.0, 1.0])
    d = float(a @ b)
    if d > 1.0 - 1e-12:
        return None
    if d < -1.0 + 1e-9:  # opposite: half turn about +X (perpendicular to both stage axes)
        return np.array([0.0, 1.0, 0.0, 0.0])
    q = np.concatenate([[1.0 + d], np.cross(a, b)])
    return q / np.linalg.norm(q)


def _usd_error(px, exc: BaseException, path: str) -> OSError:
    """An OSError for a USD error while writing ``path``: "no space left on the device" when its folder is full
    (USD reports that only on its own diagnostic output, with an empty exception), else USD's first message."""
    import errno
    import shutil

    try:
        full = shutil.disk_usage(os.path.dirname(os.path.abspath(path)) or ".").free < 1 << 20
    except OSError:
        full = False
    if full:
        return OSError(errno.ENOSPC, "no space left on the device")
    text = " ".join(str(a) for a in getattr(exc, "args", ()) if str(a).strip()) or str(exc)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return OSError(errno.EIO, f"USD could not write the file{': ' + first if first else ''}")


def _save(px, stage, path: str) -> None:
    """``stage.Save()``, a USD error raised as a clean OSError (:func:`_usd_error`)."""
    try:
        stage.Save()
    except px.Tf.ErrorException as exc:
        raise _usd_error(px, exc, path) from None


def _new_stage(px, tmp: str, up: str, mpu: float, note: str, rotation: Optional[np.ndarray] = None):
    try:
        stage = px.Usd.Stage.CreateNew(tmp)
    except px.Tf.ErrorException as exc:
        raise _usd_error(px, exc, tmp) from None
    px.UsdGeom.SetStageUpAxis(stage, px.UsdGeom.Tokens.y if up == "Y" else px.UsdGeom.Tokens.z)
    px.UsdGeom.SetStageMetersPerUnit(stage, mpu)
    root = px.UsdGeom.Xform.Define(stage, ROOT)
    if rotation is not None:
        op = root.AddOrientOp(px.UsdGeom.XformOp.PrecisionDouble)
        op.Set(px.Gf.Quatd(float(rotation[0]), px.Gf.Vec3d(*(float(v) for v in rotation[1:]))))
    stage.SetDefaultPrim(root.GetPrim())
    stage.GetRootLayer().documentation = note
    return stage


def _define_prim(px, stage, name: str, rows: _Rows, sh_degree: int, role: str, total: int,
                 row_index: Optional[np.ndarray]):
    """Define /Splats/<name> with ``rows`` as default (non-time-sampled) values; returns the schema object."""
    Vt = px.Vt
    gs = px.UsdVol.ParticleField3DGaussianSplat.Define(stage, f"{ROOT}/{name}")
    gs.CreatePositionsAttr(Vt.Vec3fArray.FromNumpy(rows.positions))
    gs.CreateOrientationsAttr(Vt.QuatfArray.FromNumpy(rows.orientations))
    gs.CreateScalesAttr(Vt.Vec3fArray.FromNumpy(rows.scales))
    gs.CreateOpacitiesAttr(Vt.FloatArray.FromNumpy(rows.opacities))
    gs.CreateRadianceSphericalHarmonicsDegreeAttr(int(sh_degree))
    gs.CreateRadianceSphericalHarmonicsCoefficientsAttr(Vt.Vec3fArray.FromNumpy(rows.sh))
    if rows.positions.shape[0]:
        gs.CreateExtentAttr(Vt.Vec3fArray.FromNumpy(rows.extent))
    prim = gs.GetPrim()
    prim.SetCustomDataByKey(ROLE_KEY, role)
    prim.SetCustomDataByKey(TOTAL_KEY, int(total))
    if row_index is not None:
        attr = prim.CreateAttribute(ROW_INDEX_ATTR, px.Sdf.ValueTypeNames.IntArray, custom=True,
                                    variability=px.Sdf.VariabilityUniform)
        attr.Set(Vt.IntArray.FromNumpy(np.ascontiguousarray(row_index, dtype=np.int32)))
        attr.SetDocumentation("physskin_gs: row of the original scene of each particle of this prim")
    return gs


def _verify(px, path: str, expect: dict, num_samples: int = 0) -> None:
    """Open ``path`` as a fresh (anonymous, uncached) layer and check every expected prim and its row count
    (and, for a moving prim, the number of position time samples); OSError when anything is off."""
    try:
        layer = px.Sdf.Layer.OpenAsAnonymous(path)
        stage = px.Usd.Stage.Open(layer) if layer is not None else None
    except px.Tf.ErrorException as e:
        raise OSError(f"{path}: the written OpenUSD file does not open: {e}") from e
    if stage is None:
        raise OSError(f"{path}: the written OpenUSD file does not open")
    for name, n in expect.items():
        gs = px.UsdVol.ParticleField3DGaussianSplat.Get(stage, f"{ROOT}/{name}")
        pos = gs.GetPositionsAttr().Get() if gs else None
        if pos is None or len(pos) != n:
            raise OSError(f"{path}: verification failed: {ROOT}/{name} should hold {n} particles")
        if name == "Moving" and gs.GetPositionsAttr().GetNumTimeSamples() != num_samples:
            raise OSError(f"{path}: verification failed: {ROOT}/{name} should hold {num_samples} time samples")


def _sync_registry(px, path: str) -> None:
    """Reload a layer of ``path`` this process already has open, so later opens see the new file."""
    layer = px.Sdf.Layer.Find(path)
    if layer is not None:
        layer.Reload(True)


def save_usd(scene: GaussianScene, path, *, up_axis: str = "auto", meters_per_unit: Optional[float] = None,
             up=None) -> str:
    """Write ``scene`` as one ``ParticleField3DGaussianSplat`` prim ``/Splats/Gaussians`` (static, no time samples).

    Values are converted as the module docstring says: positions = means (scene units), orientations = unit
    quaternions, scales = exp(log_scales) (linear standard deviations), opacities = sigmoid(logits), SH
    coefficients (N * (K+1) float3, 3DGS order and normalisation), extent = 3-sigma bounds.

    Args:
        scene: the scene (N rows, any SH degree 0-4; ``scene.extra`` is not written).
        path: output file; ``.usd`` / ``.usdc`` -> binary crate, ``.usda`` -> text. Its folder must exist.
        up_axis: stage ``upAxis`` metadata, ``"Y"``, ``"Z"`` or ``"auto"`` (default: ``"Z"`` when ``up`` is +z,
            else ``"Y"``).
        meters_per_unit: stage ``metersPerUnit``; None writes 1.0.
        up: optional (3,) scene-space up direction (e.g. from the scene analysis). When it is not already the
            stage axis, ``/Splats`` gets an ``xformOp:orient`` (quatd) with the smallest rotation taking ``up``
            onto +``up_axis`` (a half turn about +X when opposite). The particle values stay in scene space.

    Returns the absolute output path. The file is written to a temporary file in the same folder, verified
    (re-opened with ``Usd.Stage.Open``, particle count checked) and renamed into place.

    Raises:
        OptionError: usd-core missing; extension not .usd/.usdc/.usda; ``path`` is ``scene.source``, a directory
            or in a missing folder; bad ``up_axis`` / ``meters_per_unit`` / ``up``.
        OSError: the written file does not verify (the destination is left untouched).
    """
    px = _pxr()
    axis, mpu = _check_up_axis(up_axis, up), _check_mpu(meters_per_unit)
    rotation = _up_rotation(up, axis)
    path, fmt, out_dir = _check_output(path, scene.source)
    n = scene.num_gaussians
    tmp = _temp_path(path, fmt, out_dir)
    try:
        stage = _new_stage(px, tmp, axis, mpu, f"3D Gaussian splats written by physskin_gs ({n} Gaussians)",
                           rotation)
        _define_prim(px, stage, "Gaussians", _Rows.of(scene, None), scene.sh_degree, "all", n, None)
        _save(px, stage, tmp)
        del stage
        _verify(px, tmp, {"Gaussians": n})
        os.replace(tmp, path)
        interrupts.note_written(path)
    except BaseException:
        unlink_quietly(tmp)
        raise
    _sync_registry(px, path)
    return path


class UsdSequenceWriter:
    """Write an animation as time-sampled ``ParticleField3DGaussianSplat`` prims, frame by frame.

    Rows with ``moving[i] == False`` go once into ``/Splats/Static`` (values of ``rest_scene``, no time
    samples); the moving rows go into ``/Splats/Moving`` whose default values are the rest state and whose
    positions, orientations, scales, extent (and SH coefficients when ``sh`` and K > 0) get one time sample per
    :meth:`write_frame` at time code = frame. Opacities and the SH degree are written once; with ``sh=False`` or
    K = 0 the SH coefficients of the moving rows stay at their rest values. Both prims record the original row
    indices (``physskin_gs:rowIndices``) so :func:`load_usd` reassembles the original row order.

    For crate output (``.usd``/``.usdc``) the layer is saved after every frame, so memory stays bounded
    (module docstring); ``.usda`` keeps every sample in memory until :meth:`close`. The file is built under a
    temporary name in the output folder and renamed into place by :meth:`close`; :meth:`abort` (or leaving a
    ``with`` block by an exception) deletes it. Calls must not overlap (one thread at a time; a writer
    created in one thread may be fed by another).

    Args:
        path: output file (.usd / .usdc / .usda); its folder must exist; never ``rest_scene.source``.
        rest_scene: the rest state (N rows). Its static rows are what every frame must show unchanged: pass the
            scene the frames are derived from, after any sanitising the frames get.
        moving: (N,) bool (torch or numpy), True for the rows that move.
        fps: frames per second (> 0), written as ``timeCodesPerSecond`` and ``framesPerSecond``.
        up_axis: stage ``upAxis``, ``"Y"``, ``"Z"`` or ``"auto"`` (default; as in :func:`save_usd`).
        sh: time-sample the SH coefficients of the moving rows (rotated SH); needs K > 0 to have an effect.
        meters_per_unit: stage ``metersPerUnit``; None writes 1.0.
        up: optional (3,) scene-space up direction: root rotation onto +``up_axis`` as in :func:`save_usd`.

    Frames come either as whole scenes (:meth:`write_frame`) or as the moving rows only (:meth:`write_rows`).

    Raises:
        OptionError: usd-core missing; bad extension/path (as :func:`save_usd`); ``moving`` not an (N,) bool
            mask; ``fps`` not a positive number; bad ``up_axis`` / ``meters_per_unit`` / ``up``.
    """

    def __init__(self, path, rest_scene: GaussianScene, moving, *, fps: float, up_axis: str = "auto",
                 sh: bool = True, meters_per_unit: Optional[float] = None, up=None):
        px = _pxr()
        self._px = px
        axis, mpu = _check_up_axis(up_axis, up), _check_mpu(meters_per_unit)
        rotation = _up_rotation(up, axis)
        fps_f = positive_number(fps, "fps")
        n = rest_scene.num_gaussians
        mask = moving.detach().cpu().numpy() if isinstance(moving, torch.Tensor) else np.asarray(moving)
        if mask.dtype != np.bool_ or mask.shape != (n,):
            raise OptionError(f"moving must be an ({n},) bool mask, got {mask.dtype} {tuple(mask.shape)}")
        self.path, self._fmt, out_dir = _check_output(path, rest_scene.source)
        self.fps = fps_f
        self.num_gaussians = n
        self.sh_degree = rest_scene.sh_degree
        self._k = int(rest_scene.sh_rest.shape[1])
        self._sh_animated = bool(sh) and self._k > 0
        self._static_idx = np.flatnonzero(~mask)
        self._moving_idx = np.flatnonzero(mask)
        self._static_t = torch.from_numpy(self._static_idx)
        self._rest_static_means = _np(rest_scene.means)[self._static_idx]
        self._rest_logits = _np(rest_scene.opacity_logits)
        self._rest_moving_dc = _np(rest_scene.sh_dc)[self._moving_idx]
        self._incremental = self._fmt == "usdc"
        self._frames: List[int] = []
        self._state = "open"  # -> "closed" | "aborted"
        self._tmp = _temp_path(self.path, self._fmt, out_dir)
        try:
            self._stage = _new_stage(px, self._tmp, axis, mpu,
                                     f"3D Gaussian splat animation written by physskin_gs ({n} Gaussians, "
                                     f"{self._moving_idx.size} moving)", rotation)
            self._stage.SetTimeCodesPerSecond(fps_f)
            self._stage.SetFramesPerSecond(fps_f)
            self._expect = {}
            if self._static_idx.size:
                _define_prim(px, self._stage, "Static", _Rows.of(rest_scene, self._static_idx), self.sh_degree,
                             "static", n, self._static_idx)
                self._expect["Static"] = int(self._static_idx.size)
            self._moving = self._attrs = None
            if self._moving_idx.size:
                self._moving = _define_prim(px, self._stage, "Moving", _Rows.of(rest_scene, self._moving_idx),
                                            self.sh_degree, "moving", n, self._moving_idx)
                self._expect["Moving"] = int(self._moving_idx.size)
                m = self._moving
                self._attrs = (m.GetPositionsAttr(), m.GetOrientationsAttr(), m.GetScalesAttr(),
                               m.GetExtentAttr(), m.GetRadianceSphericalHarmonicsCoefficientsAttr())
            _save(self._px, self._stage, self._tmp)
        except BaseException:
            self._stage = None
            unlink_quietly(self._tmp)
            raise

    # ------------------------------------------------------------------------------------------ frames
    @property
    def frames_written(self) -> int:
        """Number of frames written so far."""
        return len(self._frames)

    def write_frame(self, frame: int, scene: GaussianScene) -> None:
        """Add time samples at time code ``frame`` for the moving rows of ``scene``.

        Args:
            frame: int >= 1, larger than the previous frame (frames 1..F are the usual sequence).
            scene: the frame's state, same N and row order as ``rest_scene`` (and same K when SH is animated).
                Its static rows must equal the rest state (checked on the means) and its opacities the rest
                opacities (checked: they are written once).

        Raises:
            OptionError: writer closed; bad or non-increasing ``frame``; N or K mismatch; a static row moved
                or an opacity changed (names the first offending row).
        """
        frame = self._check_frame(frame)
        if scene.num_gaussians != self.num_gaussians:
            raise OptionError(f"frame {frame} has {scene.num_gaussians} Gaussians, the rest scene "
                              f"{self.num_gaussians}")
        if self._sh_animated and scene.sh_rest.shape[1] != self._k:
            raise OptionError(f"frame {frame} has {scene.sh_rest.shape[1]} higher SH coefficients per channel, "
                              f"the rest scene {self._k}")
        if self._static_idx.size:
            now = _np(scene.means[self._static_t])
            same = (now == self._rest_static_means) | (np.isnan(now) & np.isnan(self._rest_static_means))
            bad = np.flatnonzero(~same.all(axis=1))
            if bad.size:
                row = int(self._static_idx[bad[0]])
                raise OptionError(f"frame {frame}: {bad.size} rows marked static moved (first: row {row}); "
                                  "mark them moving, or pass the rest scene the frames are derived from")
        logits = _np(scene.opacity_logits)
        same = (logits == self._rest_logits) | (np.isnan(logits) & np.isnan(self._rest_logits))
        if not same.all():
            row = int(np.flatnonzero(~same)[0])
            raise OptionError(f"frame {frame}: opacity of row {row} differs from the rest scene; opacities are "
                              "written once and cannot be animated")
        if self._moving is not None:
            index = None if self._moving_idx.size == self.num_gaussians else self._moving_idx

            def take(t):
                a = _np(t)
                return a if index is None else np.ascontiguousarray(a[index])

            sh = self._sh_animated
            self._write_moving(frame, _Rows(take(scene.means), take(scene.quats), take(scene.log_scales),
                                            dc=take(scene.sh_dc) if sh else None,
                                            rest=take(scene.sh_rest) if sh else None))
        self._frames.append(frame)

    def write_rows(self, frame: int, rows) -> None:
        """Add time samples at time code ``frame`` from the moving rows only (no checks of the static rows).

        Args:
            frame: int >= 1, larger than the previous frame.
            rows: mapping with ``means`` (M, 3), ``quats`` (M, 4) wxyz raw, ``log_scales`` (M, 3) and, when SH
                is animated, ``sh_rest`` (M, K, 3) (torch or numpy), M = number of moving rows, in ascending row
                order (``torch.nonzero(moving)``). The DC colour and the opacities are the rest values.

        Raises:
            OptionError: writer closed; bad or non-increasing ``frame``; a missing key or a wrong shape.
        """
        frame = self._check_frame(frame)
        m = int(self._moving_idx.size)
        need = {"means": (m, 3), "quats": (m, 4), "log_scales": (m, 3)}
        if self._sh_animated:
            need["sh_rest"] = (m, self._k, 3)
        arrays = {}
        for key, shape in need.items():
            if key not in rows:
                raise OptionError(f"frame {frame}: rows need {key!r} {shape}")
            a = _np(rows[key])
            if a.shape != shape:
                raise OptionError(f"frame {frame}: rows[{key!r}] has shape {a.shape}, expected {shape}")
            arrays[key] = a
        if self._moving is not None:
            self._write_moving(frame, _Rows(arrays["means"], arrays["quats"], arrays["log_scales"],
                                            dc=self._rest_moving_dc if self._sh_animated else None,
                                            rest=arrays.get("sh_rest")))
        self._frames.append(frame)

    def _check_frame(self, frame) -> int:
        if self._state != "open":
            raise OptionError(f"UsdSequenceWriter is {self._state}")
        if isinstance(frame, bool) or not isinstance(frame, (int, np.integer)) or frame < 1:
            raise OptionError(f"frame must be an int >= 1, got {frame!r}")
        frame = int(frame)
        if self._frames and frame <= self._frames[-1]:
            raise OptionError(f"frames must increase: frame {frame} after frame {self._frames[-1]}")
        return frame

    def _write_moving(self, frame: int, rows: _Rows) -> None:
        Vt = self._px.Vt
        pos, ori, sca, ext, shc = self._attrs
        t = float(frame)
        pos.Set(Vt.Vec3fArray.FromNumpy(rows.positions), t)
        ori.Set(Vt.QuatfArray.FromNumpy(rows.orientations), t)
        sca.Set(Vt.Vec3fArray.FromNumpy(rows.scales), t)
        ext.Set(Vt.Vec3fArray.FromNumpy(rows.extent), t)
        if rows.sh is not None:
            shc.Set(Vt.Vec3fArray.FromNumpy(rows.sh), t)
        if self._incremental:
            _save(self._px, self._stage, self._tmp)  # crate appends the new samples, drops them from memory

    # ------------------------------------------------------------------------------------------ finish
    def close(self) -> str:
        """Set start/end time codes (1 and the last frame), save, verify and move the file into place.

        Returns the absolute output path (again on repeated calls).

        Raises:
            OptionError: the writer was aborted.
            OSError: the file does not verify (the temporary file is deleted, the destination left untouched).
        """
        if self._state == "closed":
            return self.path
        if self._state != "open":
            raise OptionError(f"UsdSequenceWriter is {self._state}")
        px = self._px
        self._state = "failed"
        try:
            if self._frames:
                self._stage.SetStartTimeCode(1.0)
                self._stage.SetEndTimeCode(float(self._frames[-1]))
            _save(self._px, self._stage, self._tmp)
            self._stage = self._moving = self._attrs = None
            _verify(px, self._tmp, self._expect, len(self._frames))
            os.replace(self._tmp, self.path)
            interrupts.note_written(self.path)
        except BaseException:
            self._stage = None
            unlink_quietly(self._tmp)
            raise
        self._state = "closed"
        _sync_registry(px, self.path)
        return self.path

    def abort(self) -> None:
        """Discard everything written so far (deletes the temporary file; the destination is untouched)."""
        if self._state == "open":
            self._state = "aborted"
            self._stage = self._moving = self._attrs = None
            unlink_quietly(self._tmp)

    def __enter__(self) -> "UsdSequenceWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


# ------------------------------------------------------------------------------------------------ reading
def _get(attr, time):
    """Attribute value at ``time`` (a Usd.TimeCode); at the default time an attribute with only time samples
    gives its earliest sample. None when unauthored."""
    if not attr or not attr.HasAuthoredValue():
        return None
    v = attr.Get(time)
    if v is None and time.IsDefault() and attr.GetNumTimeSamples():
        v = attr.Get(attr.GetTimeSamples()[0])
    return v


def _array(gs, names, time, width: int, n: Optional[int]) -> Optional[np.ndarray]:
    """First authored attribute of ``names`` as float32 (m, width), truncated to n rows (n None: all); None when
    unauthored or shorter than n (the schema's "ignored" rule)."""
    prim = gs.GetPrim()
    for name in names:
        v = _get(prim.GetAttribute(name), time)
        if v is None:
            continue
        a = np.array(v, dtype=np.float32).reshape(-1, width) if len(v) else np.zeros((0, width), np.float32)
        if n is None:
            return a
        return a[:n] if a.shape[0] >= n else None
    return None


def _read_prim(px, gs, time, path: str) -> dict:
    p = _array(gs, ("positions", "positionsh"), time, 3, None)
    if p is None:
        p = np.zeros((0, 3), np.float32)
    n = p.shape[0]
    q = _array(gs, ("orientations", "orientationsh"), time, 4, n)
    quats = np.tile(np.array([1, 0, 0, 0], np.float32), (n, 1)) if q is None else q[:, [3, 0, 1, 2]]
    s = _array(gs, ("scales", "scalesh"), time, 3, n)
    log_scales = np.zeros((n, 3), np.float32) if s is None else log_scales64(s).astype(np.float32)
    o = _array(gs, ("opacities", "opacitiesh"), time, 1, n)
    o = np.ones(n, np.float64) if o is None else o[:, 0].astype(np.float64)
    logits = logit64(o).astype(np.float32)  # clipped to [float32 tiny, 1 - 2**-24]; NaN stays NaN
    deg_attr = gs.GetRadianceSphericalHarmonicsDegreeAttr()
    degree = int(deg_attr.Get()) if deg_attr and deg_attr.Get() is not None else 3
    if degree < 0:
        raise SceneFormatError(f"{path}: {gs.GetPath()} has a negative SH degree {degree}")
    per = (degree + 1) ** 2
    sh = _array(gs, ("radiance:sphericalHarmonicsCoefficients", "radiance:sphericalHarmonicsCoefficientsh"),
                time, 3, n * per)
    if sh is None:  # schema: use a DC signal of (0.5, 0.5, 0.5) with degree 0
        sh, per = np.zeros((n, 1, 3), np.float32), 1
    else:
        sh = sh.reshape(n, per, 3)
    idx = None
    ia = gs.GetPrim().GetAttribute(ROW_INDEX_ATTR)
    if ia and ia.HasAuthoredValue():
        idx = np.array(ia.Get(), dtype=np.int64)
        if idx.shape[0] != n:
            raise SceneFormatError(f"{path}: {gs.GetPath()} has {idx.shape[0]} row indices for {n} particles")
    return dict(means=p, quats=quats, log_scales=log_scales, logits=logits, sh=sh, idx=idx)


def _root_orient(px, stage, time) -> np.ndarray:
    """(4, 4) row-vector matrix of the default prim's ``xformOp:orient`` (the up rotation our writers put on
    ``/Splats``), the identity when it has none: :func:`load_usd` returns values in the frame that op turns
    upright, so our own files read back exactly, and any other transform of the stage (a translation a user
    added in a DCC tool, a foreign stage's ``/World`` transform) is applied."""
    prim = stage.GetDefaultPrim()
    if prim and prim.IsA(px.UsdGeom.Xformable):
        for op in px.UsdGeom.Xformable(prim).GetOrderedXformOps():
            if op.GetOpType() == px.UsdGeom.XformOp.TypeOrient and op.GetName() == "xformOp:orient":
                return np.array(op.GetOpTransform(time), dtype=np.float64)
    return np.eye(4)


def _placed(px, prim, part: dict, frame: np.ndarray, time, path: str) -> dict:
    """``part`` (:func:`_read_prim`) moved by the prim's local-to-world transform except ``frame``
    (:func:`_root_orient`): nothing for our own exports (their only transform is that orientation), else the
    Gaussians follow the transform (:func:`physskin_gs.io.gltf.bake_affine`; a mirroring or singular transform
    raises SceneFormatError)."""
    M = np.array(px.UsdGeom.Xformable(prim).ComputeLocalToWorldTransform(time), dtype=np.float64)  # row vectors
    D = M @ np.linalg.inv(frame)  # world = local @ M = (local @ D) @ frame
    if np.allclose(D, np.eye(4), rtol=0.0, atol=1e-12 * max(1.0, float(np.abs(D).max()))) or not part["means"].size:
        return part
    from physskin_gs.io.gltf import bake_affine

    sh = part["sh"].astype(np.float64)
    means, quats, scales, sh_rest = bake_affine(part["means"], part["quats"], np.exp(part["log_scales"]),
                                                sh[:, 0], sh[:, 1:], D.T, path)  # (column vectors: D^T)
    out = dict(part, means=means.astype(np.float32), quats=quats.astype(np.float32),
               log_scales=log_scales64(scales).astype(np.float32))
    out["sh"] = np.concatenate([part["sh"][:, :1], sh_rest.astype(np.float32)], axis=1)
    return out


def _stage_up_local(px, stage, frame: np.ndarray) -> Optional[tuple]:
    """The stage's authored up axis (``upAxis`` metadata: +Y or +Z) in the frame :func:`load_usd` returns (the
    inverse of ``frame``, :func:`_root_orient`, applied to it: our exports put a -y scene on a Y-up stage under
    one orientation on /Splats), as a unit 3-tuple; None when the stage authors no up axis or the transform is
    singular."""
    if not stage.HasAuthoredMetadata("upAxis"):
        return None
    world = np.array([0.0, 1.0, 0.0]) if px.UsdGeom.GetStageUpAxis(stage) == px.UsdGeom.Tokens.y else \
        np.array([0.0, 0.0, 1.0])
    M = np.asarray(frame, dtype=np.float64)[:3, :3]
    try:
        v = np.linalg.solve(M.T, world)  # USD matrices act on row vectors: world = local @ M
    except np.linalg.LinAlgError:
        return None
    n = float(np.linalg.norm(v))
    if not (np.isfinite(n) and n > 0):
        return None
    v = v / n
    v[np.abs(v) < 1e-9] = 0.0  # a half turn's cos(pi) residue
    return tuple(float(c) for c in v)


def _open_stage(px, path) -> tuple:
    """(absolute path, opened Usd.Stage) of ``path``. Raises FileNotFoundError, SceneFormatError (not a readable
    OpenUSD file)."""
    path = os.path.abspath(os.fspath(path))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    try:
        stage = px.Usd.Stage.Open(path)
    except px.Tf.ErrorException as e:
        raise SceneFormatError(f"{path}: not a readable OpenUSD file ({str(e).strip().splitlines()[-1]})") from e
    if stage is None:
        raise SceneFormatError(f"{path}: not a readable OpenUSD file")
    return path, stage


def usd_meters_per_unit(path) -> float:
    """The stage ``metersPerUnit`` of the USD file ``path`` (OpenUSD's rule: 0.01, centimetres, when the stage
    authors none). The Gaussians :func:`load_usd` reads are in the stage's units. Raises OptionError (usd-core
    missing), FileNotFoundError, SceneFormatError (not a readable OpenUSD file)."""
    px = _pxr()
    _, stage = _open_stage(px, path)
    return float(px.UsdGeom.GetStageMetersPerUnit(stage))


def usd_frame_range(path) -> Optional[tuple]:
    """``(first, last)`` time codes (floats) at which the ``ParticleField3DGaussianSplat`` prims of the USD file
    ``path`` hold position samples (an animation: frames 1..F of an exported sequence), or None when no prim is
    time sampled (a single scene). Raises OptionError (usd-core missing), FileNotFoundError, SceneFormatError (not
    a readable OpenUSD file)."""
    px = _pxr()
    path, stage = _open_stage(px, path)
    times: list = []
    for p in stage.Traverse():
        if p.IsA(px.UsdVol.ParticleField3DGaussianSplat):
            times += list(px.UsdVol.ParticleField3DGaussianSplat(p).GetPositionsAttr().GetTimeSamples())
    return (float(min(times)), float(max(times))) if times else None


def load_usd(path, time: Optional[float] = None) -> GaussianScene:
    """Read every ``ParticleField3DGaussianSplat`` prim of a USD file into one GaussianScene (raw 3DGS values).

    Prims are read in stage traversal order (the writer's order: Static, then Moving). When the prims carry
    ``physskin_gs:rowIndices`` (sequences written by :class:`UsdSequenceWriter`) the rows are put back in the
    original order; otherwise they are concatenated. Values are returned in the frame of the default prim's
    ``xformOp:orient`` (the up rotation our writers author on ``/Splats``): every other transform on the way to
    the world (a translation or scale added in a DCC tool, a foreign stage's ``/World`` transform) is applied to
    the Gaussians (means, covariances, SH), so our own files read back exactly and an edited one reads back where
    the stage shows it.
    Missing or too-short per-particle attributes take the schema defaults (identity rotation, unit scale,
    opacity 1, SH DC grey); prims with different SH degrees are zero-padded to the highest.

    Args:
        path: a .usd / .usdc / .usda file (any layer format OpenUSD can open).
        time: time code to read (a frame index of a sequence); None reads the default values (the rest state of
            a sequence; for an attribute with only time samples, its earliest sample). Times outside the
            sampled range are held at the first/last sample (USD rules).

    Returns:
        GaussianScene with float32 tensors: means, unit wxyz quats, log_scales = log(max(scale, 1.18e-38)),
        opacity_logits = logit(clip(opacity, 1.18e-38, 1 - 2**-24)) (saturates at +16.64 / -87.3), sh_dc,
        sh_rest (N, K, 3); ``source`` = absolute path, ``format`` = ``"openusd"``; ``up_hint`` the stage's
        authored up axis in that local frame (None when the stage authors none).

    Raises:
        OptionError: usd-core missing.
        FileNotFoundError: missing file.
        SceneFormatError: not an OpenUSD file, no ParticleField3DGaussianSplat prim, inconsistent row indices.
    """
    px = _pxr()
    path, stage = _open_stage(px, path)
    tc = px.Usd.TimeCode.Default() if time is None else px.Usd.TimeCode(float(time))
    frame = _root_orient(px, stage, tc)  # [4, 4] the frame the values are returned in (module docstring)
    parts = [_placed(px, p, _read_prim(px, px.UsdVol.ParticleField3DGaussianSplat(p), tc, path), frame, tc, path)
             for p in stage.Traverse() if p.IsA(px.UsdVol.ParticleField3DGaussianSplat)]
    if not parts:
        raise SceneFormatError(f"{path}: no ParticleField3DGaussianSplat prim in this OpenUSD file")
    per = max(p["sh"].shape[1] for p in parts)
    if per not in _SH_DEGREES:
        raise SceneFormatError(f"{path}: SH degree {round(per ** 0.5) - 1} is not supported (at most 4)")
    for p in parts:
        if p["sh"].shape[1] < per:
            pad = np.zeros((p["sh"].shape[0], per - p["sh"].shape[1], 3), np.float32)
            p["sh"] = np.concatenate([p["sh"], pad], axis=1)
    cat = {k: np.concatenate([p[k] for p in parts]) for k in ("means", "quats", "log_scales", "logits", "sh")}
    n = cat["means"].shape[0]
    has_idx = [p["idx"] is not None for p in parts]
    if any(has_idx):
        if not all(has_idx):
            raise SceneFormatError(f"{path}: only some ParticleField3DGaussianSplat prims carry {ROW_INDEX_ATTR}")
        idx = np.concatenate([p["idx"] for p in parts])
        if not np.array_equal(np.sort(idx), np.arange(n)):
            raise SceneFormatError(f"{path}: {ROW_INDEX_ATTR} of the prims are not a permutation of 0..{n - 1}")
        order = np.empty(n, np.int64)
        order[idx] = np.arange(n)
        cat = {k: np.ascontiguousarray(v[order]) for k, v in cat.items()}
    sh = cat["sh"]
    return GaussianScene(
        up_hint=_stage_up_local(px, stage, frame),
        means=torch.from_numpy(cat["means"]),
        quats=torch.from_numpy(np.ascontiguousarray(cat["quats"])),
        log_scales=torch.from_numpy(cat["log_scales"]),
        opacity_logits=torch.from_numpy(cat["logits"]),
        sh_dc=torch.from_numpy(np.ascontiguousarray(sh[:, 0])),
        sh_rest=torch.from_numpy(np.ascontiguousarray(sh[:, 1:])),
        source=path,
        format="openusd",
    )
