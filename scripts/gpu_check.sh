#!/usr/bin/env bash
# The GPU path in one call (issue #13 item 6): gsplat's kernels, gsplat vs our torch rasteriser, 1M Gaussians at
# 1080p, deformation of 1M Gaussians on the GPU, and the viewer's server-side gsplat mode, on a CUDA machine
# WITHOUT network access. The measurements are scripts/gpu_check.py's (its docstring lists the steps).
#
#   On this (CPU) machine, once:   bash scripts/gpu_check.sh prepare
#       adds to gpu_bundle/ (ignored by git) the wheels the CUDA image lacks, for CPython 3.12 manylinux x86-64,
#       at this venv's versions: gpu_bundle/wheels/ (gsplat, viser, msgspec, websockets, zstandard, plyfile,
#       trimesh; shared with scripts/train_gpu.sh, whose run installs every wheel there) and
#       gpu_bundle/wheels_fallback/ (what the image is recorded to have: ninja, jaxtyping, rich, imageio, pillow,
#       einops, safetensors, requests, ...; installed only where missing). imageio-ffmpeg is left out (no step
#       writes video). Prints the sizes.
#   Optionally, once (slow: ~530 MB download, then gsplat's 30 sources compiled on this machine's cores):
#                                   bash scripts/gpu_check.sh prebuild
#       compiles gsplat's CUDA extension ahead of time for the CUDA image as recorded (torch 2.11.0+cu130,
#       Python 3.12, sm_90) into gpu_bundle/prebuilt/ (needs nvcc 13 and Python 3.12 headers here; settings:
#       TORCH_VERSION, PY312_INCLUDE, CUDA_HOME, ARCH). The run installs it only where gsplat, torch, Python and
#       the GPU match exactly; anywhere else gsplat JIT-compiles (and if the prebuilt one fails, the run deletes
#       it and retries with the JIT build).
#   On the CUDA machine:            bash scripts/gpu_check.sh run [OUT] [gpu_check.py options]
#       installs the bundle into $SITE (default ${TMPDIR:-/tmp}/site) where `import torch, gsplat, viser, ...`
#       fails, then runs scripts/gpu_check.py --out OUT/gpu_check.json. Writes OUT/gpu_check.json (every step's
#       numbers, timings and errors, rewritten after each step), OUT/gpu_check.log (every step's output, gsplat's
#       build included) and OUT/compare_<scene>.png (torch | gsplat | 10 x |difference|). OUT defaults to
#       ${OUT:-runs/gpu_check}.
#       Exit status: 0 all ok, 1 a step failed, 2 no CUDA device (only the environment is measured), 3 bad options.
#       Takes about 3 minutes plus gsplat's JIT build (none with a matching prebuilt extension); --budget (500 s)
#       caps it. TORCH_CUDA_ARCH_LIST and MAX_JOBS default to the GPU's compute capability (9.0 on an H200) and
#       the CPU count (16).
#   README's table:                 python scripts/gpu_check.py --report OUT/gpu_check.json
#
# With the device tool: carry gpu_bundle/wheels, gpu_bundle/wheels_fallback (and gpu_bundle/prebuilt), and run
#   bash scripts/gpu_check.sh run $OUT
# On a CPU machine `bash scripts/gpu_check.sh run /tmp/x` stops after the environment step with exit status 2 and
# "no CUDA device" (the JSON still holds the environment facts).
#
# Environment overrides: PY (python3), SITE (default ${TMPDIR:-/tmp}/site).
set -uo pipefail
cd "$(dirname "$0")/.."
BUNDLE=gpu_bundle
PY=${PY:-python3}
SITE=${SITE:-${TMPDIR:-/tmp}/site}
# what the CUDA image lacks (its package list, KINDS.md of the device tool, 2026-11) ...
MAIN_PKGS="gsplat viser msgspec websockets zstandard plyfile trimesh"
# ... and what it is recorded to have (bundled in case; installed only where missing)
FALLBACK_PKGS="ninja jaxtyping wadler_lindig rich markdown-it-py mdurl pygments einops safetensors packaging
typing_extensions tqdm requests idna urllib3 certifi charset-normalizer imageio pillow"
IMPORTS="import torch, numpy, gsplat, viser, plyfile, websockets, msgspec, zstandard, imageio, PIL, jaxtyping, rich"

