"""One interface for every skinning source: a :class:`SkinningBasis` builds a :class:`SkinningField` for one object.

A basis is chosen by name in one place, :data:`SKINNING_BASES` (``--skinning NAME`` in animate, skin, evaluate and
the viewer all go through :func:`build_skinning`), in the manner of kaolin's ``create_with_mlp`` /
``create_with_rkpm``:

* ``eigen``: skinning eigenmodes on the object's own volume points (RKPM shape functions, no tet mesh;
  :mod:`physskin_gs.model.eigen`; FreeForm, CVPR 2026; Benchekroun et al. 2023). Classical, deterministic, about
  a second.
* ``network``: the feed-forward PhysSkin network (one forward pass; alias ``pretrained``). Falls back to ``fit``
  with a warning when the shipped checkpoint is missing and none was asked for.
* ``fit``: per-object optimisation of the same self-supervised losses (Simplicits style), within a time budget.
* ``rbf``: m Gaussian bumps on farthest points (no learning; a baseline and a last-resort fallback).

Every basis takes the object's ``surface`` (S, 3) and ``volume`` (V, 3) points in its normalised frame (about
[-1, 1]^3, float32) and returns a field whose ``weights_and_grads(x)`` gives W (N, H) and dW/dX (N, H, 3) at any
points of the same frame, H = m + 1 with the constant handle last, learned columns with RMS 1 over ``volume``
(method.md 5, protocol step 4). Fields are saved and loaded with :func:`save_field` / :func:`load_field`
(safetensors, no pickle).
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from physskin_gs.errors import CheckpointError, OptionError
from physskin_gs.model.eigen import EigenSkinningField, build_eigen_field  # the default basis: its imports load with the registry
from physskin_gs.model.field import RBFSkinningField, SkinningField

__all__ = [
    "SkinningOptions",
    "SkinningBasis",
    "SKINNING_BASES",
    "DEFAULT_SKINNING",
    "skinning_names",
    "resolve_skinning",
    "build_skinning",
    "save_field",
    "load_field",
    "SkinningFallbackWarning",
]

ProgressFn = Optional[Callable[[str, float], None]]

#: The product's default skinning source (the physically best basis in ``evaluate --reference fem``; README).
DEFAULT_SKINNING = "eigen"

_ALIASES = {"pretrained": "network"}
_FIELD_MAGIC = "physskin_gs.field"


class SkinningFallbackWarning(UserWarning):
    """A skinning basis could not be built as asked and another one was used (the message says which and why)."""


@dataclass
class SkinningOptions:
    """Options shared by every basis. num_handles: learned handles m (the constant handle is added); checkpoint:
    network checkpoint path (None = the shipped one); fit_seconds: time budget of ``fit`` (s); seed: sampling seed."""

    num_handles: int = 16
    checkpoint: Optional[str] = None
    fit_seconds: float = 60.0
    seed: int = 0


class SkinningBasis:
    """A way to build a skinning field for one object. Subclasses set ``name`` and ``summary`` and implement
    :meth:`build`."""

    name: str = ""
    summary: str = ""

    def build(self, surface: torch.Tensor, volume: torch.Tensor, options: SkinningOptions,
              progress: ProgressFn = None) -> Tuple[SkinningField, str]:
        """surface (S, 3), volume (V, 3) float32 in the normalised frame -> (field, source description)."""
        raise NotImplementedError


def _report(progress: ProgressFn, stage: str, frac: float) -> None:
    if progress is not None:
        progress(stage, float(frac))


def _encoder_points(surface: torch.Tensor, seed: int, n: int = 2048) -> torch.Tensor:
    """At most n farthest points of the surface (the network's encoder input, method.md 7.2)."""
    from physskin_gs.geometry.sampling import farthest_point_sampling

    surface = torch.as_tensor(surface).float()
    if surface.shape[0] <= n:
        return surface
    idx = farthest_point_sampling(surface, n, seed=seed)
    return surface[torch.as_tensor(np.asarray(idx), dtype=torch.long)]


class EigenBasis(SkinningBasis):
    name = "eigen"
    summary = "skinning eigenmodes on the object's volume points (RKPM, no tet mesh; about 1 s)"

    def build(self, surface, volume, options, progress=None):
        _report(progress, "skinning: eigenmodes of the object's volume points", 0.35)
        field = build_eigen_field(torch.as_tensor(volume).float(), num_handles=options.num_handles + 1,
                                  seed=options.seed)  # its num_handles counts the constant handle
        return field, "eigen"


class NetworkBasis(SkinningBasis):
    """The checkpoint fixes the number of handles (``options.num_handles`` is not used)."""

    name = "network"
    summary = "feed-forward PhysSkin network (one forward pass; shipped checkpoint or --checkpoint)"

    def build(self, surface, volume, options, progress=None):
        from physskin_gs import model as pm

        ckpt = Path(options.checkpoint) if options.checkpoint else pm.default_checkpoint_path()
        if not ckpt.is_file():
            if options.checkpoint:
                raise CheckpointError(f"{ckpt}: checkpoint file not found")
            warnings.warn(f"no network checkpoint at {ckpt}; fitting a per-object skinning field instead",
                          SkinningFallbackWarning, stacklevel=3)
            return SKINNING_BASES["fit"].build(surface, volume, options, progress)
        _report(progress, "skinning: encoding with the network", 0.35)
        net = pm.load_checkpoint(ckpt)
        surf = _encoder_points(surface, options.seed)
        return pm.skinning_from_model(net, surf, torch.as_tensor(volume).float()), f"network:{ckpt.name}"


class FitBasis(SkinningBasis):
    name = "fit"
    summary = "per-object fit of the self-supervised losses (Simplicits style; --fit-seconds)"

    def build(self, surface, volume, options, progress=None):
        from physskin_gs import model as pm
        from physskin_gs.model.checkpoint import checkpoint_metadata
        from physskin_gs.model.fit import fit_config_like

        if not options.fit_seconds > 0:
            raise OptionError(f"--fit-seconds must be positive, got {options.fit_seconds}")
        ck = Path(options.checkpoint) if options.checkpoint else pm.default_checkpoint_path()
        train = checkpoint_metadata(ck).get("train_config", {}).get("train") if ck.is_file() else None
        _report(progress, f"skinning: fitting (up to {options.fit_seconds:.0f} s)", 0.35)
        field = pm.fit_skinning(_encoder_points(surface, options.seed), torch.as_tensor(volume).float(),
                                time_budget_s=options.fit_seconds, seed=options.seed,
                                num_handles=options.num_handles, config=fit_config_like(train))
        return field, "fit"


class RBFBasis(SkinningBasis):
    name = "rbf"
    summary = "m Gaussian bumps (radius 0.45) on farthest volume points (no learning; a baseline)"

    def build(self, surface, volume, options, progress=None):
        from physskin_gs.geometry.sampling import farthest_point_sampling

        volume = torch.as_tensor(volume).float()
        idx = farthest_point_sampling(volume, min(options.num_handles, volume.shape[0]), seed=options.seed)
        centers = volume[torch.as_tensor(np.asarray(idx), dtype=torch.long)]
        return RBFSkinningField(centers, radius=0.45), "rbf"


#: Every skinning source by name (the one place where names map to implementations).
SKINNING_BASES: Dict[str, SkinningBasis] = {b.name: b for b in (EigenBasis(), NetworkBasis(), FitBasis(), RBFBasis())}


def skinning_names(aliases: bool = True) -> List[str]:
    """Accepted ``--skinning`` names (canonical first, then aliases such as 'pretrained')."""
    return list(SKINNING_BASES) + (list(_ALIASES) if aliases else [])


def resolve_skinning(name: Optional[str]) -> str:
    """Canonical basis name for ``name`` (None or 'default' = :data:`DEFAULT_SKINNING`; 'pretrained' = 'network').

    Raises OptionError for an unknown name, listing the valid ones."""
    key = DEFAULT_SKINNING if name in (None, "", "default") else str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in SKINNING_BASES:
        raise OptionError(f"unknown skinning source {name!r}; use one of {', '.join(skinning_names())}")
    return key


def build_skinning(name: Optional[str], surface: torch.Tensor, volume: torch.Tensor,
                   options: Optional[SkinningOptions] = None, progress: ProgressFn = None) -> Tuple[SkinningField, str]:
    """Build the skinning field ``name`` (see :data:`SKINNING_BASES`) for one object.

    Args:
        surface: (S, 3) float32 surface points, normalised frame (encoder input of ``network``/``fit``).
        volume: (V, 3) float32 volume points (surface + interior), normalised frame; the reference set of the
            column scales, and the domain of ``eigen``.
    Returns:
        (field, source) with source a short description ('eigen', 'network:physskin_m16.safetensors', ...).
    Raises:
        OptionError (unknown name, bad options), CheckpointError (an asked-for checkpoint is missing or bad).
    """
    options = options or SkinningOptions()
    if int(options.num_handles) < 1:
        raise OptionError(f"the number of handles must be >= 1, got {options.num_handles}")
    volume = torch.as_tensor(volume).float()
    if volume.ndim != 2 or volume.shape[1] != 3 or volume.shape[0] < options.num_handles + 1:
        raise OptionError(f"skinning needs at least {options.num_handles + 1} volume points (N, 3), "
                          f"got {tuple(volume.shape)}")
    return SKINNING_BASES[resolve_skinning(name)].build(torch.as_tensor(surface).float(), volume, options, progress)


# ---------------------------------------------------------------------------------------------- save / load
def _field_state(field: SkinningField) -> Tuple[str, Dict[str, torch.Tensor], Dict]:
    from physskin_gs.model.network import PhysSkinNet, SimplicitsMLP
    from physskin_gs.model.neural_field import NeuralSkinningField

    if isinstance(field, RBFSkinningField):
        return "rbf", {"centers": field.centers}, {"radius": field.radius}
    if isinstance(field, NeuralSkinningField):
        model = field.model
        tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
        for k, v in field.cache.items():  # tensors, or tuples of tensors (precomputed keys and values)
            if isinstance(v, (tuple, list)):
                tensors.update({f"cache.{k}.{i}": t for i, t in enumerate(v)})
            else:
                tensors[f"cache.{k}"] = v
        tensors["norms"] = field.norms
        meta = {"n_ref": field.n_ref, "grad_mode": field.grad_mode, "chunk": field.chunk}
        if isinstance(model, PhysSkinNet):
            meta.update(net="physskin", config=model.config.to_dict())
        elif isinstance(model, SimplicitsMLP):
            lin = [m for m in model.net if isinstance(m, torch.nn.Linear)]
            meta.update(net="simplicits", num_handles=model.num_handles, hidden=lin[0].out_features, layers=len(lin))
        else:
            raise OptionError(f"cannot save a neural field of {type(model).__name__}")
        return "neural", tensors, meta
    if getattr(field, "kind", None) == "eigen":
        return "eigen", dict(field.state()), {}
    raise OptionError(f"cannot save a skinning field of type {type(field).__name__}")


def save_field(field: SkinningField, path) -> Path:
    """Write a field to ``path`` (.safetensors: its tensors, kind and settings in the metadata), atomically
    (temporary file, then rename). Raises OptionError for a field type that cannot be saved, OSError when the
    write fails."""
    from safetensors.torch import save_file

    kind, tensors, meta = _field_state(field)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    save_file({k: torch.as_tensor(v).detach().contiguous().cpu() for k, v in tensors.items()}, str(tmp),
              metadata={_FIELD_MAGIC: kind, "settings": json.dumps(meta), "num_handles": str(field.num_handles)})
    os.replace(tmp, path)
    return path


def load_field(path) -> SkinningField:
    """Read a field written by :func:`save_field` (no pickle). Raises CheckpointError for a missing, corrupt or
    foreign file."""
    from physskin_gs.model.checkpoint import read_checkpoint

    tensors, meta = read_checkpoint(path)
    kind = meta.get(_FIELD_MAGIC)
    try:
        settings = json.loads(meta.get("settings", "{}"))
        if kind == "rbf":
            return RBFSkinningField(tensors["centers"], settings["radius"])
        if kind == "eigen":
            return EigenSkinningField.from_state(tensors)
        if kind == "neural":
            from physskin_gs.model.network import NetConfig, PhysSkinNet, SimplicitsMLP
            from physskin_gs.model.neural_field import NeuralSkinningField

            if settings["net"] == "physskin":
                model = PhysSkinNet(NetConfig.from_dict(settings["config"]))
            else:
                model = SimplicitsMLP(settings["num_handles"], settings["hidden"], settings["layers"])
            model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")}, strict=True)
            model.eval()
            cache, parts = {}, {}
            for k, v in tensors.items():
                if k.startswith("cache."):
                    name, _, i = k[6:].partition(".")
                    if i:
                        parts.setdefault(name, {})[int(i)] = v
                    else:
                        cache[name] = v
            cache.update({n: tuple(d[i] for i in sorted(d)) for n, d in parts.items()})
            return NeuralSkinningField(model, cache, tensors["norms"], settings["n_ref"], chunk=settings["chunk"],
                                       grad_mode=settings["grad_mode"])
    except (KeyError, RuntimeError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a valid physskin_gs skinning field ({exc})") from exc
    raise CheckpointError(f"{path}: not a physskin_gs skinning field (metadata {_FIELD_MAGIC!r} is {kind!r})")
