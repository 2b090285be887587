#!/usr/bin/env python
"""Several bodies in contact (issue 24): the step time of 1, 2 and 4 bodies stepped together with penalty contact
(``physskin_gs.physics.contact.BodyContactSystem``), against one body's own step (``SubspaceSimulator.step``), run
in the same process.

Each body: a 0.2 m cube of 10 x 10 x 10 = 1000 cubature points, 16 RBF handles + the constant one (17 handles,
204 unknowns, as the default animation), E 1e5 Pa, nu 0.3, 500 kg/m^3, dt 0.02 s, gravity, a floor. Scenes:
one cube on the floor; two cubes stacked; four cubes (two stacks of two side by side, touching). Every scene is
first settled for ``--settle`` steps (so the contacts are the resting ones), then ``--steps`` steps are timed.
Targets (issue 24): two bodies <= 2.5x one body's step, four <= 5x (2 cores).

Usage:
  python scripts/bench_contact.py [--steps 100] [--rounds 5] [--settle 60] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np  # noqa: E402
import torch  # noqa: E402

SIZE, N = 0.2, 10


def cube(center, seed):
    from physskin_gs.model.field import RBFSkinningField
    from physskin_gs.physics.simulator import SubspaceSimulator

    s = SIZE / N
    g = (np.arange(N) + 0.5) * s - SIZE / 2
    X = torch.from_numpy(np.stack(np.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3) + np.asarray(center)).float()
    gen = torch.Generator().manual_seed(seed)
    cen = X[torch.randperm(X.shape[0], generator=gen)[:16]]
    W, dW = RBFSkinningField(cen, SIZE * 0.35).weights_and_grads(X)  # 16 bumps + the constant handle
    return SubspaceSimulator(X, W, dW, SIZE ** 3, E=1e5, nu=0.3, density=500.0, dt=0.02, up=(0, 0, 1),
                             floor_height=0.0, damping=0.05, friction=40.0)


def scene(k: int):
    h = SIZE / 2 + 0.0005
    layouts = {1: [(0, 0, h)], 2: [(0, 0, h), (0.01, 0, h + SIZE + 0.02)],
               4: [(0, 0, h), (0.01, 0, h + SIZE + 0.02), (SIZE + 0.012, 0, h), (SIZE + 0.02, 0, h + SIZE + 0.02)]}
    return [cube(c, seed=i) for i, c in enumerate(layouts[k])]


def timed(fn, steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - t0) / steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--settle", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (median reported)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the simulation uses 1 in the app)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from physskin_gs.physics.contact import BodyContactSystem

    one = scene(1)[0]
    one.step(args.settle)
    systems = {}
    for k in (1, 2, 4):
        systems[k] = BodyContactSystem(scene(k))
        systems[k].step(args.settle)
    # interleaved rounds, the median of each scene's per-round mean: a burst of noise from elsewhere on the machine
    # lands in one round of every scene instead of in one scene's whole run
    rounds = {0: [], 1: [], 2: [], 4: []}
    stats = {1: [], 2: [], 4: []}
    per_round = max(1, args.steps // args.rounds)
    for _ in range(args.rounds):
        rounds[0].append(timed(lambda: one.step(), per_round))
        for k, sysm in systems.items():
            rounds[k].append(timed(lambda: stats[k].append(sysm.step()), per_round))
    t_base = float(np.median(rounds[0]))
    rows = [("baseline: one body alone (SubspaceSimulator.step)", t_base, "", "")]
    for k in (1, 2, 4):
        st = stats[k]
        pairs = np.mean([s.pairs_body for s in st])
        floor = f"{max(s.max_overlap for s in st) * 1e3:.2f}"
        rows.append((f"{k} bod{'y' if k == 1 else 'ies'} stepped together (BodyContactSystem.step)",
                     float(np.median(rounds[k])), f"{pairs:.0f}", floor))
    print(f"# Contact benchmark: 0.2 m cubes of 1000 cubature points, 17 handles each, dt 0.02 s, torch threads "
          f"{args.threads}, {os.cpu_count()} cores, {args.steps} timed steps "
          f"in {args.rounds} interleaved rounds (median) after {args.settle} settling ones")
    print()
    print("| scene | ms / step | ratio to one body alone | body-body contact pairs | deepest overlap (mm) |")
    print("|---|---|---|---|---|")
    for label, t, pairs, ov in rows:
        print(f"| {label} | {1e3 * t:.2f} | {t / t_base:.2f} | {pairs} | {ov} |")
    r2, r4 = rows[2][1] / t_base, rows[3][1] / t_base
    print()
    print(f"targets: two bodies <= 2.5x: {'PASS' if r2 <= 2.5 else 'FAIL'} ({r2:.2f}x); four bodies <= 5x: "
          f"{'PASS' if r4 <= 5.0 else 'FAIL'} ({r4:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
