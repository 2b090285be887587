#!/usr/bin/env bash
# One-command GPU training of the skinning network, for a CUDA machine WITHOUT network access.
#
#   On this (CPU) machine, once:   bash scripts/train_gpu.sh prepare
#       writes gpu_bundle/ (ignored by git): the training shapes as sample files (no mesh libraries needed),
#       the held-out evaluation meshes, and Python wheels the CUDA image lacks (trimesh, tetgen, plyfile,
#       conflictfree, manifold3d, libigl; for CPython 3.12, manylinux x86-64).
#   On the CUDA machine:            bash scripts/train_gpu.sh run [MINUTES] [OUT]
#       installs the wheels into /tmp/site, trains for MINUTES (default 8) on the GPU from
#       data/physskin_m16.safetensors with the eigen-subspace recipe of docs/training.md, then evaluates the
#       result against the FEM reference on the held-out meshes. Everything lands in OUT (default
#       ${OUT:-runs/gpu}): model.safetensors, metrics.jsonl, config.json, eval_fem.json, eval_fem.txt, log.txt.
#   Test on a CPU machine with a tiny budget:  DEVICE=cpu STEPS=20 bash scripts/train_gpu.sh run 0.3 runs/gpu_smoke
#
# Environment overrides: DEVICE (auto), STEPS (schedule length, default 200000: the time budget ends the run),
# PY (python3), EXTRA (more `physskin-gs train` options).
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=gpu_bundle
PY=${PY:-python3}

prepare() {
  . .venv/bin/activate
  mkdir -p "$BUNDLE/held_out" "$BUNDLE/wheels"
  physskin-gs train --out "$BUNDLE/tmp_run" --force --export-samples "$BUNDLE/shapes"
  rm -rf "$BUNDLE/tmp_run"
  shared="${PHYSSKIN_SHARED_DATA:-../shared/data}"
  for m in c3d_spot.obj pyvista_ant.ply pybullet_torus.obj kaolin_beam_surf.obj robosuite_lemon.stl; do
    [ -f "$shared/meshes/$m" ] && cp "$shared/meshes/$m" "$BUNDLE/held_out/"
  done
  for pkg in trimesh tetgen plyfile conflictfree manifold3d libigl; do
    ver=$(python -c "import importlib.metadata as m; print(m.version('$pkg'))")
    python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any \
      -d "$BUNDLE/wheels" "$pkg==$ver"
  done
  du -sh "$BUNDLE"
  echo "bundle ready: carry '$BUNDLE' and run: bash scripts/train_gpu.sh run MINUTES"
}

run() {
  minutes=${1:-8}
  out=${2:-${OUT:-runs/gpu}}
  if [ -d "$BUNDLE/wheels" ] && ls "$BUNDLE"/wheels/*.whl >/dev/null 2>&1 && [ -z "${VIRTUAL_ENV:-}" ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      "$BUNDLE"/wheels/*.whl
    export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
  fi
  export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
  if [ -e "$out/model.safetensors" ]; then echo "error: $out holds a run (remove it or pass another OUT)" >&2; exit 2; fi
  mkdir -p "$out"
  samples=()
  [ -d "$BUNDLE/shapes" ] && samples=(--samples "$BUNDLE/shapes")
  "$PY" -m physskin_gs train --out "$out" --device "${DEVICE:-auto}" "${samples[@]}" \
    --init data/physskin_m16.safetensors --steps "${STEPS:-200000}" --max-minutes "$minutes" \
    --combine sum --w-sub 1e6 --w-pot 0.1 --w-orth 1e6 --w-smooth 100 --orth-only-frac 0 \
    --lr 3e-4 --lr-min 3e-5 --cubature 1000 --transforms 128 --log-every 50 --val-every 0 --ckpt-every 60 \
    ${EXTRA:-} 2>&1 | tr '\r' '\n' | grep -v "^train: " | tee "$out/log.txt"
  data=()
  [ -d "$BUNDLE/held_out" ] && data=(--data "$BUNDLE/held_out")
  OPENBLAS_NUM_THREADS=1 "$PY" -m physskin_gs evaluate --reference fem "${data[@]}" --bases eigen,network,rbf \
    --checkpoint "$out/model.safetensors" --fit-seconds 0 --json "$out/eval_fem.json" 2>&1 | tee "$out/eval_fem.txt"
}

case "${1:-}" in
  prepare) prepare ;;
  run) shift; run "$@" ;;
  *) echo "usage: bash scripts/train_gpu.sh prepare | run [MINUTES] [OUT]" >&2; exit 2 ;;
esac