download() {  # download DIR PKG...: each PKG at this venv's version, replacing other versions in DIR
  local dir=$1 pkg ver norm
  shift
  mkdir -p "$dir"
  for pkg in "$@"; do
    ver=$(python -c "import importlib.metadata as m; print(m.version('$pkg'))") || return 1
    norm=$(echo "$pkg" | tr 'A-Z-.' 'a-z__')
    for f in "$dir/$norm"-*.whl; do
      [ -e "$f" ] && [[ "$(basename "$f")" != "$norm-$ver-"* ]] && rm -f "$f"
    done
    python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
      --platform any -d "$dir" "$pkg==$ver" 2>&1 | grep -v "^WARNING: Location" || true
    ls "$dir/$norm-$ver-"*.whl >/dev/null 2>&1 || { echo "error: no wheel for $pkg==$ver in $dir" >&2; return 1; }
  done
}

prepare() {
  . .venv/bin/activate
  download "$BUNDLE/wheels" $MAIN_PKGS || exit 1
  download "$BUNDLE/wheels_fallback" $FALLBACK_PKGS || exit 1
  python scripts/gpu_check.py --check-bundle "$BUNDLE/wheels" "$BUNDLE/wheels_fallback" || exit 1
  [ -d "$BUNDLE/prebuilt" ] && ls -la "$BUNDLE/prebuilt"/*.so* 2>/dev/null
  du -sh "$BUNDLE/wheels" "$BUNDLE/wheels_fallback" "$BUNDLE/prebuilt" 2>/dev/null
  echo "bundle ready: carry $BUNDLE/wheels $BUNDLE/wheels_fallback (and $BUNDLE/prebuilt) and run:" \
       "bash scripts/gpu_check.sh run OUT"
}

prebuild() {
  . .venv/bin/activate
  local tv=${TORCH_VERSION:-2.11.0} inc=${PY312_INCLUDE:-} cuda=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc || echo /nonexistent/bin/nvcc)")")} arch=${ARCH:-9.0}
  local tmp=${PREBUILD_TMP:-${TMPDIR:-/tmp}/gpu_check_prebuild}
  if [ -z "$inc" ]; then
    inc=$(ls -d "$HOME"/.pyenv/versions/3.12*/include/python3.12 /usr/include/python3.12 2>/dev/null | head -1)
  fi
  [ -f "$inc/Python.h" ] || { echo "error: no Python 3.12 headers (set PY312_INCLUDE)" >&2; exit 1; }
  [ -x "$cuda/bin/nvcc" ] || { echo "error: no nvcc in $cuda/bin (set CUDA_HOME)" >&2; exit 1; }
  mkdir -p "$tmp" "$BUNDLE/prebuilt"
  python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 -d "$tmp" "torch==$tv" 2>&1 | grep -v "^WARNING: Location"
  local whl
  whl=$(ls "$tmp"/torch-"$tv"-cp312-*.whl | head -1)
  [ -f "$tmp/tree/torch/version.py" ] || (cd "$tmp" && mkdir -p tree && cd tree &&
    unzip -q -o "$whl" 'torch/include/*' 'torch/lib/*' 'torch/version.py') || exit 1
  python scripts/gpu_check.py --prebuild-gsplat "$tmp" --torch-dir "$tmp/tree/torch" --python-include "$inc" \
    --cuda-home "$cuda" --arch "$arch" || exit 1
  for so in "$tmp"/gsplat-*.csrc.so; do
    xz -T0 -6 -c "$so" > "$BUNDLE/prebuilt/$(basename "$so").xz"
  done
  ls -la "$BUNDLE/prebuilt"
}

run() {
  local out=${1:-${OUT:-runs/gpu_check}}
  [ $# -gt 0 ] && shift
  mkdir -p "$out"
  export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH" PYTHONUNBUFFERED=1
  if ! "$PY" -c "$IMPORTS" >/dev/null 2>&1; then
    echo "[gpu_check.sh] some imports fail: installing the bundle into $SITE"
    "$PY" scripts/gpu_check.py --install-bundle "$BUNDLE/wheels" "$BUNDLE/wheels_fallback" --target "$SITE" ||
      echo "[gpu_check.sh] warning: the bundle install failed (the steps report what is missing)" >&2
    "$PY" -c "$IMPORTS" 2>&1 | tail -1
  fi
  if [ -d "$BUNDLE/prebuilt" ]; then
    "$PY" scripts/gpu_check.py --install-prebuilt "$BUNDLE/prebuilt" 2>&1 | tail -3
  fi
  "$PY" scripts/gpu_check.py --out "$out/gpu_check.json" "$@"
}

case "${1:-}" in
  prepare) prepare ;;
  prebuild) prebuild ;;
  run) shift; run "$@" ;;
  *) echo "usage: bash scripts/gpu_check.sh prepare | prebuild | run [OUT] [gpu_check.py options]" >&2; exit 2 ;;
esac
