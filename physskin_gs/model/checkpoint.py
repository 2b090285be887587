"""Checkpoints: safetensors model weights with JSON metadata (no pickle anywhere).

A physskin_gs checkpoint is a ``.safetensors`` file whose string metadata holds
``physskin_gs = "PhysSkinNet"``, ``format_version``, ``config`` (JSON of :class:`NetConfig`) and optional
``train_config`` / ``metrics`` (JSON). Training state for ``--resume`` (Adam moments, RNG state, step) lives in a
second safetensors file next to it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Optional, Tuple

import torch

from physskin_gs.errors import CheckpointError
from physskin_gs.model.network import NetConfig, PhysSkinNet

MAGIC_KEY = "physskin_gs"
MAGIC_VALUE = "PhysSkinNet"
FORMAT_VERSION = "1"


def default_checkpoint_path() -> Path:
    """The shipped checkpoint: ``<repo>/data/physskin_m16.safetensors``."""
    import physskin_gs

    return Path(physskin_gs.__file__).resolve().parents[1] / "data" / "physskin_m16.safetensors"


def _atomic_save(tensors: Dict[str, torch.Tensor], path: Path, metadata: Dict[str, str]) -> None:
    from safetensors.torch import save_file

    from physskin_gs.io._shared import atomic_output

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(path) as tmp:  # a unique temporary name, renamed into place; removed on any failure
        save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, tmp, metadata=metadata)


def save_checkpoint(model: PhysSkinNet, path, config: Optional[Dict] = None, metrics: Optional[Dict] = None) -> Path:
    """Write ``model`` to ``path`` (.safetensors) with its NetConfig, a training ``config`` dict and ``metrics``.

    The file is written to a temporary name and renamed, so a crash never leaves a half-written checkpoint.
    Returns the path.
    """
    meta = {
        MAGIC_KEY: MAGIC_VALUE,
        "format_version": FORMAT_VERSION,
        "config": json.dumps(model.config.to_dict()),
        "train_config": json.dumps(config or {}),
        "metrics": json.dumps(metrics or {}),
    }
    _atomic_save(model.state_dict(), Path(path), meta)
    return Path(path)


def folder_given_error(path: Path) -> CheckpointError:
    """The error for a folder given where a checkpoint file is expected, naming ``model.safetensors`` in it when
    there is one (a ``train --out`` run folder)."""
    inner = path / "model.safetensors"
    return CheckpointError(f"{path} is a folder; give the checkpoint file in it"
                           + (f" ({inner})" if inner.is_file() else ""))


def read_checkpoint(path) -> Tuple[Dict[str, torch.Tensor], Dict[str, str]]:
    """Tensors and metadata of a safetensors file. Raises CheckpointError for a missing or corrupt file."""
    from safetensors import safe_open

    path = Path(path)
    if path.is_dir():
        raise folder_given_error(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint file not found")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as exc:  # noqa: BLE001 - safetensors raises several error types
        raise CheckpointError(f"{path}: not a readable safetensors checkpoint ({exc})") from exc
    return tensors, meta


def load_checkpoint(path) -> PhysSkinNet:
    """Load a :class:`PhysSkinNet` from a physskin_gs safetensors checkpoint (eval mode).

    Raises CheckpointError (naming the file) if it is missing, corrupt, not written by physskin_gs, of an unknown
    format version, or its tensors do not match the stored configuration or are not finite.
    """
    tensors, meta = read_checkpoint(path)
    if meta.get(MAGIC_KEY) == "TrainState":
        raise CheckpointError(f"{path}: a training state (the optimiser and random state for train --resume), not a "
                              "model: use model.safetensors beside it")
    if meta.get(MAGIC_KEY) != MAGIC_VALUE:
        raise CheckpointError(f"{path}: not a physskin_gs PhysSkinNet checkpoint (metadata key {MAGIC_KEY!r} missing)")
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: unsupported checkpoint format version {meta.get('format_version')!r}")
    try:
        cfg = NetConfig.from_dict(json.loads(meta["config"]))
        model = PhysSkinNet(cfg)
    except Exception as exc:  # noqa: BLE001
        raise CheckpointError(f"{path}: invalid model configuration in metadata ({exc})") from exc
    try:
        model.load_state_dict(tensors, strict=True)
    except RuntimeError as exc:
        raise CheckpointError(f"{path}: tensors do not match the stored configuration ({exc})") from exc
    for k, v in tensors.items():
        if v.is_floating_point() and not torch.isfinite(v).all():
            raise CheckpointError(f"{path}: tensor {k!r} has non-finite values")
    model.eval()
    return model


def checkpoint_metadata(path) -> Dict:
    """Decoded JSON metadata (config, train_config, metrics) of a physskin_gs checkpoint."""
    _, meta = read_checkpoint(path)
    out = {}
    for k, v in meta.items():
        try:
            out[k] = json.loads(v)
        except (TypeError, ValueError):
            out[k] = v
    return out


def save_train_state(path, optimizer: torch.optim.Optimizer, generator: torch.Generator, step: int, extra: Dict) -> None:
    """Adam moments, RNG states and the step, for ``--resume`` (safetensors + JSON metadata)."""
    tensors = {"rng.generator": generator.get_state(), "rng.torch": torch.get_rng_state()}
    st = optimizer.state_dict()
    for pid, s in st["state"].items():
        for k, v in s.items():
            t = v if torch.is_tensor(v) else torch.tensor(float(v))
            tensors[f"opt.{pid}.{k}"] = t.reshape(-1) if t.ndim == 0 else t
    meta = {MAGIC_KEY: "TrainState", "step": str(step), "extra": json.dumps(extra)}
    _atomic_save(tensors, Path(path), meta)


def load_train_state(path, optimizer: torch.optim.Optimizer, generator: torch.Generator) -> Tuple[int, Dict]:
    """Restore what :func:`save_train_state` wrote; returns (step, extra). Raises CheckpointError."""
    tensors, meta = read_checkpoint(path)
    if meta.get(MAGIC_KEY) != "TrainState":
        raise CheckpointError(f"{path}: not a physskin_gs training state")
    st = optimizer.state_dict()
    state: Dict[int, Dict] = {}
    for key, v in tensors.items():
        if key.startswith("opt."):
            _, pid, name = key.split(".", 2)
            state.setdefault(int(pid), {})[name] = v.reshape(()) if name == "step" else v
    st["state"] = state
    try:
        optimizer.load_state_dict(st)
    except (ValueError, KeyError, RuntimeError) as exc:
        raise CheckpointError(f"{path}: optimizer state does not match the model ({exc})") from exc
    generator.set_state(tensors["rng.generator"])
    torch.set_rng_state(tensors["rng.torch"])
    return int(meta["step"]), json.loads(meta.get("extra", "{}"))
