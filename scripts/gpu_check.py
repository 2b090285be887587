#!/usr/bin/env python
"""One-call GPU check (issue #13 item 6): gsplat, rendering, deformation and the viewer's server-side mode on CUDA.

Meant for a CUDA machine lent for one short call with no network (an NVIDIA H200); scripts/gpu_check.sh wraps it
(installs the wheel bundle first where imports fail). Each step runs in its own subprocess with a time limit
(killed, process group and all, when it runs over), so one failure or hang does not lose the rest; the JSON is
rewritten after every step (and steps save partial results as they go, so a step killed at its limit still
reports what it had measured).

Steps, in order (``--steps`` picks some):
  env         python, torch, CUDA, device name/memory, driver (nvidia-smi), nvcc, ninja, c++, package versions,
              whether a gsplat build is already cached. Needs no GPU; without CUDA the run stops here (exit 2).
  deform_1m   deformation of --n (1M) Gaussians with 16 handles: physskin_gs.deform.GaussianDeformer (CPU-only:
              its buffers are CPU tensors, probed with CUDA inputs) on the CPU; the same math (its torch kernel's
              structure-of-arrays formulation) on CUDA tensors, plain, as a CUDA graph and through torch.compile;
              deform_reference on CUDA; each against a device-to-device copy moving the same bytes (ratio).
              Runs before the gsplat build so that it survives a failed or slow build.
  gsplat_jit  gsplat's CUDA kernels: import time (the JIT build when nothing is cached: TORCH_CUDA_ARCH_LIST and
              MAX_JOBS default to the device's compute capability, 9.0 on an H200, and the CPU count) and a first
              render.
  compare     gsplat vs our pure-torch rasteriser (on the CPU, the reference; and on CUDA) on the same scene and
              camera: data/spot_mesh2splat_10k.splat and data/plant_capture.splat at --size^2 (512): max / mean
              abs pixel difference, PSNR, alpha difference; a side-by-side PNG (torch | gsplat | 10 x |diff|).
  render_1m   gsplat through physskin_gs.render.rasterize, synthetic --n (1M) Gaussians at 1920x1080: warm-up,
              then median of --reps; RGB colours and SH degree 3; render + download + JPEG as the viewer does.
  viewer      the live ViewerApp in server-rendered gsplat mode (FakeAnimatedScene: the viewer's own cost) with a
              websocket client asking for 1920x1080: renders/s as shipped (adaptive height, 60 fps target) and at
              a fixed 1080p; plus render_frame in a loop. Scenes: plant_capture (113k) and a 1M synthetic bar.

Usage:
  bash scripts/gpu_check.sh run OUT                       # on the CUDA machine (installs the bundle if needed)
  python scripts/gpu_check.py --out OUT/gpu_check.json    # the same without the install
  python scripts/gpu_check.py --report OUT/gpu_check.json # markdown rows for docs/benchmarks.md
  python scripts/gpu_check.py --device cpu --n 20000 --size 64 --out out/gpu_check_cpu.json   # CPU self-test of the steps
                                                          # (torch backend instead of gsplat; not a measurement)
Bundle helpers (scripts/gpu_check.sh calls them): --install-bundle DIR... (pip-install the wheels this Python
lacks into --target), --check-bundle DIR... (sizes; one version per package), --prebuild-gsplat OUT_DIR (compile
gsplat's CUDA extension ahead of time against an unpacked torch wheel; no GPU needed) and --install-prebuilt DIR
(copy such a build into the gsplat package where gsplat, torch, Python and the GPU match; gsplat imports it as
gsplat.csrc before it would JIT-compile). gsplat publishes no wheels with compiled kernels for Python 3.12 (its
index, docs.gsplat.studio/whl, has cp310 builds for torch <= 2.4 only, and PyPI the pure-Python wheel).

Writes OUT/gpu_check.json (schema below), OUT/gpu_check.log (every step's output, the gsplat build's included)
and OUT/compare_<scene>.png. JSON: {"schema", "tool", "started", "finished", "argv", "settings", "ok", "exit_code",
"error", "steps": {name: {"status": ok|partial|error|timeout|skipped, "seconds", "limit_s", "error", "result",
"log_tail"}}, "summary": {flat numbers for the benchmarks table}}. "partial": the step finished but some of its parts
failed (their messages are in result["errors"]).

Exit status: 0 every step ok; 1 some step failed, timed out or was partial; 2 no CUDA device (the env step is
still written); 3 bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = 1
STEPS = ["env", "deform_1m", "gsplat_jit", "compare", "render_1m", "viewer"]
#: per-step time limits in seconds (each is also cut to what is left of --budget)
LIMITS = {"env": 60, "deform_1m": 150, "gsplat_jit": 420, "compare": 150, "render_1m": 120, "viewer": 150}
#: steps that need gsplat's kernels on CUDA (skipped when the gsplat_jit step failed)
NEEDS_GSPLAT = {"render_1m", "viewer"}
SCENES = ["data/spot_mesh2splat_10k.splat", "data/plant_capture.splat"]
NO_CUDA = "no CUDA device"
LOG_TAIL = 4000


# =============================================================================================== small helpers
def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def clean_json(obj: Any) -> Any:
    """``obj`` with NaN / infinite floats replaced by None (JSON has neither) and tuples as lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    return obj


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` atomically (temporary file + rename), creating the folder; NaN and
    infinities become null."""
    obj = clean_json(obj)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=1, sort_keys=False, default=_json_default, allow_nan=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _json_default(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    return repr(o)


def finite(x) -> Optional[float]:
    """``float(x)`` rounded to 6 significant digits, or None for NaN/inf (JSON has neither)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(v):
        return None
    return float(f"{v:.6g}")


def stats_ms(seconds: Sequence[float]) -> Dict[str, Any]:
    """Median / min / mean / p90 in milliseconds of per-call times in seconds."""
    ts = sorted(float(t) for t in seconds)
    if not ts:
        return {"reps": 0}
    n = len(ts)
    med = ts[n // 2] if n % 2 else 0.5 * (ts[n // 2 - 1] + ts[n // 2])
    p90 = ts[min(n - 1, int(math.ceil(0.9 * n)) - 1)]
    return {"median_ms": finite(1e3 * med), "min_ms": finite(1e3 * ts[0]), "mean_ms": finite(1e3 * sum(ts) / n),
            "p90_ms": finite(1e3 * p90), "reps": n}


def psnr_from_mse(mse: float, peak: float = 1.0) -> Optional[float]:
    """PSNR in dB for a mean squared error (images in [0, peak]); None (JSON null) for identical images."""
    if mse <= 0:
        return None
    return 10.0 * math.log10(peak * peak / mse)


def image_diff(a, b) -> Dict[str, Any]:
    """Differences of two (H, W, C) float images in [0, 1] (both clamped first): max / mean abs, RMSE, PSNR (dB,
    None if identical) and the fraction of pixels whose largest channel difference exceeds 1/255 and 8/255."""
    import numpy as np

    a = np.clip(np.asarray(a, dtype=np.float64), 0.0, 1.0)
    b = np.clip(np.asarray(b, dtype=np.float64), 0.0, 1.0)
    if a.shape != b.shape:
        raise ValueError(f"image shapes differ: {a.shape} vs {b.shape}")
    d = np.abs(a - b)
    mse = float((d * d).mean()) if d.size else 0.0
    per_px = d.max(axis=-1) if d.ndim == 3 else d
    return {
        "max_abs": finite(d.max()) if d.size else 0.0,
        "mean_abs": finite(d.mean()) if d.size else 0.0,
        "rmse": finite(math.sqrt(mse)),
        "psnr_db": finite(psnr_from_mse(mse)) if mse > 0 else None,
        "frac_px_over_1_255": finite((per_px > 1.0 / 255).mean()) if d.size else 0.0,
        "frac_px_over_8_255": finite((per_px > 8.0 / 255).mean()) if d.size else 0.0,
    }


def tail(text: str, n: int = LOG_TAIL) -> str:
    return text if len(text) <= n else "..." + text[-n:]


def short_error(exc: BaseException) -> str:
    """``Type: message`` plus the innermost frame, short enough for the JSON."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""
    return tail(f"{type(exc).__name__}: {exc}{where}", 2000)


# ----------------------------------------------------------------------------------------------- wheel bundle
def wheel_dist_name(filename: str) -> str:
    """Normalised distribution name of a wheel file (PEP 503: lower case, runs of -_. as -)."""
    base = Path(filename).name
    if not base.endswith(".whl"):
        raise ValueError(f"not a wheel: {filename}")
    return re.sub(r"[-_.]+", "-", base.split("-")[0]).lower()


def wheel_version(filename: str) -> str:
    return Path(filename).name.split("-")[1]


def wheel_tags(filename: str) -> Tuple[List[str], List[str], List[str]]:
    """(python tags, abi tags, platform tags) of a wheel file name."""
    parts = Path(filename).name[: -len(".whl")].split("-")
    if len(parts) < 5:
        raise ValueError(f"not a wheel file name: {filename}")
    py, abi, plat = parts[-3:]
    return py.split("."), abi.split("."), plat.split(".")


def wheel_compatible(filename: str, version_info: Sequence[int] = sys.version_info[:2]) -> bool:
    """Whether this interpreter version can install the wheel (Linux x86-64 bundles only: the platform is not
    checked). ``py3``/``py2.py3`` wheels always; ``cpXY-abi3`` for XY <= this version; ``cpXY-cpXY`` for XY only."""
    pys, abis, _ = wheel_tags(filename)
    major, minor = int(version_info[0]), int(version_info[1])
    for py in pys:
        if py in (f"py{major}", "py2.py3") or py == "py3" and major == 3:
            return True
        m = re.fullmatch(r"cp(\d)(\d+)", py)
        if not m:
            continue
        want = (int(m.group(1)), int(m.group(2)))
        if "abi3" in abis and want[0] == major and want[1] <= minor:
            return True
        if want == (major, minor):
            return True
    return False


def select_wheels(paths: Iterable[Path], installed: Dict[str, str],
                  version_info: Sequence[int] = sys.version_info[:2]) -> Dict[str, List]:
    """Which bundle wheels to install: each distribution once (the first file seen), skipping those already
    installed (``installed``: normalised name -> version) and those for another Python.

    Returns {"install": [paths], "present": [(name, installed version)], "incompatible": [paths],
    "duplicate": [paths]}."""
    out: Dict[str, List] = {"install": [], "present": [], "incompatible": [], "duplicate": []}
    seen = set()
    for p in sorted(Path(x) for x in paths):
        name = wheel_dist_name(p.name)
        if name in seen:
            out["duplicate"].append(p)
            continue
        seen.add(name)
        if name in installed:
            out["present"].append((name, installed[name]))
        elif not wheel_compatible(p.name, version_info):
            out["incompatible"].append(p)
        else:
            out["install"].append(p)
    return out


def installed_distributions() -> Dict[str, str]:
    """Normalised name -> version of every distribution this interpreter sees (sys.path, PYTHONPATH included)."""
    import importlib.metadata as md

    found: Dict[str, str] = {}
    for d in md.distributions():
        name = d.metadata["Name"] if d.metadata else None
        if name:
            found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), d.version)
    return found


def install_bundle(dirs: Sequence[str], target: str, dry_run: bool = False) -> int:
    """pip-install (no index, no deps) the bundle wheels this interpreter lacks into ``target``."""
    wheels = [p for d in dirs if Path(d).is_dir() for p in Path(d).glob("*.whl")]
    if not wheels:
        print(f"gpu_check: no wheels in {', '.join(dirs)} (run `bash scripts/gpu_check.sh prepare` first)",
              file=sys.stderr)
        return 1
    sel = select_wheels(wheels, installed_distributions())
    if sel["present"]:
        print("gpu_check: already installed: " + ", ".join(f"{n} {v}" for n, v in sel["present"]))
    for p in sel["incompatible"]:
        print(f"gpu_check: skipping {p.name}: not for Python {sys.version_info[0]}.{sys.version_info[1]}",
              file=sys.stderr)
    for p in sel["duplicate"]:
        print(f"gpu_check: skipping {p.name}: another version of {wheel_dist_name(p.name)} comes first",
              file=sys.stderr)
    if not sel["install"]:
        print("gpu_check: nothing to install")
        return 0
    print("gpu_check: installing into " + target + ": " + ", ".join(p.name for p in sel["install"]))
    if dry_run:
        return 0
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
           "--no-cache-dir", "--upgrade", "--target", target, *map(str, sel["install"])]
    return subprocess.call(cmd)


def check_bundle(dirs: Sequence[str]) -> int:
    """Print the bundle's wheels with sizes; non-zero if a distribution appears in two versions."""
    total = 0
    names: Dict[str, List[str]] = {}
    for d in dirs:
        for p in sorted(Path(d).glob("*.whl")):
            size = p.stat().st_size
            total += size
            names.setdefault(wheel_dist_name(p.name), []).append(p.name)
            print(f"{size / 1e6:8.2f} MB  {d}/{p.name}")
    print(f"{total / 1e6:8.2f} MB  total in {len(sum(names.values(), []))} wheels")
    dup = {n: v for n, v in names.items() if len(v) > 1}
    for n, v in dup.items():
        print(f"error: {n} appears {len(v)} times: {', '.join(v)} (keep one)", file=sys.stderr)
    return 1 if dup else 0


# ------------------------------------------------------------------------------ prebuilt gsplat kernels (opt.)
#: what a prebuilt gsplat extension in the bundle was built for (its file name says it too); it is used only
#: where the CUDA machine matches exactly, else gsplat JIT-compiles as usual
PREBUILT_DIR = "gpu_bundle/prebuilt"


def prebuilt_name(gsplat_version: str, torch_version: str, py: Sequence[int], arch: str) -> str:
    """File name of a prebuilt gsplat extension: gsplat-1.5.3_torch-2.11.0+cu130_cp312_sm90.csrc.so."""
    return f"gsplat-{gsplat_version}_torch-{torch_version}_cp{py[0]}{py[1]}_sm{arch.replace('.', '')}.csrc.so"


def parse_prebuilt_name(name: str) -> Optional[Dict[str, str]]:
    m = re.fullmatch(r"gsplat-([^_]+)_torch-([^_]+)_cp(\d)(\d+)_sm(\d+)\.csrc\.so(\.xz)?", Path(name).name)
    if not m:
        return None
    return {"gsplat": m.group(1), "torch": m.group(2), "python": f"{m.group(3)}.{m.group(4)}",
            "arch": f"{m.group(5)[:-1]}.{m.group(5)[-1]}", "compressed": bool(m.group(6))}


def prebuild_gsplat(torch_dir: str, python_include: str, cuda_home: str, out_dir: str, arch: str = "9.0",
                    jobs: Optional[int] = None, python_tag: Sequence[int] = (3, 12)) -> Path:
    """Compile gsplat's CUDA extension ahead of time, as ``gsplat.csrc`` (the module gsplat's _backend imports
    before it falls back to its JIT build), with the flags of torch's JIT build and gsplat's _backend.

    Args: torch_dir: an unpacked torch wheel (its ``torch/`` folder: include/ and lib/) of the CUDA machine's exact
    torch version; python_include: that Python's headers (Python.h); cuda_home: a CUDA toolkit of torch's CUDA major
    version; arch: compute capability (9.0: H100/H200). Needs nvcc, c++ and ninja here, no GPU and no torch import.
    Returns the .so written into ``out_dir`` (named by :func:`prebuilt_name`)."""
    import importlib.metadata as md

    torch_dir = os.path.abspath(torch_dir)
    version_py = Path(torch_dir) / "version.py"
    tv = re.search(r"__version__ = '([^']+)'", version_py.read_text(encoding="utf-8")).group(1)
    gsplat_spec = __import__("importlib.util").util.find_spec("gsplat")
    if gsplat_spec is None or not gsplat_spec.submodule_search_locations:
        raise RuntimeError("gsplat is not installed here (its sources are compiled)")
    gdir = Path(list(gsplat_spec.submodule_search_locations)[0]) / "cuda"
    gv = md.version("gsplat")
    sources = sorted(gdir.glob("csrc/*.cu")) + sorted(gdir.glob("csrc/*.cpp")) + [gdir / "ext.cpp"]
    build = Path(out_dir) / f"build_gsplat_{gv}_{tv}_sm{arch.replace('.', '')}"
    build.mkdir(parents=True, exist_ok=True)
    inc = [f"-I{gdir / 'include'}", f"-I{gdir / 'csrc' / 'third_party' / 'glm'}"]
    sys_inc = [f"{torch_dir}/include", f"{torch_dir}/include/torch/csrc/api/include", f"{cuda_home}/include",
               python_include]
    common = ["-DTORCH_EXTENSION_NAME=csrc", "-DTORCH_API_INCLUDE_EXTENSION_H", *inc,
              *[f"-isystem {p}" for p in sys_inc]]
    cflags = common + ["-fPIC", "-std=c++17", "-O3", "-Wno-attributes"]
    cc = arch.replace(".", "")
    cuda_flags = common + ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                           "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
                           "--expt-relaxed-constexpr", f"-gencode=arch=compute_{cc},code=sm_{cc}",
                           "--compiler-options", "'-fPIC'", "-O3", "-use_fast_math", "-std=c++17"]
    ldflags = ["-shared", f"-L{torch_dir}/lib", "-lc10", "-lc10_cuda", "-ltorch_cpu", "-ltorch_cuda", "-ltorch",
               "-ltorch_python", f"-L{cuda_home}/lib64", "-lcudart"]
    lines = ["ninja_required_version = 1.3", f"cxx = {shutil.which('c++') or 'c++'}",
             f"nvcc = {cuda_home}/bin/nvcc", "", f"cflags = {' '.join(cflags)}", f"cuda_cflags = {' '.join(cuda_flags)}",
             f"ldflags = {' '.join(ldflags)}", "",
             "rule compile", "  command = $cxx -MMD -MF $out.d $cflags -c $in -o $out", "  depfile = $out.d",
             "  deps = gcc", "",
             "rule cuda_compile", "  depfile = $out.d", "  deps = gcc",
             "  command = $nvcc --generate-dependencies-with-compile --dependency-output $out.d $cuda_cflags "
             "-c $in -o $out", "",
             "rule link", "  command = $cxx $in $ldflags -o $out", ""]
    objs = []
    for src in sources:
        obj = f"{src.stem}.cuda.o" if src.suffix == ".cu" else f"{src.stem}.o"
        objs.append(obj)
        lines.append(f"build {obj}: {'cuda_compile' if src.suffix == '.cu' else 'compile'} {src}")
    lines += ["", f"build csrc.so: link {' '.join(objs)}", "", "default csrc.so", ""]
    (build / "build.ninja").write_text("\n".join(lines), encoding="utf-8")
    env = dict(os.environ, PATH=f"{cuda_home}/bin:" + os.environ.get("PATH", ""))
    cmd = [shutil.which("ninja") or "ninja", "-v", "-j", str(jobs or os.cpu_count() or 2)]
    subprocess.run(cmd, cwd=str(build), env=env, check=True)
    out = Path(out_dir) / prebuilt_name(gv, tv, python_tag, arch)
    shutil.copyfile(build / "csrc.so", out)
    subprocess.run(["strip", "--strip-unneeded", str(out)], check=False)
    return out


def install_prebuilt(bundle_dir: str = PREBUILT_DIR) -> int:
    """Put a prebuilt gsplat extension that matches this machine (gsplat, torch, Python, GPU) into the gsplat
    package as ``csrc.cpython-XY-...so``; prints why not otherwise (gsplat then JIT-compiles). Exit status 0 either
    way (1 only for an unexpected failure)."""
    cands = sorted(Path(bundle_dir).glob("gsplat-*.csrc.so*")) if Path(bundle_dir).is_dir() else []
    if not cands:
        print(f"gpu_check: no prebuilt gsplat extension in {bundle_dir} (gsplat will JIT-compile)")
        return 0
    try:
        import importlib.metadata as md
        import importlib.util
        import sysconfig

        import torch

        gv = md.version("gsplat")
        spec = importlib.util.find_spec("gsplat")
        gdir = Path(list(spec.submodule_search_locations)[0])
        cap = torch.cuda.get_device_capability(0) if torch.cuda.is_available() else None
    except Exception as exc:  # noqa: BLE001
        print(f"gpu_check: prebuilt gsplat extension not installed: {exc}")
        return 0
    here = {"gsplat": gv, "torch": torch.__version__, "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
            "arch": f"{cap[0]}.{cap[1]}" if cap else None}
    for c in cands:
        meta = parse_prebuilt_name(c.name)
        if not meta:
            continue
        diff = [k for k in ("gsplat", "torch", "python", "arch") if meta[k] != here[k]]
        if diff:
            print(f"gpu_check: {c.name} does not match this machine ({', '.join(f'{k} {here[k]}' for k in diff)})")
            continue
        dest = gdir / ("csrc" + sysconfig.get_config_var("EXT_SUFFIX"))
        try:
            if meta["compressed"]:
                import lzma

                with lzma.open(c) as src, open(dest, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            else:
                shutil.copyfile(c, dest)
        except OSError as exc:
            print(f"gpu_check: could not install {c.name} into {gdir}: {exc}")
            return 0
        print(f"gpu_check: installed prebuilt gsplat kernels {c.name} as {dest}")
        return 0
    print("gpu_check: no prebuilt gsplat extension matches; gsplat will JIT-compile")
    return 0


# ------------------------------------------------------------------------------------------------ the summary
def summarize(report: Dict[str, Any]) -> Dict[str, Any]:
    """Flat numbers of a report for the benchmarks table (missing steps or values are left out)."""
    s: Dict[str, Any] = {}
    steps = report.get("steps", {})

    def res(name):
        st = steps.get(name) or {}
        return st.get("result") or {}

    env = res("env")
    for k in ("device_name", "torch_version", "torch_cuda", "gsplat_version", "nvcc_version", "driver"):
        if env.get(k) is not None:
            s[k] = env[k]
    j = res("gsplat_jit")
    if "import_s" in j:
        s["gsplat_import_s"] = j["import_s"]
        s["gsplat_built_from_scratch"] = not j.get("cached_before", False)
    for scene, r in (res("compare").get("scenes") or {}).items():
        g = r.get("gsplat_vs_torch_cpu") or {}
        for k in ("psnr_db", "max_abs", "mean_abs"):
            if k in g:
                s[f"compare.{scene}.{k}"] = g[k]
        for k in ("gsplat", "torch_cpu", "torch_device"):
            t = (r.get("time") or {}).get(k) or {}
            if "median_ms" in t:
                s[f"compare.{scene}.{k}_ms"] = t["median_ms"]
    r = res("render_1m")
    for k in ("rgb", "sh3", "render_download_jpeg"):
        t = r.get(k) or {}
        if "median_ms" in t:
            s[f"render_1m.{k}_ms"] = t["median_ms"]
            s[f"render_1m.{k}_fps"] = finite(1e3 / t["median_ms"]) if t["median_ms"] else None
    d = res("deform_1m")
    for k in ("cpu_gaussian_deformer", "device_torch", "device_torch_graph", "device_torch_compiled",
              "device_reference", "device_copy_same_bytes"):
        t = d.get(k) or {}
        if "median_ms" in t:
            s[f"deform_1m.{k}_ms"] = t["median_ms"]
    for k, v in (d.get("ratios") or {}).items():
        s[f"deform_1m.ratio.{k}"] = v
    for scene, r in (res("viewer").get("scenes") or {}).items():
        for k in ("adaptive", "fixed_1080p", "fixed_viewport"):
            t = r.get(k) or {}
            if "renders_per_s" in t:
                s[f"viewer.{scene}.{k}_fps"] = t["renders_per_s"]
            if k == "adaptive" and "height_end" in t:
                s[f"viewer.{scene}.adaptive_height"] = t["height_end"]
        t = r.get("render_frame_loop") or {}
        if "median_ms" in t:
            s[f"viewer.{scene}.render_frame_ms"] = t["median_ms"]
    return s


def markdown_rows(report: Dict[str, Any]) -> str:
    """A markdown table of the summary plus each step's status (for docs/benchmarks.md)."""
    s = report.get("summary") or summarize(report)
    lines = ["| measurement | value |", "|---|---|"]
    for k, v in s.items():
        lines.append(f"| {k} | {v} |")
    lines.append("")
    lines.append("| step | status | seconds | error |")
    lines.append("|---|---|---|---|")
    for name, st in (report.get("steps") or {}).items():
        err = (st.get("error") or "").replace("|", "/").replace("\n", " ")[:160]
        lines.append(f"| {name} | {st.get('status')} | {st.get('seconds')} | {err} |")
    return "\n".join(lines)


# ====================================================================================== the driver (no torch)
def step_env_vars(ctx: Dict[str, Any]) -> Dict[str, str]:
    """Environment of the step subprocesses: the gsplat build settings (the same for every step, else a later
    import of gsplat would rebuild) and the repository on the path."""
    env = dict(os.environ)
    arch = ctx.get("arch")
    if arch and not env.get("TORCH_CUDA_ARCH_LIST"):
        env["TORCH_CUDA_ARCH_LIST"] = arch
    if not env.get("MAX_JOBS"):
        env["MAX_JOBS"] = str(os.cpu_count() or 8)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def run_step_subprocess(name: str, limit: float, ctx: Dict[str, Any], args, log_path: Path) -> Dict[str, Any]:
    """Run one step in a child process (own process group) for at most ``limit`` seconds."""
    rec: Dict[str, Any] = {"status": None, "seconds": None, "limit_s": round(limit, 1), "error": None,
                           "result": {}, "log_tail": ""}
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        result_file = Path(tmp) / "result.json"
        out_file = Path(tmp) / "output.txt"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--_step", name, "--_result", str(result_file),
               "--_context", json.dumps(ctx), *args.passthrough]
        t0 = time.perf_counter()
        with open(out_file, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=step_env_vars(ctx), cwd=str(ROOT), start_new_session=True)
            try:
                rc = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                rc = None
                _kill_group(proc)
        rec["seconds"] = round(time.perf_counter() - t0, 2)
        text = out_file.read_text(encoding="utf-8", errors="replace")
        rec["log_tail"] = tail(text)
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"\n===== step {name} ({now_iso()}, limit {limit:.0f} s) =====\n{text}")
        child = None
        if result_file.exists():
            try:
                child = json.loads(result_file.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                rec["error"] = f"unreadable step result: {exc}"
        if child:
            rec["result"] = child.get("result", {})
            rec["status"] = child.get("status")
            rec["error"] = child.get("error") or rec["error"]
        if rc is None:
            rec["status"] = "timeout"
            rec["error"] = f"step ran past its {limit:.0f} s limit and was killed" + (
                f" (last error: {rec['error']})" if rec["error"] else "")
        elif rec["status"] in (None, "running"):
            rec["status"] = "error"
            rec["error"] = rec["error"] or f"step process exited with status {rc} before reporting" + (
                f": {text.strip().splitlines()[-1][:300]}" if text.strip() else "")
    return rec


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL, the process group of our own child ``proc`` (it leads its own session)."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def installed_prebuilt() -> Optional[Path]:
    """The prebuilt ``gsplat/csrc*.so`` in the gsplat package this interpreter imports, if any (no import)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("gsplat")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(list(spec.submodule_search_locations)[0]).glob("csrc*.so"))
    return found[0] if found else None


def parse_steps(text: Optional[str]) -> List[str]:
    """Comma-separated step names (``env`` always runs first); raises ValueError for an unknown one."""
    if not text:
        return list(STEPS)
    want = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in want if s not in STEPS]
    if bad:
        raise ValueError(f"unknown step(s) {', '.join(bad)}; choose from {', '.join(STEPS)}")
    return ["env"] + [s for s in STEPS if s in want and s != "env"]


def new_report(args) -> Dict[str, Any]:
    return {
        "schema": SCHEMA,
        "tool": "scripts/gpu_check.py",
        "started": now_iso(),
        "finished": None,
        "argv": sys.argv[1:],
        "settings": {"device": args.device, "n": args.n, "size": args.size, "reps": args.reps,
                     "viewer_seconds": args.viewer_seconds, "budget_s": args.budget, "compile": not args.no_compile,
                     "TORCH_CUDA_ARCH_LIST": os.environ.get("TORCH_CUDA_ARCH_LIST"),
                     "MAX_JOBS": os.environ.get("MAX_JOBS"), "python": sys.executable, "host": platform.node()},
        "ok": False,
        "exit_code": None,
        "error": None,
        "steps": {},
        "summary": {},
    }


def drive(args) -> int:
    out = Path(args.out)
    log_path = out.with_suffix(".log")
    out.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text(f"gpu_check log, started {now_iso()}\n", encoding="utf-8")
    steps = parse_steps(args.steps)
    report = new_report(args)
    write_json(out, report)
    ctx: Dict[str, Any] = {"device": args.device, "out_dir": str(out.parent.resolve()), "gsplat_ok": None}
    deadline = time.monotonic() + args.budget
    code = 0
    for name in steps:
        rec: Dict[str, Any]
        left = deadline - time.monotonic()
        limit = min(LIMITS[name], left - 5.0)
        skip = None
        if name != "env" and ctx.get("device") == "none":
            skip = f"{NO_CUDA} (see the env step)"
        elif name in NEEDS_GSPLAT and ctx.get("device") == "cuda" and ctx.get("gsplat_ok") is False:
            skip = "gsplat unavailable (the gsplat_jit step failed)"
        elif limit < 10:
            skip = f"time budget spent ({args.budget:.0f} s in all)"
        if skip:
            rec = {"status": "skipped", "seconds": 0.0, "limit_s": None, "error": skip, "result": {}, "log_tail": ""}
        else:
            print(f"[gpu_check] {name}: running (limit {limit:.0f} s)", flush=True)
            rec = run_step_subprocess(name, limit, ctx, args, log_path)
        report["steps"][name] = rec
        print(f"[gpu_check] {name}: {rec['status']} ({rec['seconds']} s)" +
              (f": {rec['error'].splitlines()[0][:200]}" if rec.get("error") else ""), flush=True)
        if name == "env":
            r = rec.get("result") or {}
            cuda = bool(r.get("cuda_available"))
            if args.device == "cpu":
                ctx["device"] = "cpu"
            elif cuda:
                ctx["device"] = "cuda"
                cap = r.get("capability")
                if cap:
                    ctx["arch"] = f"{cap[0]}.{cap[1]}"
                report["settings"]["TORCH_CUDA_ARCH_LIST"] = os.environ.get("TORCH_CUDA_ARCH_LIST") or ctx.get("arch")
                report["settings"]["MAX_JOBS"] = os.environ.get("MAX_JOBS") or str(os.cpu_count() or 8)
            else:
                ctx["device"] = "none"
                why = r.get("cuda_reason") or rec.get("error") or "torch.cuda.is_available() is False"
                report["error"] = f"{NO_CUDA}: {why}"
                code = 2
        elif name == "gsplat_jit" and ctx.get("device") == "cuda":
            ok = rec["status"] == "ok" and bool((rec.get("result") or {}).get("kernels_ok"))
            pre = installed_prebuilt()
            left = deadline - time.monotonic() - 5.0
            if not ok and pre is not None and left >= 30:
                # the prebuilt extension failed (or crashed the step): remove it and let gsplat JIT-compile
                print(f"[gpu_check] gsplat_jit failed with the prebuilt extension {pre}; removing it and retrying "
                      "with gsplat's JIT build", flush=True)
                with contextlib.suppress(OSError):
                    pre.unlink()
                report["steps"]["gsplat_jit_prebuilt_attempt"] = rec
                rec = run_step_subprocess(name, min(LIMITS[name], left), ctx, args, log_path)
                report["steps"][name] = rec
                print(f"[gpu_check] {name} (JIT retry): {rec['status']} ({rec['seconds']} s)", flush=True)
                ok = rec["status"] == "ok" and bool((rec.get("result") or {}).get("kernels_ok"))
            ctx["gsplat_ok"] = ok
        if rec["status"] not in ("ok", "skipped") and code == 0:
            code = 1
        report["summary"] = summarize(report)
        write_json(out, report)
    report["finished"] = now_iso()
    report["exit_code"] = code
    report["ok"] = code == 0
    report["summary"] = summarize(report)
    write_json(out, report)
    if code == 2:
        print(f"gpu_check: {report['error']}. Nothing was measured; the environment facts are in {out}",
              file=sys.stderr)
    else:
        bad = [n for n, st in report["steps"].items() if st["status"] not in ("ok", "skipped")]
        print(f"[gpu_check] wrote {out} and {log_path}" + (f"; not ok: {', '.join(bad)}" if bad else "; all ok"))
    return code


# ====================================================================================== the steps (subprocess)
class StepContext:
    """What a step gets: its result dict, a ``save()`` that writes the partial result, and ``part(name)``: a
    context manager that records a failing sub-measurement in ``result["errors"]`` and carries on."""

    def __init__(self, path: Path, ctx: Dict[str, Any], args) -> None:
        self.path = path
        self.ctx = ctx
        self.args = args
        self.rec: Dict[str, Any] = {"status": "running", "error": None, "result": {}}
        self.result = self.rec["result"]

    def save(self) -> None:
        write_json(self.path, self.rec)

    @contextlib.contextmanager
    def part(self, name: str, into: Optional[Dict[str, Any]] = None):
        t0 = time.perf_counter()
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - recorded, the step carries on
            self.result.setdefault("errors", {})[name] = short_error(exc)
            print(f"[{name}] failed:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
            _free_cuda()
        finally:
            (into if into is not None else self.result).setdefault("part_seconds", {})[name] = round(
                time.perf_counter() - t0, 2)
            self.save()

    @property
    def device(self) -> str:
        return "cuda" if self.ctx.get("device") == "cuda" else "cpu"

    @property
    def backend(self) -> str:
        return "gsplat" if self.device == "cuda" else "torch"


def _free_cuda() -> None:
    try:
        import gc

        import torch

        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001
        pass


def _sync(device: str) -> Callable[[], None]:
    import torch

    if device == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def time_calls(fn: Callable[[], Any], reps: int, warmup: int, device: str, budget_s: float = 30.0) -> Dict[str, Any]:
    """Per-call wall times (synchronised after each call) after ``warmup`` calls; stops early after
    ``budget_s`` seconds of timed calls (at least 3)."""
    sync = _sync(device)
    for _ in range(warmup):
        fn()
    sync()
    ts: List[float] = []
    t_end = time.perf_counter() + budget_s
    for i in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t)
        if i >= 2 and time.perf_counter() > t_end:
            break
    return stats_ms(ts)


def time_pipelined(fn: Callable[[], Any], reps: int, device: str) -> Optional[float]:
    """Mean ms per call of ``reps`` back-to-back calls between two CUDA events (no host sync in between)."""
    if device != "cuda":
        return None
    import torch

    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    torch.cuda.synchronize()
    return finite(a.elapsed_time(b) / reps)


def _run(cmd: List[str], timeout: float = 20.0) -> Optional[str]:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        return None if isinstance(exc, FileNotFoundError) else f"error: {exc}"
    return (r.stdout + r.stderr).strip()


def _pkg_version(name: str) -> Optional[str]:
    import importlib.metadata as md

    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def ensure_imports() -> None:
    """The repository on sys.path, and ``physskin_gs_viewer`` importable without an install (it is the folder
    viewer/, mapped by pyproject's package-dir; the CUDA machine runs from a plain checkout)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import importlib.util

    if importlib.util.find_spec("physskin_gs_viewer") is not None:
        return
    spec = importlib.util.spec_from_file_location("physskin_gs_viewer", ROOT / "viewer" / "__init__.py",
                                                  submodule_search_locations=[str(ROOT / "viewer")])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["physskin_gs_viewer"] = mod
    spec.loader.exec_module(mod)


# --------------------------------------------------------------------------------------------------- env
def step_env(sc: StepContext) -> None:
    r = sc.result
    r["python"] = sys.version.split()[0]
    r["python_executable"] = sys.executable
    r["platform"] = platform.platform()
    r["cpu_count"] = os.cpu_count()
    try:
        r["mem_total_gb"] = finite(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9)
    except (OSError, ValueError, AttributeError):
        pass
    r["env_vars"] = {k: os.environ.get(k) for k in ("TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "CUDA_HOME", "CUDA_PATH",
                                                   "TORCH_EXTENSIONS_DIR", "PYTHONPATH", "VIRTUAL_ENV")}
    r["packages"] = {p: _pkg_version(p) for p in (
        "torch", "numpy", "gsplat", "viser", "plyfile", "websockets", "msgspec", "zstandard", "imageio", "pillow",
        "jaxtyping", "rich", "ninja", "einops", "safetensors", "scipy", "trimesh", "triton")}
    r["gsplat_version"] = r["packages"]["gsplat"]
    pre = installed_prebuilt()
    r["gsplat_prebuilt_extension"] = str(pre) if pre else None
    sc.save()
    smi = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,compute_cap",
                "--format=csv,noheader"])
    r["nvidia_smi"] = smi
    if smi and not smi.startswith("error"):
        parts = [p.strip() for p in smi.splitlines()[0].split(",")]
        if len(parts) >= 2:
            r["driver"] = parts[1]
    nvcc = shutil.which("nvcc")
    r["nvcc_path"] = nvcc
    r["ninja_path"] = shutil.which("ninja")
    r["ninja_version"] = _run(["ninja", "--version"]) if r["ninja_path"] else None
    cxx = shutil.which("c++") or shutil.which("g++")
    r["cxx"] = cxx
    r["cxx_version"] = (_run([cxx, "--version"]) or "").splitlines()[0] if cxx else None
    sc.save()
    with sc.part("torch"):
        import torch

        r["torch_version"] = torch.__version__
        r["torch_cuda"] = torch.version.cuda
        r["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        r["torch_threads"] = torch.get_num_threads()
        r["cuda_available"] = bool(torch.cuda.is_available())
        if not r["cuda_available"]:
            r["cuda_reason"] = (f"torch {torch.__version__} (built with CUDA {torch.version.cuda}) reports "
                                f"torch.cuda.is_available() = False")
        else:
            p = torch.cuda.get_device_properties(0)
            r["device_count"] = torch.cuda.device_count()
            r["device_name"] = p.name
            r["capability"] = list(torch.cuda.get_device_capability(0))
            r["device_memory_gb"] = finite(p.total_memory / 1e9)
            r["multiprocessors"] = p.multi_processor_count
        sc.save()
        from torch.utils import cpp_extension as ce

        r["cuda_home"] = ce.CUDA_HOME
        nv = nvcc or (os.path.join(ce.CUDA_HOME, "bin", "nvcc") if ce.CUDA_HOME else None)
        if nv and os.path.exists(nv):
            out = _run([nv, "--version"]) or ""
            m = re.search(r"release ([\d.]+)", out)
            r["nvcc_version"] = m.group(1) if m else out[-200:]
        with contextlib.suppress(Exception):
            bd = ce._get_build_directory("gsplat_cuda", False)
            r["gsplat_build_dir"] = bd
            r["gsplat_build_cached"] = os.path.exists(os.path.join(bd, "gsplat_cuda.so"))
    if "torch_version" not in r:
        r["cuda_available"] = False
        r["cuda_reason"] = "torch is not importable: " + (r.get("errors") or {}).get("torch", "?")
    with sc.part("physskin_gs"):
        ensure_imports()
        import physskin_gs

        r["physskin_gs_version"] = physskin_gs.__version__
        from physskin_gs.deform import native_available

        r["deform_native_kernel"] = bool(native_available())


# -------------------------------------------------------------------------------------------------- deform
class TorchDeformer:
    """GaussianDeformer's torch-kernel math (structure of arrays: W and grad W (K, 4, N), rest means (3, N),
    L = R S (3, 3, N)) on any device, all Gaussians in one pass; constant handles folded into a bias as there.
    ``deform(Z)`` returns (means (N, 3), covars (N, 3, 3)) buffers owned by the object. No singular-value clamp."""

    def __init__(self, means, quats, log_scales, weights, weight_grads, device) -> None:
        import torch

        from physskin_gs.scene import quat_to_rotmat

        f32 = torch.float32
        N, H = weights.shape
        const = (weights == 1).all(0) & (weight_grads == 0).all(2).all(0)
        self.const = torch.nonzero(const).flatten().to(device)
        self.keep = torch.nonzero(~const).flatten().to(device)
        self.N, self.K = N, int(self.keep.numel())
        W = weights.to(device, f32)[:, self.keep]
        dW = weight_grads.to(device, f32)[:, self.keep]
        self.WG = torch.cat([W.T[:, None, :], dW.permute(1, 2, 0)], 1).contiguous()  # [h, (W, dW/dX_b), n]
        self.X = means.to(device, f32).T.contiguous()  # [c, n]
        R = quat_to_rotmat(quats.to(device, f32))
        s = torch.exp(log_scales.to(device, f32).clamp(-30.0, 20.0))
        self.L = (R * s[:, None, :]).permute(1, 2, 0).contiguous()  # [b, d, n]
        self.P = torch.empty(12, 4 * N, dtype=f32, device=device)
        self.means = torch.empty(N, 3, dtype=f32, device=device)
        self.covars = torch.empty(N, 3, 3, dtype=f32, device=device)
        self.eye = torch.eye(3, dtype=f32, device=device)
        self.device = device

    def bytes_per_frame(self) -> Tuple[int, int]:
        """(read, written) bytes of the compact data and the outputs, as GaussianDeformer.nbytes_per_frame."""
        return (4 * self.K + 12) * 4 * self.N, 12 * 4 * self.N

    def z_parts(self, Z):
        """Split handle transforms Z (H, 3, 4) (any float dtype or device) into the per-frame inputs of
        :meth:`deform_parts`: ``Zt`` (12, K) float32, the K non-constant handles' Z flattened row-major, and
        ``bias`` (3, 4) float32, the sum of the constant handles' Z plus the identity in its linear part."""
        import torch

        Z = Z.to(self.device, torch.float32)
        Zt = Z[self.keep].permute(1, 2, 0).reshape(12, self.K)
        bias = Z[self.const].sum(0)
        bias[:, :3] += self.eye
        return Zt, bias

    def deform(self, Z):
        """Deform every Gaussian by handle transforms Z (H, 3, 4). Returns (means (N, 3), covars (N, 3, 3))
        float32 on the object's device: its own buffers, overwritten by the next call."""
        Zt, bias = self.z_parts(Z)
        return self.deform_parts(Zt, bias)

    def deform_parts(self, Zt, bias):
        """:meth:`deform` from :meth:`z_parts`' ``Zt`` (12, K) and ``bias`` (3, 4). Returns (means (N, 3),
        covars (N, 3, 3)) float32, the object's buffers (overwritten by the next call)."""
        import torch

        torch.mm(Zt, self.WG.view(self.K, 4 * self.N), out=self.P)
        m, c = deform_math(self.P.view(3, 4, 4, self.N), self.X, self.L, bias)
        self.means.copy_(m)
        self.covars.copy_(c)
        return self.means, self.covars


def deform_math(P, X, L, bias):
    """P [a, c, r, n] (r = 0: sum_h W_h Z_h, r = 1..3: sum_h dW_h/dX_{r-1} Z_h) -> (means (N, 3) view,
    covars (N, 3, 3) view): x' = P X~, F[a, b] = P[a, b, 0] + Q[a, 1 + b], Sigma' = (F L)(F L)^T."""
    P0 = P[:, :, 0] + bias[:, :, None]  # [a, c, n]
    Pr = P[:, :, 1:]  # [a, c, r-1, n]
    x = X
    m = P0[:, 3] + P0[:, 0] * x[0] + P0[:, 1] * x[1] + P0[:, 2] * x[2]  # [a, n]
    Q = Pr[:, 3] + Pr[:, 0] * x[0] + Pr[:, 1] * x[1] + Pr[:, 2] * x[2]  # [a, b, n]
    F = P0[:, :3] + Q  # [a, b, n]
    FL = F[:, 0:1] * L[0:1] + F[:, 1:2] * L[1:2] + F[:, 2:3] * L[2:3]  # [a, d, n]
    S = FL[:, None, 0] * FL[None, :, 0] + FL[:, None, 1] * FL[None, :, 1] + FL[:, None, 2] * FL[None, :, 2]
    return m.T, S.permute(2, 0, 1)


def synthetic_deform_inputs(n: int, k: int, seed: int = 0):
    """Random rest Gaussians and skinning data: k handles plus one constant handle (weight 1, gradient 0)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    means = torch.randn(n, 3, generator=g) * 0.5
    quats = torch.randn(n, 4, generator=g)
    log_scales = torch.randn(n, 3, generator=g) * 0.3 - 5.0
    W = torch.softmax(torch.randn(n, k, generator=g) * 2.0, 1)
    weights = torch.cat([torch.ones(n, 1), W], 1)
    grads = torch.cat([torch.zeros(n, 1, 3), torch.randn(n, k, 3, generator=g) * 0.5], 1)
    Z = torch.randn(k + 1, 3, 4, generator=g) * 0.05
    return means, quats, log_scales, weights, grads, Z


def step_deform(sc: StepContext) -> None:
    import torch

    ensure_imports()
    from physskin_gs.deform import GaussianDeformer, deform_reference, native_available

    r, a, dev = sc.result, sc.args, sc.device
    n, k = a.n, 16
    r.update({"n": n, "handles": k, "constant_handles": 1, "device": dev, "cpu_threads": torch.get_num_threads(),
              "singular_clamp": None})
    means, quats, log_scales, weights, grads, Z = synthetic_deform_inputs(n, k)
    sc.save()
    with sc.part("gaussian_deformer_device_probe"):
        m = 4096
        try:
            d = GaussianDeformer(*(t[:m].to(dev) for t in (means, quats, log_scales, weights, grads)))
            pm, _ = d.deform(Z.to(dev))
            r["gaussian_deformer_output_device"] = str(pm.device)
            r["gaussian_deformer_on_device"] = pm.device.type == dev
        except Exception as exc:  # noqa: BLE001 - a finding, not a failure of this step
            r["gaussian_deformer_on_device"] = False
            r["gaussian_deformer_device_error"] = short_error(exc)
        if not r["gaussian_deformer_on_device"]:
            r["gaussian_deformer_note"] = (
                f"GaussianDeformer does not deform on {dev}: its data and output buffers are CPU tensors; the "
                "device timings below run the same math on device tensors (TorchDeformer, scripts/gpu_check.py)")
    ref_out = None
    with sc.part("cpu_gaussian_deformer"):
        t0 = time.perf_counter()
        d = GaussianDeformer(means, quats, log_scales, weights, grads)
        r["cpu_build_s"] = finite(time.perf_counter() - t0)
        r["cpu_native_kernel"] = bool(d.native) and native_available()
        rd, wr = d.nbytes_per_frame()
        r["cpu_bytes_per_frame"] = {"read": rd, "written": wr}
        r["cpu_gaussian_deformer"] = time_calls(lambda: d.deform(Z), reps=min(a.reps, 7), warmup=1, device="cpu",
                                                budget_s=15)
        pm, pc = d.deform(Z)
        ref_out = (pm.clone(), pc.clone())
        d = pm = pc = None
    td = None
    with sc.part("device_torch"):
        td = TorchDeformer(means, quats, log_scales, weights, grads, dev)
        rd, wr = td.bytes_per_frame()
        r["bytes_per_frame"] = {"read": rd, "written": wr, "total": rd + wr}
        r["device_torch"] = time_calls(lambda: td.deform(Z), reps=a.reps, warmup=3, device=dev, budget_s=15)
        r["device_torch"]["pipelined_ms"] = time_pipelined(lambda: td.deform(Z), 20, dev)
        r["device_torch"]["peak_mem_gb"] = (finite(torch.cuda.max_memory_allocated() / 1e9)
                                           if dev == "cuda" else None)
        if ref_out is not None:
            gm, gc = td.deform(Z)
            r["device_vs_cpu"] = {
                "means_max_abs": finite((gm.cpu() - ref_out[0]).abs().max()),
                "covars_max_rel": finite((gc.cpu() - ref_out[1]).abs().max() / ref_out[1].abs().max()),
            }
    Zt_static = bias_static = None
    if td is not None and dev == "cuda":
        with sc.part("device_torch_graph"):
            Zt_static, bias_static = td.z_parts(Z)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    td.deform_parts(Zt_static, bias_static)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                td.deform_parts(Zt_static, bias_static)
            r["device_torch_graph"] = time_calls(graph.replay, reps=a.reps, warmup=3, device=dev, budget_s=10)
            r["device_torch_graph"]["pipelined_ms"] = time_pipelined(graph.replay, 50, dev)
            del graph
    with sc.part("device_copy_same_bytes"):
        total = r.get("bytes_per_frame", {}).get("total") or ((4 * k + 12) * 4 * n + 48 * n)
        src = torch.empty(total // 8, dtype=torch.float32, device=dev)  # total/2 bytes read + total/2 written
        src.uniform_()
        dst = torch.empty_like(src)
        r["device_copy_same_bytes"] = time_calls(lambda: dst.copy_(src), reps=a.reps, warmup=3, device=dev,
                                                 budget_s=10)
        r["device_copy_same_bytes"]["pipelined_ms"] = time_pipelined(lambda: dst.copy_(src), 50, dev)
        r["device_copy_same_bytes"]["bytes_moved"] = src.numel() * 4 * 2
        src = dst = None
    with sc.part("device_reference"):
        from physskin_gs.scene import quat_to_rotmat

        with torch.no_grad():
            md, qd, ld = means.to(dev), quats.to(dev), log_scales.to(dev)
            L = quat_to_rotmat(qd) * torch.exp(ld)[:, None, :]
            cov = L @ L.transpose(1, 2)
            Wd, dWd, Zd = weights.to(dev), grads.to(dev), Z.to(dev)
            L = qd = ld = None
            r["device_reference"] = time_calls(lambda: deform_reference(md, cov, Wd, dWd, Zd), reps=5, warmup=1,
                                               device=dev, budget_s=10)
            md = cov = Wd = dWd = Zd = None
        _free_cuda()
    if td is not None and not a.no_compile and dev == "cuda":
        with sc.part("device_torch_compiled"):
            X, Lt, K, N = td.X, td.L, td.K, td.N
            WGv = td.WG.view(K, 4 * N)

            def fused(Zt, bias):
                P = (Zt @ WGv).view(3, 4, 4, N)
                mm, cc = deform_math(P, X, Lt, bias)
                return mm.contiguous(), cc.contiguous()

            t0 = time.perf_counter()
            cf = torch.compile(fused, dynamic=False)
            Zt, bias = td.z_parts(Z)
            cm, ccv = cf(Zt, bias)
            torch.cuda.synchronize()
            r["compile_s"] = finite(time.perf_counter() - t0)
            r["device_torch_compiled"] = time_calls(lambda: cf(Zt, bias), reps=a.reps, warmup=3, device=dev,
                                                    budget_s=10)
            r["device_torch_compiled"]["pipelined_ms"] = time_pipelined(lambda: cf(Zt, bias), 20, dev)
            if ref_out is not None:
                r["compiled_vs_cpu_means_max_abs"] = finite((cm.cpu() - ref_out[0]).abs().max())
    cp = (r.get("device_copy_same_bytes") or {}).get("median_ms")
    if cp:
        ratios = {}
        for key in ("device_torch", "device_torch_graph", "device_torch_compiled", "cpu_gaussian_deformer"):
            t = (r.get(key) or {}).get("median_ms")
            if t:
                ratios[f"{key}_over_copy"] = finite(t / cp)
        r["ratios"] = ratios
        tot = (r.get("bytes_per_frame") or {}).get("total")
        if tot:
            r["bandwidth_gb_s"] = {key: finite(tot / ((r.get(key) or {}).get("median_ms") * 1e-3) / 1e9)
                                   for key in ("device_torch", "device_torch_graph", "device_torch_compiled",
                                               "device_copy_same_bytes", "cpu_gaussian_deformer")
                                   if (r.get(key) or {}).get("median_ms")}


# ---------------------------------------------------------------------------------------------- gsplat jit
def tiny_render_check(dev: str, backend: str) -> Dict[str, Any]:
    """Render 2000 Gaussians at 64x64; returns timing and sanity facts (raises if the image is empty/NaN)."""
    import torch

    from physskin_gs.render import intrinsics_from_fov, look_at, rasterize

    g = torch.Generator().manual_seed(1)
    n = 2000
    means = (torch.randn(n, 3, generator=g) * 0.3).to(dev)
    cov = (torch.eye(3) * 1e-3).expand(n, 3, 3).contiguous().to(dev)
    op = torch.full((n,), 0.8).to(dev)
    col = torch.rand(n, 3, generator=g).to(dev)
    vm = look_at((0.0, -3.0, 0.0), (0.0, 0.0, 0.0), "z").to(dev)
    K = intrinsics_from_fov(64, 64, 0.8).to(dev)
    t0 = time.perf_counter()
    out = rasterize(means, cov, op, col, vm, K, 64, 64, backend=backend)
    if dev == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter() - t0
    if not bool(torch.isfinite(out.rgb).all()):
        raise RuntimeError("render produced non-finite pixels")
    cover = float((out.alpha > 0.5).float().mean())
    if cover <= 0:
        raise RuntimeError("render produced an empty image")
    return {"first_render_s": finite(t), "coverage": finite(cover)}


def step_gsplat_jit(sc: StepContext) -> None:
    r = sc.result
    ensure_imports()
    r["TORCH_CUDA_ARCH_LIST"] = os.environ.get("TORCH_CUDA_ARCH_LIST")
    r["MAX_JOBS"] = os.environ.get("MAX_JOBS")
    import torch
    from torch.utils import cpp_extension as ce

    r["cuda_home"] = ce.CUDA_HOME
    with contextlib.suppress(Exception):
        bd = ce._get_build_directory("gsplat_cuda", False)
        r["build_dir"] = bd
        r["cached_before"] = os.path.exists(os.path.join(bd, "gsplat_cuda.so"))
    sc.save()
    if sc.device != "cuda":
        r["note"] = "no CUDA: gsplat's kernels are not built; the torch rasteriser stands in (self-test)"
        r.update(tiny_render_check("cpu", "torch"))
        r["kernels_ok"] = False
        return
    t0 = time.perf_counter()
    import gsplat

    r["gsplat_version"] = getattr(gsplat, "__version__", None)
    r["gsplat_file"] = gsplat.__file__
    from gsplat.cuda._backend import _C

    r["import_s"] = finite(time.perf_counter() - t0)
    r["kernels_loaded"] = _C is not None
    r["extension"] = getattr(_C, "__name__", None)  # gsplat.csrc: the prebuilt one; gsplat_cuda: the JIT build
    r["extension_file"] = getattr(_C, "__file__", None)
    r["prebuilt_used"] = r["extension"] == "gsplat.csrc"
    sc.save()
    if _C is None:
        raise RuntimeError("gsplat's CUDA extension did not load (see the log: no CUDA toolkit / nvcc found?)")
    so = Path(r.get("build_dir") or "") / "gsplat_cuda.so"
    if so.exists():
        r["so_mb"] = finite(so.stat().st_size / 1e6)
    r.update(tiny_render_check("cuda", "gsplat"))
    r["kernels_ok"] = True
    r["torch_version"] = torch.__version__


# ------------------------------------------------------------------------------------------------- compare
def _save_png(path: Path, images: List[Any]) -> None:
    import numpy as np

    row = np.concatenate([(np.clip(np.asarray(im, dtype=np.float32), 0, 1) * 255 + 0.5).astype(np.uint8)
                          for im in images], axis=1)
    try:
        from PIL import Image

        Image.fromarray(row).save(str(path))
    except ImportError:
        import imageio.v2 as imageio

        imageio.imwrite(str(path), row)


def step_compare(sc: StepContext) -> None:
    import numpy as np

    ensure_imports()
    from physskin_gs.io import load_scene
    from physskin_gs.render import auto_frame, rasterize

    r, a, dev = sc.result, sc.args, sc.device
    use_gsplat = dev == "cuda" and sc.ctx.get("gsplat_ok") is not False
    size = a.size
    r.update({"size": [size, size], "gsplat": use_gsplat, "background": None, "scenes": {}})
    for path in (a.scenes.split(",") if a.scenes else SCENES):
        stem = Path(path).stem
        rec: Dict[str, Any] = {"path": path, "time": {}}
        r["scenes"][stem] = rec
        with sc.part(f"{stem}", into=rec):
            scene = load_scene(str(ROOT / path))
            rec["n"] = scene.num_gaussians
            rec["sh_degree"] = scene.sh_degree
            cam = auto_frame(scene.means, up="z", width=size, height=size)
            cpu = [scene.means, scene.covariances(), scene.opacities, scene.sh, cam.viewmat, cam.K]

            def torch_cpu():
                return rasterize(*cpu, size, size, backend="torch")

            rec["time"]["torch_cpu"] = time_calls(torch_cpu, reps=2, warmup=0, device="cpu", budget_s=20)
            ref = torch_cpu()
            ref_rgb, ref_a = ref.rgb.numpy(), ref.alpha.numpy()
            rec["coverage_alpha_gt_0.5"] = finite((ref_a > 0.5).mean())
            sc.save()
            gpu = [t.to(dev) for t in cpu]
            images = [ref_rgb]
            if dev == "cuda":
                with sc.part(f"{stem}.torch_device", into=rec):
                    def torch_dev():
                        return rasterize(*gpu, size, size, backend="torch")

                    rec["time"]["torch_device"] = time_calls(torch_dev, reps=5, warmup=1, device=dev, budget_s=15)
                    o = torch_dev()
                    rec["torch_device_vs_torch_cpu"] = image_diff(o.rgb.cpu().numpy(), ref_rgb)
            if use_gsplat:
                with sc.part(f"{stem}.gsplat", into=rec):
                    def gs():
                        return rasterize(*gpu, size, size, backend="gsplat")

                    rec["time"]["gsplat"] = time_calls(gs, reps=20, warmup=3, device=dev, budget_s=15)
                    o = gs()
                    g_rgb, g_a = o.rgb.cpu().numpy(), o.alpha.cpu().numpy()
                    rec["gsplat_vs_torch_cpu"] = image_diff(g_rgb, ref_rgb)
                    rec["gsplat_vs_torch_cpu"]["alpha"] = image_diff(g_a, ref_a)
                    images += [g_rgb, np.clip(10 * np.abs(g_rgb - ref_rgb), 0, 1)]
            with sc.part(f"{stem}.png", into=rec):
                png = Path(sc.ctx["out_dir"]) / f"compare_{re.sub(r'[^A-Za-z0-9_.-]', '_', stem)}.png"
                _save_png(png, images)
                rec["png"] = png.name
            gpu = None
            _free_cuda()


# ----------------------------------------------------------------------------------------------- render 1M
def synthetic_render_scene(n: int, dev: str, sh_degree: int = 0, seed: int = 0):
    """As scripts/bench_viewer.py --gpu-only: N(0, 0.5^2) centres, random covariances of ~4 mm, random opacities
    and colours (or SH coefficients of ``sh_degree``)."""
    import torch

    gen = torch.Generator(device=dev).manual_seed(seed)
    means = torch.randn(n, 3, device=dev, generator=gen) * 0.5
    L = torch.randn(n, 3, 3, device=dev, generator=gen) * 0.004
    covars = L @ L.transpose(1, 2) + 1e-6 * torch.eye(3, device=dev)
    opac = torch.rand(n, device=dev, generator=gen)
    if sh_degree:
        colors = torch.randn(n, (sh_degree + 1) ** 2, 3, device=dev, generator=gen) * 0.3
    else:
        colors = torch.rand(n, 3, device=dev, generator=gen)
    return means, covars, opac, colors


def step_render(sc: StepContext) -> None:
    import torch

    ensure_imports()
    from physskin_gs.render import intrinsics_from_fov, look_at, rasterize

    r, a, dev, backend = sc.result, sc.args, sc.device, sc.backend
    W, H = (1920, 1080) if dev == "cuda" else (320, 180)
    r.update({"n": a.n, "image": [W, H], "backend": backend, "camera": "eye (0, -3, 0.5) -> origin, fov_y 0.8"})
    vm = look_at((0.0, -3.0, 0.5), (0.0, 0.0, 0.0), "z").to(dev)
    K = intrinsics_from_fov(W, H, 0.8).to(dev)
    reps = a.reps if dev == "cuda" else 3
    for key, deg in (("rgb", 0), ("sh3", 3)):
        with sc.part(key):
            means, covars, opac, colors = synthetic_render_scene(a.n, dev, deg)
            if dev == "cuda":
                torch.cuda.reset_peak_memory_stats()

            def render():
                return rasterize(means, covars, opac, colors, vm, K, W, H, backend=backend)

            t0 = time.perf_counter()
            out = render()
            if dev == "cuda":
                torch.cuda.synchronize()
            r[f"{key}_first_call_s"] = finite(time.perf_counter() - t0)
            r[f"{key}_coverage"] = finite((out.alpha > 0.5).float().mean())
            r[key] = time_calls(render, reps=reps, warmup=5 if dev == "cuda" else 1, device=dev, budget_s=20)
            r[key]["pipelined_ms"] = time_pipelined(render, 20, dev)
            if dev == "cuda":
                r[key]["peak_mem_gb"] = finite(torch.cuda.max_memory_allocated() / 1e9)
            if key == "rgb":
                with sc.part("render_download_jpeg"):
                    import imageio.v3 as iio

                    def full():  # what the viewer's render thread does per frame, less the websocket
                        img = (render().rgb.clamp(0, 1) * 255).to(torch.uint8).cpu().numpy()
                        return iio.imwrite("<bytes>", img, extension=".jpeg", quality=80)

                    r["render_download_jpeg"] = time_calls(full, reps=min(reps, 20), warmup=2, device=dev,
                                                           budget_s=15)
                    r["jpeg_bytes"] = len(full())
            means = covars = opac = colors = None
            _free_cuda()
    t = (r.get("rgb") or {}).get("median_ms")
    if t and dev == "cuda":
        r["target_60fps"] = "PASS" if 1e3 / t >= 60 else "FAIL"


# -------------------------------------------------------------------------------------------------- viewer
def step_viewer(sc: StepContext) -> None:
    import numpy as np
    import torch

    ensure_imports()
    from physskin_gs.io import load_scene
    from physskin_gs_viewer.app import ViewerApp
    from physskin_gs_viewer.camera import CameraState, look_at_wxyz
    from physskin_gs_viewer.render_server import render_frame
    from physskin_gs_viewer.splats import robust_extent, sh_dc_to_rgb
    from physskin_gs_viewer.testing import FakeAnimatedScene, ViserWsClient, make_blob_scene, wait_until

    r, a, dev, backend = sc.result, sc.args, sc.device, sc.backend
    W, H = (1920, 1080) if dev == "cuda" else (320, 240)
    secs = a.viewer_seconds
    r.update({"display": backend, "viewport": [W, H], "seconds_each": secs,
              "anim": "FakeAnimatedScene (toy dynamics; the viewer's own cost)", "scenes": {}})
    scenes = [("plant_capture", lambda: load_scene(str(ROOT / "data/plant_capture.splat")))]
    scenes.append((f"blob_{a.n // 1000}k", lambda: make_blob_scene(a.n, log_scale=-5.0)))
    tmp = tempfile.mkdtemp(prefix="gpu_check_rec_")
    try:
        for stem, make in scenes:
            rec: Dict[str, Any] = {}
            r["scenes"][stem] = rec
            with sc.part(stem, into=rec):
                scene = make()
                rec["n"] = scene.num_gaussians
                anim = FakeAnimatedScene(scene, num_handles=4)
                app = ViewerApp(anim, None, port=0, display=backend, realtime=False, play=True,
                                max_live=max(200_000, scene.num_gaussians), record_dir=tmp)
                ws = None
                try:
                    app.start()
                    if not app.wait_ready(60):
                        raise RuntimeError(f"viewer not ready after 60 s: {app.failed}")
                    pts = scene.means.numpy()
                    center = np.median(pts, axis=0)
                    ext = float(robust_extent(pts))
                    pos = center + np.array([0.3, -1.0, 0.4]) * 1.6 * ext / np.linalg.norm([0.3, -1.0, 0.4])
                    ws = ViserWsClient(app.port)
                    ws.send_camera(tuple(pos), tuple(center), (0.0, 0.0, 1.0), fov=0.8, width=W, height=H)
                    if not wait_until(lambda: any(x.renders > 0 for x in list(app._renderers.values())), 60):
                        raise RuntimeError("no server-side render within 60 s; errors: "
                                           + "; ".join(app.error_log[-3:]))
                    rend = list(app._renderers.values())[0]

                    def measure(seconds):
                        n0, m0, t0 = rend.renders, ws.count("BackgroundImageMessage"), time.perf_counter()
                        time.sleep(seconds)
                        n1, m1, t1 = rend.renders, ws.count("BackgroundImageMessage"), time.perf_counter()
                        return {"renders_per_s": finite((n1 - n0) / (t1 - t0)),
                                "received_per_s": finite((m1 - m0) / (t1 - t0)),
                                "last_ms": finite(rend.last_ms), "height_end": rend.height}

                    time.sleep(min(2.0, secs))  # let the height adapt
                    rec["adaptive"] = measure(secs)
                    rec["adaptive"]["target_fps"] = rend.target_fps
                    sc.save()
                    rend.min_height = rend.max_height = H  # pin the render height to the viewport
                    rend.height = H
                    time.sleep(0.5)
                    rec["fixed_1080p" if dev == "cuda" else "fixed_viewport"] = measure(secs)
                    sc.save()
                    frame = app.live.worker.slot.get()
                    cam = CameraState(tuple(look_at_wxyz(pos, center, (0.0, 0.0, 1.0))), tuple(pos), 0.8, W / H)
                    colors = sh_dc_to_rgb(scene.sh_dc.numpy()).astype(np.float32)
                    opac = scene.opacities.numpy().astype(np.float32)
                    ct = torch.as_tensor(colors, device=dev)
                    ot = torch.as_tensor(opac, device=dev)
                    rec["render_frame_loop"] = time_calls(
                        lambda: render_frame(frame, cam, W, H, ct, ot, backend), reps=30 if dev == "cuda" else 3,
                        warmup=2, device=dev, budget_s=10)
                    rec["errors_logged"] = app.error_log[-5:]
                finally:
                    if ws is not None:
                        ws.close()
                    app.stop()
                del anim, scene
                _free_cuda()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _step_test_sleep(sc: StepContext) -> None:
    """Test hook (tests/test_gpu_check.py; not in STEPS): save a partial result, then hang."""
    sc.result["before_hang"] = True
    sc.save()
    time.sleep(3600)


STEP_FUNCS: Dict[str, Callable[[StepContext], None]] = {
    "env": step_env, "deform_1m": step_deform, "gsplat_jit": step_gsplat_jit, "compare": step_compare,
    "render_1m": step_render, "viewer": step_viewer, "_test_sleep": _step_test_sleep,
}


def step_main(name: str, result_path: str, ctx: Dict[str, Any], args) -> int:
    sc = StepContext(Path(result_path), ctx, args)
    sc.save()
    try:
        STEP_FUNCS[name](sc)
        sc.rec["status"] = "partial" if sc.result.get("errors") else "ok"
        if sc.result.get("errors") and not sc.rec["error"]:
            sc.rec["error"] = "; ".join(f"{k}: {v.splitlines()[0]}" for k, v in sc.result["errors"].items())[:2000]
    except BaseException as exc:  # noqa: BLE001 - reported in the JSON
        sc.rec["status"] = "error"
        sc.rec["error"] = short_error(exc)
        traceback.print_exc()
    sc.save()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown (viser / CUDA threads can hang it)


# ======================================================================================================= CLI
def default_site() -> str:
    """Where ``--install-bundle`` installs: ``$SITE`` (as gpu_check.sh sets it), else ``site`` in the temporary
    folder (``$TMPDIR``)."""
    return os.environ.get("SITE") or os.path.join(tempfile.gettempdir(), "site")


def default_cuda_home() -> Optional[str]:
    """``$CUDA_HOME``, else the toolkit folder of the ``nvcc`` on the PATH, else None."""
    if os.environ.get("CUDA_HOME"):
        return os.environ["CUDA_HOME"]
    nvcc = shutil.which("nvcc")
    return os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else None


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/gpu_check/gpu_check.json", help="JSON report (log and PNGs beside it)")
    ap.add_argument("--steps", default=None, help=f"comma-separated subset of {','.join(STEPS)} (env always runs)")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu"],
                    help="auto: CUDA required (exit 2 without); cpu: self-test of the steps with the torch backend")
    ap.add_argument("--budget", type=float, default=500.0,
                    help="seconds for the whole run (default 500: inside one 600 s device call with the install)")
    ap.add_argument("--n", type=int, default=1_000_000, help="Gaussians of the synthetic scenes (default 1M)")
    ap.add_argument("--size", type=int, default=512, help="image side of the gsplat/torch comparison (512)")
    ap.add_argument("--reps", type=int, default=50, help="timed repetitions where cheap (50)")
    ap.add_argument("--viewer-seconds", type=float, default=4.0, help="each viewer measurement's duration (4)")
    ap.add_argument("--scenes", default=None, help="comma-separated scene files for compare (default: both)")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile of the deformation")
    ap.add_argument("--report", metavar="JSON", help="print markdown rows of an existing report and exit")
    ap.add_argument("--install-bundle", nargs="+", metavar="DIR", help="install missing bundle wheels and exit")
    ap.add_argument("--check-bundle", nargs="+", metavar="DIR", help="list bundle wheels and sizes and exit")
    ap.add_argument("--target", default=default_site(),
                    help="--install-bundle's pip --target (default $SITE, else site/ in the temporary folder)")
    ap.add_argument("--dry-run", action="store_true", help="--install-bundle: say what would be installed")
    ap.add_argument("--install-prebuilt", nargs="?", const=PREBUILT_DIR, metavar="DIR",
                    help=f"copy a matching prebuilt gsplat extension from DIR ({PREBUILT_DIR}) into gsplat, exit")
    ap.add_argument("--prebuild-gsplat", metavar="OUT_DIR",
                    help="compile gsplat's CUDA extension ahead of time into OUT_DIR and exit (needs --torch-dir, "
                         "--python-include, --cuda-home)")
    ap.add_argument("--torch-dir", help="--prebuild-gsplat: the torch/ folder of the target machine's torch wheel")
    ap.add_argument("--python-include", help="--prebuild-gsplat: the target Python's include folder (Python.h)")
    ap.add_argument("--cuda-home", default=default_cuda_home(),
                    help="--prebuild-gsplat: CUDA toolkit (default $CUDA_HOME, else the folder above nvcc's bin/)")
    ap.add_argument("--arch", default="9.0", help="--prebuild-gsplat: compute capability (9.0)")
    ap.add_argument("--jobs", type=int, default=None, help="--prebuild-gsplat: parallel compile jobs")
    ap.add_argument("--_step", help=argparse.SUPPRESS)
    ap.add_argument("--_result", help=argparse.SUPPRESS)
    ap.add_argument("--_context", help=argparse.SUPPRESS)
    return ap


def passthrough(args) -> List[str]:
    """The measurement options, forwarded to the step subprocesses."""
    out = ["--n", str(args.n), "--size", str(args.size), "--reps", str(args.reps), "--viewer-seconds",
           str(args.viewer_seconds), "--device", args.device]
    if args.scenes:
        out += ["--scenes", args.scenes]
    if args.no_compile:
        out.append("--no-compile")
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args._step:
        return step_main(args._step, args._result, json.loads(args._context or "{}"), args)
    if args.report:
        print(markdown_rows(json.loads(Path(args.report).read_text(encoding="utf-8"))))
        return 0
    if args.check_bundle:
        return check_bundle(args.check_bundle)
    if args.install_bundle:
        return install_bundle(args.install_bundle, args.target, args.dry_run)
    if args.install_prebuilt:
        return install_prebuilt(args.install_prebuilt)
    if args.prebuild_gsplat:
        if not (args.torch_dir and args.python_include and args.cuda_home):
            print("gpu_check: --prebuild-gsplat needs --torch-dir, --python-include and --cuda-home (or CUDA_HOME, "
                  "or nvcc on the PATH)", file=sys.stderr)
            return 3
        m = re.search(r"python(\d)\.(\d+)", args.python_include)
        py = (int(m.group(1)), int(m.group(2))) if m else (3, 12)
        out = prebuild_gsplat(args.torch_dir, args.python_include, args.cuda_home, args.prebuild_gsplat, args.arch,
                              args.jobs, py)
        print(f"gpu_check: wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")
        return 0
    if args.n < 1 or args.size < 8 or args.reps < 1 or args.budget <= 0:
        print("gpu_check: --n, --reps must be >= 1, --size >= 8, --budget > 0", file=sys.stderr)
        return 3
    try:
        parse_steps(args.steps)
    except ValueError as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 3
    args.passthrough = passthrough(args)
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
