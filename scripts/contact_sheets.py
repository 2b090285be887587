"""Contact sheets of real captures animated with no options, and whether the object comes to rest on its support.

    python scripts/contact_sheets.py corpus/captures/manifest.json --out docs/captures [--json out/sheets.json]
    python scripts/contact_sheets.py corpus/captures/manifest.json --only tarot --out /tmp/sheets

For each capture of the manifest (a JSON list of entries with ``file`` (beside the manifest, or ``--root``) and
``up_axis`` as in ``docs/captures.md``), exactly what ``physskin-gs animate CAPTURE --headless --frames 60 --png DIR``
does with no other option (the same argument parser, :func:`physskin_gs.pipeline.prepare_animation`, the headless
video's orbit camera), writes ``OUT/NAME.png``: frames 1, 20 and 60 side by side under the analysis line. It also
measures:

* ``up_err``: degrees between the analysis' up and the manifest's (when known);
* ``moving`` / ``static``: rows that move and rows that stay (support, background, floaters);
* ``rest``: the moving rows' lowest point (0.5 % height quantile) after the last frame, above (+) or below (-) the
  floor the simulation uses (the support plane when one is found), as a fraction of the object's rest height
  (target: within +-2 %);
* ``static_still``: whether every static row is exactly where it was.

Prints one line per capture and a Markdown table for ``docs/captures.md``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _eval_helpers():
    spec = importlib.util.spec_from_file_location("eval_scene_analysis", REPO / "scripts" / "eval_scene_analysis.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _label(img: np.ndarray, text: str, height: int = 30) -> np.ndarray:
    """The image with a strip of text above it (PIL's default font)."""
    from PIL import Image, ImageDraw

    w = img.shape[1]
    strip = Image.new("RGB", (w, height), (255, 255, 255))
    draw = ImageDraw.Draw(strip)
    lines, line = [], ""
    for word in text.split():
        if draw.textlength(line + " " + word) > w - 8 and line:
            lines.append(line)
            line = word
        else:
            line = (line + " " + word).strip()
    lines.append(line)
    draw.multiline_text((4, 2), "\n".join(lines[:2]), fill=(0, 0, 0), spacing=2)
    return np.concatenate([np.asarray(strip), img], axis=0)


def sheet(path: Path, out: Path, frames: int = 60, size: int = 192, picks=(1, 20, 60), up_true=None) -> dict:
    """Animate ``path`` with the CLI's defaults, write the contact sheet to ``out`` and return the measurements
    (module docstring) as a JSON-ready dict."""
    import imageio.v2 as imageio
    import torch

    from physskin_gs.cli import build_parser
    from physskin_gs.cli.animate import OrbitVideo, config_from_args
    from physskin_gs.io import load_scene
    from physskin_gs.pipeline import prepare_animation, stiffen_to_stand

    args = build_parser().parse_args(["animate", str(path), "--headless", "--frames", str(frames), "--png", "x",
                                      "--width", str(size), "--height", str(size)])
    t0 = time.perf_counter()
    scene = load_scene(str(path))
    config = config_from_args(args)
    anim = prepare_animation(scene, config)
    if config.stand_sag:  # the default material, stiffened until the object stands (as prepare_bodies does)
        stiffen_to_stand(anim, config.stand_sag)
    prep = time.perf_counter() - t0
    sa = anim.info.get("scene_analysis") or {}
    up = anim.up_vector.double()
    video = OrbitVideo(anim, size, size, frames, args.orbit)
    rest_means = anim.scene.means.double()
    moving = anim.moving
    h0 = rest_means[moving] @ up
    height = float(torch.quantile(h0, 0.995) - torch.quantile(h0, 0.005)) if moving.any() else float("nan")
    imgs = []
    t1 = time.perf_counter()
    for f in range(1, frames + 1):
        if f > 1:
            anim.step(args.steps_per_frame)
        if f in picks:
            imgs.append(video.render(f - 1))
    sim = time.perf_counter() - t1
    ds = anim.deformed_scene()
    now = ds.means.double()
    floor = anim.floor_scene
    rest = float("nan")
    if moving.any() and floor is not None and height > 0:
        low = float(torch.quantile(now[moving] @ up, 0.005))
        rest = (low - floor) / height
    still = bool(torch.equal(now[~moving], rest_means[~moving])) if (~moving).any() else True
    row = {"file": path.name, "up": [float(v) for v in up], "up_source": sa.get("up_source"),
           "unsure": bool(sa.get("unsure")), "reason": sa.get("reason", ""),
           "moving": int(moving.sum()), "static": int((~moving).sum()), "support": (sa.get("counts") or {}).get(
               "support"), "rest": rest, "static_still": still, "prepare_s": round(prep, 2),
           "sim_render_s": round(sim, 1), "E": float(anim.sim.E)}
    if up_true is not None:
        c = float(np.clip(np.dot(row["up"], up_true) / np.linalg.norm(up_true), -1.0, 1.0))
        row["up_err"] = math.degrees(math.acos(c))
    line = (f"{path.name}: up {row.get('up_err', float('nan')):.1f} deg off ({row['up_source']}"
            f"{', unsure' if row['unsure'] else ''}), moving {row['moving']}, static {row['static']}, "
            f"rest {100 * rest:+.1f}% of height")
    img = np.concatenate(imgs, axis=1)
    img = _label(img, line)
    out.parent.mkdir(parents=True, exist_ok=True)
    imageio.imwrite(out, img)
    row["sheet"] = str(out)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifest", help="manifest.json (file, up_axis; files beside it or under --root)")
    ap.add_argument("--root", help="folder of the files (default: the manifest's)")
    ap.add_argument("--out", required=True, help="folder for the contact sheets (NAME.png)")
    ap.add_argument("--only", help="only captures whose file name contains this")
    ap.add_argument("--frames", type=int, default=60)
    ap.add_argument("--size", type=int, default=192, help="frame size in pixels (a multiple of 16)")
    ap.add_argument("--json", help="write every row here")
    args = ap.parse_args(argv)
    man = Path(args.manifest)
    root = Path(args.root) if args.root else man.parent
    ev = _eval_helpers()
    rows = []
    for e in json.loads(man.read_text()):
        if args.only and args.only not in e["file"]:
            continue
        path = root / e["file"]
        if not path.is_file():
            print(f"{e['file']}: missing, skipped", flush=True)
            continue
        truth = str(e.get("up_axis", "unsure"))
        up_true = None if truth.startswith("unsure") else ev._axis(truth)
        name = path.name.split(".")[0]
        r = sheet(path, Path(args.out) / f"{name}.png", args.frames, args.size, up_true=up_true)
        rows.append(r)
        print(f"{r['file']}: up err {r.get('up_err', float('nan')):.1f} ({r['up_source']}"
              f"{', unsure' if r['unsure'] else ''}) moving {r['moving']} static {r['static']} rest "
              f"{100 * r['rest']:+.1f}% still {r['static_still']} ({r['prepare_s']} s + {r['sim_render_s']} s)",
              flush=True)
    print("\n| capture | up error (deg) | source | moving / static | lowest point after 60 frames (% of height) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| `{r['file']}` | {r.get('up_err', float('nan')):.1f} | {r['up_source']}"
              f"{' (unsure)' if r['unsure'] else ''} | {r['moving']} / {r['static']} | {100 * r['rest']:+.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
