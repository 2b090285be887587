"""Feed-forward skinning speed: weights (and dW/dX) at N points for one object, vs an analytic RBF field.

Usage: .venv/bin/python scripts/bench_skinning.py [--points 100000] [--threads 2] [--checkpoint CKPT]
Prints a table of seconds and the ratio to the RBF baseline run in the same process. Target (issue 3):
feed-forward skinning of 100k points <= 2 s on 2 cores.
"""

import argparse
import time
from pathlib import Path

from physskin_gs._runtime import application_threads

application_threads()  # as the CLI does: thread settings before torch and numpy load

import torch

from physskin_gs.model import PhysSkinNet, RBFSkinningField, default_checkpoint_path, load_checkpoint, skinning_from_model


def timed(f, repeat=2):
    f()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=100_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--checkpoint", default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    ck = a.checkpoint or default_checkpoint_path()
    model = load_checkpoint(ck) if Path(ck).is_file() else PhysSkinNet().eval()
    g = torch.Generator().manual_seed(0)
    surface = torch.rand(2048, 3, generator=g) * 2 - 1
    X = torch.rand(a.points, 3, generator=g) * 2 - 1
    rbf = RBFSkinningField(torch.rand(model.num_handles, 3, generator=g) * 2 - 1, 0.4)
    rows = []
    t_rbf = timed(lambda: rbf.weights_and_grads(X))
    rows.append(("RBF weights+grads (baseline)", t_rbf))
    t_setup = timed(lambda: skinning_from_model(model, surface, X[:16384]))
    rows.append(("network encode + norms (16k ref)", t_setup))
    field = skinning_from_model(model, surface, X[:16384])
    rows.append(("network weights", timed(lambda: field.weights(X))))
    rows.append(("network weights+grads (FD)", timed(lambda: field.weights_and_grads(X), repeat=1)))
    print(f"{a.points} points, {torch.get_num_threads()} threads, checkpoint: {ck}")
    print(f"{'case':36s} {'seconds':>9s} {'x RBF':>8s}")
    for name, t in rows:
        print(f"{name:36s} {t:9.3f} {t / t_rbf:8.1f}")


if __name__ == "__main__":
    main()
