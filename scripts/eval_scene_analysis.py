"""Measure the scene analysis on captures with a known answer: generated hard captures and a corpus of real ones.

    python scripts/eval_scene_analysis.py --generated 50 [--first-seed 0]
    python scripts/eval_scene_analysis.py --corpus corpus/captures/manifest.json
    python scripts/eval_scene_analysis.py --generated 50 --json out/sa_eval.json

For each capture the analysis that ``animate`` runs (:func:`physskin_gs.pipeline.analyze_for_animation`) is scored:

* ``up_err``: degrees between the analysis' up and the true up (generated: exact; corpus: the manifest's axis);
* ``source``: where the up came from (support plane, file / format prior) and whether the analysis said it is
  unsure;
* generated captures only: ``obj_recall`` (fraction of the true objects' rows that move: the object's rows and
  those of the other bodies that ``--select auto`` moves with it, :attr:`SceneAnalysis.other_bodies`),
  ``obj_precision`` (fraction of the moving rows that are truly object), ``support_static`` (fraction of the true
  support and background rows that stay static).

The summary gives the fraction of captures with the up within 5 degrees, the unsure ones, and the object scores.
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


def _generator():
    spec = importlib.util.spec_from_file_location("make_hard_captures", REPO / "scripts" / "make_hard_captures.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_hard_captures"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _axis(text) -> np.ndarray:
    if isinstance(text, (list, tuple)):
        v = np.asarray(text, float)
    else:
        t = str(text).strip().lower().split()[0]  # "+z (about; ...)": the axis comes first
        sign = -1.0 if t.startswith("-") else 1.0
        v = np.zeros(3)
        v["xyz".index(t.lstrip("+-"))] = sign
    return v / np.linalg.norm(v)


def _angle(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    c = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    return math.degrees(math.acos(max(-1.0, min(1.0, c))))


def score(scene, up_true, truth_masks=None) -> dict:
    """The scores of one capture (module docstring) as a JSON-ready dict."""
    from physskin_gs.pipeline import analyze_for_animation

    t0 = time.perf_counter()
    a = analyze_for_animation(scene)
    row = {"up_err": _angle(a.up, up_true), "source": a.up_source, "unsure": bool(getattr(a, "unsure", False)),
           "reason": a.reason, "seconds": round(time.perf_counter() - t0, 3), "counts": a.counts}
    if truth_masks is not None:
        obj = np.asarray(a.object).copy()
        for rows, _ in a.other_bodies:  # the other objects on the support move too (issue 24)
            obj[rows] = True
        true_obj = truth_masks["object"]
        static = truth_masks["support"] | truth_masks["background"]
        row["obj_recall"] = float(obj[true_obj].mean()) if true_obj.any() else float("nan")
        row["obj_precision"] = float(true_obj[obj].mean()) if obj.any() else 0.0
        row["support_static"] = float((~obj[static]).mean()) if static.any() else 1.0
    return row


def summarise(rows) -> dict:
    n = len(rows)
    ok = [r["up_err"] <= 5.0 for r in rows]
    out = {"captures": n, "up_within_5deg": sum(ok) / max(1, n),
           "up_off_and_unsure": sum(1 for r, g in zip(rows, ok) if not g and r["unsure"]) / max(1, n),
           "up_off_silent": sum(1 for r, g in zip(rows, ok) if not g and not r["unsure"]) / max(1, n),
           "unsure": sum(r["unsure"] for r in rows) / max(1, n),
           "support_plane": sum(r["source"] == "support-plane" for r in rows) / max(1, n),
           "seconds_max": max((r["seconds"] for r in rows), default=0.0)}
    for k in ("obj_recall", "obj_precision", "support_static"):
        v = [r[k] for r in rows if k in r and math.isfinite(r[k])]
        if v:
            out[k + "_mean"] = float(np.mean(v))
            out[k + "_min"] = float(np.min(v))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--generated", type=int, default=0, help="score this many generated hard captures")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--corpus", help="manifest.json of real captures (file, up_axis; files beside it)")
    ap.add_argument("--json", help="write every row and the summary here")
    args = ap.parse_args(argv)
    results = {}
    if args.generated:
        gen = _generator()
        rows = []
        for seed in range(args.first_seed, args.first_seed + args.generated):
            cap = gen.make_hard_capture(seed)
            masks = {k: cap.mask(k) for k in ("object", "support", "background")}
            r = score(cap.scene, cap.up, masks)
            r.update(name=f"hard_{seed:04d}", draws=cap.draws)
            rows.append(r)
            print(f"hard_{seed:04d}: up err {r['up_err']:6.2f} deg ({r['source']}{', unsure' if r['unsure'] else ''})"
                  f" obj recall {r['obj_recall']:.3f} precision {r['obj_precision']:.3f} static "
                  f"{r['support_static']:.3f}  {cap.draws['kinds']} ratio {cap.draws['support_ratio']:.2f} "
                  f"cut {cap.draws['cut_edges']} {cap.draws['frame']}", flush=True)
        results["generated"] = {"rows": rows, "summary": summarise(rows)}
    if args.corpus:
        from physskin_gs.io import load_scene

        man = Path(args.corpus)
        rows = []
        for e in json.loads(man.read_text()):
            path = man.parent / e["file"]
            if not path.is_file() or str(e.get("up_axis", "unsure")).startswith("unsure"):
                continue
            scene = load_scene(str(path))
            r = score(scene, _axis(e["up_axis"]))
            r.update(name=e["file"])
            rows.append(r)
            print(f"{e['file']}: up err {r['up_err']:6.2f} deg ({r['source']}{', unsure' if r['unsure'] else ''}) "
                  f"object {r['counts'].get('object')} support {r['counts'].get('support')}  {r['reason'][:120]}",
                  flush=True)
        results["corpus"] = {"rows": rows, "summary": summarise(rows)}
    for k, v in results.items():
        print(f"{k}: " + ", ".join(f"{a} {b:.3f}" if isinstance(b, float) else f"{a} {b}"
                                   for a, b in v["summary"].items()))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
