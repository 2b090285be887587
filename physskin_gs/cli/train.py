"""``physskin-gs train``: self-supervised training of the PhysSkin network (method.md 6).

Writes into ``--out DIR``: ``model.safetensors`` (latest weights, a regular physskin_gs checkpoint),
``train_state.safetensors`` (Adam moments, RNG, step; for ``--resume``), ``config.json``, ``metrics.jsonl``
(one JSON object per logged step; ``"val"`` records hold held-out metrics) and ``snapshots/step_NNNNNN.safetensors``.
Runs unchanged under ``torchrun --nproc_per_node=K`` (gloo, CPU): every rank draws its own shape, the per-loss
gradients are averaged across ranks before the ConFIG combination, rank 0 writes the files.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Optional

from physskin_gs.cli._common import remember_defaults
from physskin_gs.cli._skinning import shared_data_dir
from physskin_gs.errors import OptionError


#: the schedule length of a new run without --steps
DEFAULT_STEPS = 4000


def held_out_names():
    """File stems of :data:`physskin_gs.geometry.dataset.HELD_OUT_MESHES` (kept out of training), a tuple of str."""
    from physskin_gs.geometry.dataset import HELD_OUT_MESHES
    from physskin_gs.model.data import _stem

    return tuple(_stem(n) for n in HELD_OUT_MESHES)


def default_data():
    """The shared training inputs, :func:`physskin_gs.geometry.dataset.default_training_paths` of
    ``$PHYSSKIN_SHARED_DATA`` (default ``../shared/data`` beside the repository), as a list of str. Raises OptionError when that folder is absent."""
    from physskin_gs.geometry.dataset import default_training_paths

    return [str(p) for p in default_training_paths(shared_data_dir(required=True))]


def register(sub) -> None:
    p = sub.add_parser("train", help="train the PhysSkin skinning network (self-supervised, CPU)")
    p.add_argument("--data", nargs="+", default=None, help="mesh/splat files or folders (default: the shared meshes and training splats)")
    p.add_argument("--procedural", type=int, default=64,
                   help="procedural training shapes added to the --data shapes (default 64; 0 for none)")
    p.add_argument("--synthetic", action="store_true", help="train on built-in synthetic shapes (tests, smoke runs)")
    p.add_argument("--samples", metavar="DIR", default=None,
                   help="train on the shape samples saved in DIR (*.safetensors from --export-samples) instead of "
                        "--data: no mesh files or mesh libraries needed (a GPU machine without network)")
    p.add_argument("--export-samples", metavar="DIR", default=None,
                   help="write the training shapes (after sampling) to DIR as *.safetensors and exit")
    p.add_argument("--out", default=None,
                   help="output folder (checkpoints, config.json, metrics.jsonl); not needed with --export-samples")
    p.add_argument("--steps", type=int, default=None,
                   help=f"schedule length T (steps; default {DEFAULT_STEPS}, or with --resume the run's own)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/model.safetensors + train_state")
    p.add_argument("--force", action="store_true", help="start a new run in an --out folder that holds one (replaces it)")
    p.add_argument("--init", metavar="CKPT", default=None,
                   help="start from this checkpoint's weights (its model configuration replaces the model options; "
                        "fresh optimiser and schedule), e.g. data/physskin_m16.safetensors")
    p.add_argument("--max-minutes", type=float, default=None, help="stop (and checkpoint) after this wall time")
    p.add_argument("--stop-after", type=int, default=None, help="stop (and checkpoint) after this many steps of this run")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="torch device: auto (cuda when available, else cpu), cpu, cuda, cuda:N")
    p.add_argument("--threads", type=int, default=None, help="torch threads per process (default 2 / world size)")
    p.add_argument("--ckpt-every", type=float, default=180.0, help="seconds between checkpoints")
    p.add_argument("--snapshot-every", type=int, default=2000, help="steps between kept snapshots")
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--val-every", type=float, default=300.0, help="seconds between held-out evaluations (0: off)")
    p.add_argument("--include-held-out", action="store_true", help="do not exclude HELD_OUT_MESHES")
    # model
    p.add_argument("--handles", type=int, default=16)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--latents", type=int, default=64)
    p.add_argument("--enc-layers", type=int, default=2)
    p.add_argument("--handle-tokens", type=int, default=32)
    p.add_argument("--n-freq", type=int, default=4)
    p.add_argument("--head-hidden", type=int, default=128)
    p.add_argument("--ff-mult", type=int, default=1, help="feed-forward width multiplier")
    p.add_argument("--no-oni", action="store_true")
    p.add_argument("--fd-scheme", choices=["forward", "central"], default="forward")
    # losses
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--lr-min", type=float, default=5e-5)
    p.add_argument("--cubature", type=int, default=500)
    p.add_argument("--transforms", type=int, default=64)
    p.add_argument("--sigma", type=float, default=0.02)
    p.add_argument("--surface-points", type=int, default=2048)
    p.add_argument("--no-smooth", action="store_true")
    p.add_argument("--combine", choices=["config", "sum"], default="sum",
                   help="sum: weighted sum (shipped recipe); config: ConFIG (conflictfree) combination")
    p.add_argument("--w-orth", type=float, default=1e6, help="orthogonality weight (--combine sum only)")
    p.add_argument("--w-smooth", type=float, default=100.0, help="smoothness weight (--combine sum only)")
    p.add_argument("--c-orth", type=float, default=1.0, help="ConFIG cosine weight of the orthogonality loss")
    p.add_argument("--c-smooth", type=float, default=1.0, help="ConFIG cosine weight of the smoothness loss")
    p.add_argument("--orth-only-frac", type=float, default=0.02)
    p.add_argument("--w-pot", type=float, default=1.0, help="potential-energy weight (--combine sum; 0 drops the loss)")
    p.add_argument("--w-sub", type=float, default=0.0,
                   help="weight of the subspace loss toward each training shape's eigen basis (0 = off); the "
                        "target is computed once per shape (cached under the user cache, "
                        "~/.cache/physskin_gs/targets or $PHYSSKIN_CACHE_DIR/targets) and augmentation is then "
                        "rotation only")
    p.add_argument("--c-sub", type=float, default=1.0, help="ConFIG cosine weight of the subspace loss")
    p.add_argument("--no-augment", action="store_true")
    p.set_defaults(func=run)
    remember_defaults(p)


def _val_shapes(args, names, log=print):
    """The held-out meshes (``names``) from the shared data's ``meshes/`` folder, for the ``"val"`` records; [] with
    a note through ``log`` when there are none to load (``--synthetic``, ``--include-held-out``, no shared data, a
    mesh that fails to load): the run then has no held-out evaluation, and says so."""
    from physskin_gs.model.data import load_shapes

    if args.synthetic or not names:
        why = "--synthetic" if args.synthetic else "--include-held-out trains on them"
        log(f"note: no held-out evaluation ({why}): metrics.jsonl gets no \"val\" records")
        return []
    from physskin_gs.model.data import _stem

    root = shared_data_dir() / "meshes"
    files = [q for q in root.iterdir() if _stem(q.name) in names] if root.is_dir() else []
    if not files:
        log(f"note: no held-out evaluation: none of the held-out meshes ({', '.join(names)}) is in {root} "
            "(set PHYSSKIN_SHARED_DATA): metrics.jsonl gets no \"val\" records")
        return []
    try:
        return load_shapes([str(f) for f in files], seed=1, log=lambda *_: None)
    except Exception as exc:  # noqa: BLE001 - the run goes on without them, and says so
        log(f"note: no held-out evaluation: the held-out meshes in {root} did not load ({exc}): metrics.jsonl gets "
            "no \"val\" records")
        return []


def export_samples(shapes, folder) -> None:
    """Write training shapes as shape-sample files (``NNN_name.safetensors``, see
    :func:`physskin_gs.geometry.dataset.save_sample`) into ``folder``, replacing the shape samples an earlier export
    left there (:func:`~physskin_gs.geometry.dataset.is_shape_sample`; every other file, a model checkpoint's
    ``*.safetensors`` included, is kept). The new set is written into a hidden folder inside ``folder`` first and
    moved up only when complete, so an interrupt or a failure leaves the earlier set as it was, never a mixture
    (``--samples`` trains on every shape sample it finds). Raises OSError, OptionError (a new sample's name is a
    file there that is not a shape sample)."""
    import shutil
    import tempfile

    from physskin_gs.geometry.dataset import ShapeSample, is_shape_sample, save_sample

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".physskin-samples-", dir=folder))
    try:
        names = []
        for i, s in enumerate(shapes):
            safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in s.name)
            names.append(f"{i:03d}_{safe}.safetensors")
            save_sample(ShapeSample(name=s.name, surface=s.surface.cpu(), volume=s.volume.cpu()), stage / names[-1])
        clash = [n for n in names if (folder / n).exists() and not is_shape_sample(folder / n)]
        if clash:
            raise OptionError(f"--export-samples {folder}: {clash[0]} is there and is not a shape sample; "
                              "choose another folder")
        for old in folder.glob("*.safetensors"):
            if is_shape_sample(old):
                old.unlink()
        for n in names:
            os.replace(stage / n, folder / n)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def load_sample_dir(folder, exclude=()):
    """Training shapes from the shape-sample files in ``folder`` (names in ``exclude`` skipped). Raises
    OptionError when the folder has none."""
    from physskin_gs.geometry.dataset import is_shape_sample, load_sample
    from physskin_gs.model.data import TrainShape, _stem

    folder = Path(folder)
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    other = [f for f in files if not is_shape_sample(f)]  # a model checkpoint beside the samples, say
    if other:
        print(f"note: --samples {folder}: skipping {len(other)} safetensors file{'s' if len(other) != 1 else ''} that "
              f"{'are' if len(other) != 1 else 'is'} not shape samples ({other[0].name}"
              f"{', ...' if len(other) > 1 else ''})", file=sys.stderr)
        files = [f for f in files if f not in other]
    excl = {_stem(e) for e in exclude}
    shapes = []
    for f in files:
        smp = load_sample(f)
        if _stem(smp.name) not in excl:
            shapes.append(TrainShape(str(smp.name), smp.surface.float(), smp.volume.float()))
    if not shapes:
        raise OptionError(f"--samples {folder}: no shape-sample files (*.safetensors) found")
    return shapes


def attach_eigen_target(shape, num_handles: int, cache_dir: Optional[str] = None, log=print):
    """The shape with ``target`` = its eigen skinning basis (V, m+1) at its volume points (the label-free subspace
    target of ``--w-sub``), computed with :func:`physskin_gs.model.eigen.build_eigen_field` and cached on disk by
    a hash of the points (safetensors). ``shape.volume`` (V, 3) float32 on the CPU, normalised frame; the target
    is (V, H) float32 with H <= num_handles + 1 (fewer when that count would split a cluster of equal eigenvalues,
    :func:`physskin_gs.model.eigen.cluster_cutoff`; the subspace loss takes any width). Raises ValueError (from
    the eigen build) for too few or non-finite points."""
    import hashlib
    from dataclasses import replace

    from safetensors.torch import load_file, save_file

    vol = shape.volume.float().contiguous()
    # the tag names the eigen build (cell nodes, clusters kept whole), so targets of earlier builds are not reused
    key = hashlib.sha1(vol.numpy().tobytes() + str(num_handles).encode() + b"eigen-cells-v2").hexdigest()[:16]
    if cache_dir is None:
        from physskin_gs._native import user_cache

        cache_dir = user_cache("targets")
    path = Path(cache_dir) / f"eigen_{key}.safetensors"
    if path.is_file():
        try:
            return replace(shape, target=load_file(str(path))["target"])
        except Exception:  # noqa: BLE001 - a damaged cache entry is recomputed
            pass
    from physskin_gs.model.eigen import build_eigen_field

    t0 = time.perf_counter()
    field = build_eigen_field(vol, num_handles=num_handles + 1)  # m learned + the constant handle
    W = field.weights(vol).float()
    path.parent.mkdir(parents=True, exist_ok=True)
    from physskin_gs.io._shared import atomic_output

    with atomic_output(path) as tmp:
        save_file({"target": W.contiguous()}, tmp)
    log(f"eigen target for {shape.name}: {tuple(W.shape)} in {time.perf_counter() - t0:.1f} s")
    return replace(shape, target=W)


def _device(name: str):
    """torch.device from --device ('auto': cuda when available). Raises OptionError for an unusable device."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError) as exc:
        raise OptionError(f"--device {name!r}: {exc}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise OptionError(f"--device {name}: CUDA is not available on this machine")
    return dev


def _to_device(shape, device):
    from dataclasses import replace

    return replace(shape, surface=shape.surface.to(device), volume=shape.volume.to(device),
                   target=None if shape.target is None else shape.target.to(device))


def _validate(model, shapes, n_points=5000):
    import torch

    from physskin_gs.model.losses import skinning_metrics

    out = {}
    with torch.no_grad():
        for s in shapes:
            g = torch.Generator().manual_seed(0)
            X = s.volume[torch.randperm(s.volume.shape[0], generator=g)[:n_points]]
            surf = s.surface[torch.randperm(s.surface.shape[0], generator=g)[:2048]]
            W = model.decode_chunked(X, model.encode(surf))
            out[s.name] = skinning_metrics(W)
    keys = ["omega_orth_x1e2", "kappa_log", "h_spec"]
    mean = {k: sum(v[k] for v in out.values()) / max(len(out), 1) for k in keys}
    return mean, out


def _check_options(args) -> None:
    """Every numeric option in its range, before any folder is made or any work starts. Raises OptionError."""
    from physskin_gs.cli._common import check_int, check_number

    if args.steps is not None:
        check_int("--steps", args.steps, 1)
    check_int("--procedural", args.procedural, 0)
    if args.threads is not None:
        check_int("--threads", args.threads, 1, 1024)
    if args.max_minutes is not None:
        check_number("--max-minutes", args.max_minutes, 0, None, lo_open=True, unit="min")
    if args.stop_after is not None:
        check_int("--stop-after", args.stop_after, 1)
    check_number("--ckpt-every", args.ckpt_every, 0, None, lo_open=True, unit="s")
    check_int("--snapshot-every", args.snapshot_every, 1)
    check_int("--log-every", args.log_every, 1)
    check_number("--val-every", args.val_every, 0, None, unit="s")
    check_int("--handles", args.handles, 1, 64)
    for name in ("width", "heads", "latents", "handle_tokens", "head_hidden", "ff_mult", "cubature", "transforms",
                 "surface_points"):
        check_int("--" + name.replace("_", "-"), getattr(args, name), 1)
    check_int("--enc-layers", args.enc_layers, 0)
    check_int("--n-freq", args.n_freq, 0)
    if args.width % args.heads:
        raise OptionError(f"--width {args.width} must be a multiple of --heads {args.heads}")
    check_number("--lr", args.lr, 0, None, lo_open=True)
    check_number("--lr-min", args.lr_min, 0, args.lr)
    check_number("--sigma", args.sigma, 0, None, lo_open=True)
    check_number("--orth-only-frac", args.orth_only_frac, 0, 1)
    for name in ("w_orth", "w_smooth", "c_orth", "c_smooth", "w_pot", "w_sub", "c_sub"):
        check_number("--" + name.replace("_", "-"), getattr(args, name), 0, None)


#: The files a run writes at the top of ``--out`` (snapshots go in ``snapshots/``).
RUN_FILES = ("model.safetensors", "train_state.safetensors", "config.json", "metrics.jsonl")


def _resume_ignored(args, tcfg, ncfg, saved: dict) -> list:
    """Lines naming the options given with ``--resume`` that the resumed run does not take: a resumed run keeps its
    own network and training settings (``config.json``), all but ``--steps``. An option counts as given when its
    value differs from the parser's default (:func:`physskin_gs.cli._common.given_options`)."""
    from dataclasses import asdict

    from physskin_gs.cli._common import given_options

    model, train = saved.get("model", {}), saved.get("train", {})
    keys = {**{k: ("model", k) for k in asdict(ncfg)}, **{k: ("train", k) for k in asdict(tcfg)}}
    dest_of = {"num_handles": "handles", "oni": "no_oni", "smooth": "no_smooth", "augment": "no_augment"}
    given = set(given_options(args, [dest_of.get(k, k) for k in keys if k != "steps"]))
    out = []
    for key, (part, name) in sorted(keys.items()):
        dest = dest_of.get(key, key)
        if key == "steps" or dest not in given:
            continue
        mine = asdict(ncfg if part == "model" else tcfg)[name]
        theirs = (model if part == "model" else train).get(name, mine)
        if mine != theirs:
            how = ("the network's shape is its checkpoint's" if part == "model" else
                   f"a new run started from it with --init {args.out}/model.safetensors takes a new value")
            out.append(f"--resume keeps the run's own settings: --{dest.replace('_', '-')} ignored (the run has "
                       f"{name} = {theirs}; {how})")
    return out


def _resume_data_ignored(args, saved: dict) -> list:
    """Lines naming ``--data`` / ``--synthetic`` / ``--samples`` given with ``--resume`` that differ from the run's
    own training shapes (``config.json``): a resumed run trains on its own shapes."""
    out = []
    for opt, key in (("--data", "data"), ("--synthetic", "synthetic"), ("--samples", "samples")):
        mine, theirs = getattr(args, key, None), saved.get(key)
        if mine and mine != theirs:
            own = {"data": f"--data {' '.join(map(str, theirs))}" if theirs else None,
                   "synthetic": "--synthetic" if saved.get("synthetic") else None,
                   "samples": f"--samples {saved.get('samples')}" if saved.get("samples") else None}
            what = next((v for v in own.values() if v), "the shared data")
            out.append(f"--resume trains on the run's own shapes ({what}): {opt} ignored (start a new run from it "
                       f"with --init {args.out}/model.safetensors to train on others)")
    return out


def _check_resume_pair(model_path: Path, state_path: Path) -> None:
    """The model and the training state in a run's folder are of the same step (they are saved as a pair; files of
    an earlier version, or copied by hand, may not be). Raises OptionError naming both steps."""
    from physskin_gs.model.checkpoint import checkpoint_metadata, read_checkpoint

    model_step = (checkpoint_metadata(model_path).get("metrics") or {}).get("step")
    state_step = read_checkpoint(state_path)[1].get("step")
    if model_step is not None and state_step is not None and int(model_step) != int(state_step):
        raise OptionError(f"--resume: {model_path.name} is at step {model_step} but {state_path.name} at step "
                          f"{state_step} (a save was cut short): the run cannot continue exactly; start a new run "
                          f"from the weights with --init {model_path} --out NEW_FOLDER")


def run(args) -> int:
    import torch
    import torch.distributed as dist
    from tqdm import tqdm

    from physskin_gs.model.checkpoint import load_train_state, save_checkpoint, save_train_state, read_checkpoint
    from physskin_gs.model.data import augment, load_shapes, synthetic_shape
    from physskin_gs.model.network import NetConfig, PhysSkinNet
    from physskin_gs.model.trainer import TrainConfig, train_step

    _check_options(args)
    if args.export_samples and (args.resume or args.init):
        raise OptionError("--export-samples writes the training shapes and exits (no training): drop --resume / --init")
    if not args.export_samples and not args.out:
        raise OptionError("--out DIR is required: the run's folder (checkpoints, config.json, metrics.jsonl)")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("gloo")
    torch.set_num_threads(args.threads or max(1, 2 // world))
    device = _device(args.device)
    out = Path(args.out) if args.out and not args.export_samples else None  # (--export-samples: no run folder)
    is_main = rank == 0
    if args.init and args.resume:
        raise OptionError("--init and --resume: a resumed run continues from its own checkpoint in --out; drop one")
    folders = {"--out": args.out, "--samples": args.samples, "--export-samples": args.export_samples}
    given = [(k, Path(v).resolve()) for k, v in folders.items() if v]
    for i, (a, pa) in enumerate(given):
        for b, pb in given[i + 1:]:
            if pa == pb:
                raise OptionError(f"{a} and {b} are the same folder ({pa}); give each its own folder")
    if args.export_samples and not args.force and Path(args.export_samples).is_dir():
        from physskin_gs.geometry.dataset import is_shape_sample

        if any(is_shape_sample(f) for f in Path(args.export_samples).glob("*.safetensors")):
            raise OptionError(f"--export-samples {args.export_samples} already holds shape samples; use --force to "
                              "replace them (only them: other files stay), or choose an empty folder")
    if is_main:
        from physskin_gs.cli._outputs import Output, claim_outputs

        claim_outputs([Output("--out", None if out is None else str(out), folder=True,
                              replace=args.force or args.resume,
                              writes=lambda n: n in RUN_FILES or n.startswith("snapshots/")),
                       Output("--export-samples", args.export_samples, folder=True,
                              writes=lambda n: "/" not in n and n.endswith(".safetensors"))],
                      inputs=[None if args.resume else args.init, *(args.data or []), args.samples])
    log = print if is_main else (lambda *a, **k: None)

    tcfg = TrainConfig(
        steps=args.steps if args.steps is not None else DEFAULT_STEPS, lr=args.lr, lr_min=args.lr_min,
        cubature=args.cubature, transforms=args.transforms,
        sigma=args.sigma, surface_points=args.surface_points, smooth=not args.no_smooth,
        orth_only_frac=args.orth_only_frac, combine=args.combine, fd_scheme=args.fd_scheme, w_orth=args.w_orth, c_orth=args.c_orth, c_smooth=args.c_smooth, w_smooth=args.w_smooth, augment=not args.no_augment, seed=args.seed,
        w_pot=args.w_pot, w_sub=args.w_sub, c_sub=args.c_sub,
    )
    ncfg = NetConfig(
        num_handles=args.handles, width=args.width, heads=args.heads, latents=args.latents,
        enc_layers=args.enc_layers, handle_tokens=args.handle_tokens, n_freq=args.n_freq,
        head_hidden=args.head_hidden, oni=not args.no_oni, ff_mult=args.ff_mult,
    )
    model_path = state_path = None  # (--export-samples: no run folder; it exits before training)
    if out is not None:
        model_path, state_path = out / "model.safetensors", out / "train_state.safetensors"
    if out is not None and not args.resume and not args.force and (model_path.exists()
                                                                     or (out / "metrics.jsonl").exists()):
        raise OptionError(f"{out} holds a training run; use --resume to continue it or --force to start over")
    # --force over an earlier run: its files stay as they are until this run's first checkpoint replaces them all
    # at once (model, state, config, metrics, snapshots); an interrupt before that leaves the earlier run whole
    replacing = bool(out is not None and args.force and not args.resume and is_main
                     and any((out / n).exists() for n in RUN_FILES))
    if args.resume:
        if not (model_path.is_file() and state_path.is_file()):
            started = (out / "config.json").is_file() or (out / "metrics.jsonl").is_file()
            raise OptionError(f"--resume: no checkpoint to resume in {out}" + (
                " (the run there stopped before its first checkpoint, --ckpt-every: use --force to start it over)"
                if started else ""))
        _check_resume_pair(model_path, state_path)
        saved = json.loads((out / "config.json").read_text())
        if is_main:
            for line in _resume_ignored(args, tcfg, ncfg, saved):
                print(f"note: {line}", file=sys.stderr)
        ncfg = NetConfig.from_dict(saved["model"])
        tcfg = TrainConfig.from_dict(saved["train"])
        if args.steps is not None:
            tcfg.steps = args.steps  # the schedule length may be changed on resume (else the run's own)
        if is_main:
            for line in _resume_data_ignored(args, saved):
                print(f"note: {line}", file=sys.stderr)
        args.data = saved.get("data", args.data)
        args.synthetic = saved.get("synthetic", args.synthetic)
        args.samples = saved.get("samples", args.samples)
    elif args.init:
        from dataclasses import asdict

        from physskin_gs.cli._common import given_options
        from physskin_gs.model.checkpoint import checkpoint_metadata

        own = NetConfig.from_dict(checkpoint_metadata(args.init)["config"])
        dest_of = {"num_handles": "handles", "oni": "no_oni"}
        mine, theirs = asdict(ncfg), asdict(own)
        given = set(given_options(args, [dest_of.get(k, k) for k in mine]))
        for key in sorted(mine):  # model options the checkpoint's weights fix (they were ignored without a word)
            if dest_of.get(key, key) in given and mine[key] != theirs[key] and is_main:
                print(f"note: --init takes the checkpoint's network: --{dest_of.get(key, key).replace('_', '-')} "
                      f"ignored (it has {key} = {theirs[key]})", file=sys.stderr)
        ncfg = own
    if args.resume and args.force and is_main:
        print("note: --force is not needed with --resume (it continues the run in --out; --force without --resume "
              "starts it over)", file=sys.stderr)

    torch.manual_seed(tcfg.seed)
    model = PhysSkinNet(ncfg).to(device)
    if world > 1:
        for p in model.parameters():
            dist.broadcast(p.data, 0)
    opt = torch.optim.Adam(model.parameters(), lr=tcfg.lr)
    gen = torch.Generator().manual_seed(tcfg.seed * 1000 + rank)

    held = () if args.include_held_out else held_out_names()
    if args.synthetic:
        shapes = [synthetic_shape(k, seed=i) for i, k in enumerate(["sphere", "box", "ellipsoid"])]
    elif args.samples:
        shapes = load_sample_dir(args.samples, exclude=held)
    else:
        shapes = load_shapes(args.data or default_data(), exclude=held, seed=tcfg.seed, log=log,
                             num_procedural=args.procedural)
    if args.export_samples:
        export_samples(shapes, args.export_samples)
        log(f"wrote {len(shapes)} training shapes to {args.export_samples}")
        return 0
    val = _val_shapes(args, held, log) if (is_main and args.val_every > 0) else []
    if tcfg.w_sub > 0:
        shapes = [attach_eigen_target(s, ncfg.num_handles, log=log) for s in shapes]
    shapes = [_to_device(s, device) for s in shapes]
    val = [_to_device(s, device) for s in val]

    start = 0
    if args.init and not args.resume:
        tensors, _ = read_checkpoint(args.init)
        model.load_state_dict({k: v.to(device) for k, v in tensors.items()})
    if args.resume:
        tensors, _ = read_checkpoint(model_path)
        model.load_state_dict({k: v.to(device) for k, v in tensors.items()})
        start, extra = load_train_state(state_path, opt, gen)  # Adam state is identical on every rank
        if rank:
            gen.manual_seed(tcfg.seed * 1000 + rank + 7919 * start)
        if start >= tcfg.steps:
            if args.steps is not None and start > tcfg.steps:
                raise OptionError(f"--steps {args.steps}: the run in {out} is already at step {start}; give more steps "
                                  "to train on (or --init it into a new run)")
            log(f"nothing to do: the run in {out} is at step {start} of its {tcfg.steps} (--steps N with N > {start} "
                "trains on)")
            return 0
    from physskin_gs.io._shared import write_text_atomic

    def write_config():
        write_text_atomic(out / "config.json", json.dumps({
            "model": ncfg.to_dict(), "train": tcfg.to_dict(), "data": args.data, "synthetic": args.synthetic,
            "samples": args.samples, "held_out": list(held), "train_shapes": [s.name for s in shapes], "world_size": world,
            "threads": torch.get_num_threads(), "device": str(device),
        }, indent=2))

    if is_main:
        if not replacing:
            write_config()
        log(f"training on {len(shapes)} shape{'s' if len(shapes) != 1 else ''} ({', '.join(s.name for s in shapes)}); "
            f"held out: {', '.join(held) if held else 'none'}")
        log(f"model: {sum(p.numel() for p in model.parameters())} parameters; steps {start} -> {tcfg.steps}")

    def save(step):
        nonlocal replacing, metrics_f
        if not is_main:
            return
        meta = {"step": step, "elapsed_s": elapsed_total()}
        with interrupts.deferred():  # the model and its training state are saved as a pair (a second Ctrl-C during
            # the save left a step-36 model beside a step-31 state, and --resume trained on from the mismatch)
            save_checkpoint(model, model_path, {"train": tcfg.to_dict(), "data": args.data}, meta)
            save_train_state(state_path, opt, gen, step, {"elapsed_s": meta["elapsed_s"]})
        if replacing:  # this run's first checkpoint: the earlier run's config, metrics and snapshots go now
            write_config()
            metrics_f.close()
            os.replace(metrics_part, out / "metrics.jsonl")
            metrics_f = open(out / "metrics.jsonl", "a")
            for old in (out / "snapshots").glob("step_*.safetensors"):
                old.unlink()
            replacing = False
        if step % args.snapshot_every == 0 or step == tcfg.steps:
            save_checkpoint(model, out / "snapshots" / f"step_{step:06d}.safetensors", {"train": tcfg.to_dict()}, meta)

    prev_elapsed = float(extra.get("elapsed_s", 0.0)) if args.resume else 0.0  # the state's own (saved with it)
    if args.resume and not prev_elapsed and (out / "metrics.jsonl").is_file():  # (a state written before it was)
        for line in (out / "metrics.jsonl").read_text().splitlines():
            try:
                prev_elapsed = max(prev_elapsed, float(json.loads(line).get("elapsed_s", 0.0)))
            except ValueError:
                pass
    t_start = time.time()

    def elapsed_total():
        return prev_elapsed + time.time() - t_start

    # (replacing an earlier run: this run's metrics go to a hidden file until its first checkpoint)
    metrics_part = out / ".metrics.jsonl.partial"
    metrics_f = None
    step = start
    done = start
    from physskin_gs import interrupts

    try:
        if is_main:
            if not replacing:
                metrics_part.unlink(missing_ok=True)  # a killed run's leftover (this run holds the folder's lock)
            metrics_f = open(metrics_part, "w") if replacing else open(out / "metrics.jsonl", "a")
        last_ckpt = last_val = time.time()
        if is_main and val and start == 0:
            mean, _ = _validate(model, val)
            metrics_f.write(json.dumps({"val": True, "step": 0, "elapsed_s": 0.0, **mean}) + "\n")
        pbar = tqdm(range(start, tcfg.steps), initial=start, total=tcfg.steps, disable=not is_main, mininterval=5.0,
                    dynamic_ncols=True, desc="train")
        model.train()
        for step in pbar:
            interrupts.check()
            shape = shapes[int(torch.randint(0, len(shapes), (1,), generator=gen))]
            if tcfg.augment:
                shape = augment(shape, gen)
            with interrupts.deferred():  # a Ctrl-C lands between steps: the model is never saved half-updated
                rec = train_step(model, opt, shape, tcfg, step, gen, world)
                done = step + 1  # (before the block ends, where a deferred interrupt is raised)
            if is_main and (step % args.log_every == 0 or step == tcfg.steps - 1):
                rec.update(step=step, shape=shape.name, elapsed_s=round(elapsed_total(), 2))
                metrics_f.write(json.dumps(rec) + "\n")
                metrics_f.flush()
                pbar.set_postfix(pot=f"{rec['pot']:.3g}", orth=f"{rec['orth']:.2e}", H=f"{rec['h_spec']:.3f}")
            now = time.time()
            stop = args.max_minutes is not None and (now - t_start) > 60 * args.max_minutes
            stop = stop or (args.stop_after is not None and done - start >= args.stop_after)
            if is_main and val and now - last_val > args.val_every:
                mean, _ = _validate(model, val)
                model.train()
                metrics_f.write(json.dumps({"val": True, "step": done, "elapsed_s": round(elapsed_total(), 2), **mean}) + "\n")
                metrics_f.flush()
                last_val = now
            if now - last_ckpt > args.ckpt_every or done % args.snapshot_every == 0 or done == tcfg.steps or stop:
                save(done)
                last_ckpt = now
            if world > 1:
                flag = torch.tensor([1.0 if stop else 0.0])
                dist.all_reduce(flag)
                stop = bool(flag.item() > 0)
            if stop:
                log(f"stopping at step {done}")
                break
    except KeyboardInterrupt:
        # Ctrl-C / SIGTERM between steps: keep what this run trained (as --max-minutes does), then exit as
        # interrupted. An earlier run that --force was to replace stays as it was until this run's first regular
        # checkpoint (--ckpt-every / --snapshot-every): an interrupt before it keeps the earlier run and drops this
        # run's steps (a Ctrl-C a few seconds into `train --force` replaced a finished run with a 2-step model)
        if is_main and done > start and replacing:
            log(f"interrupted at step {done}, before this run's first checkpoint: the earlier run in {out} is kept as "
                f"it was, and this run's {done - start} steps are not saved (--force replaces an earlier run only with "
                "a checkpoint of the new one)")
        elif is_main and done > start:
            interrupts.reset()  # (a pending interrupt would abort the checkpoint's own writes)
            save(done)
            log(f"interrupted: saved the checkpoint at step {done} ({model_path}); --resume continues it")
        if metrics_f is not None:
            metrics_f.close()
        if replacing:
            metrics_part.unlink(missing_ok=True)
        raise
    if is_main:
        if val:
            mean, _ = _validate(model, val)
            metrics_f.write(json.dumps({"val": True, "step": step + 1, "elapsed_s": round(elapsed_total(), 2), **mean}) + "\n")
        metrics_f.close()
        log(f"done: {model_path} (elapsed {elapsed_total():.0f} s)")
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return 0
