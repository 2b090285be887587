"""The ``--skinning`` options shared by animate, skin and evaluate (one set of names and help texts).

The names are those of :data:`physskin_gs.model.bases.SKINNING_BASES` (a test holds the two lists equal); they
are spelled out here so that ``--help`` does not load torch.
"""

from __future__ import annotations

import argparse

#: Accepted ``--skinning`` values: the bases, then the alias 'pretrained' (= network).
SKINNING_CHOICES = ("eigen", "network", "fit", "rbf", "tet", "voxel", "modes", "auto", "pretrained")

SKINNING_HELP = ("skinning basis: auto (default: modes; above 32 handles tet or voxel), modes (the displacement fields"
                 " of the object's lowest elastic vibration modes, on the tet mesh of a mesh input's own surface or of"
                 " the cells a splat's volume fills; the lowest frequency error), eigen (skinning eigenmodes of the "
                 "object's volume points, no mesh), network (the shipped feed-forward PhysSkin network; alias "
                 "pretrained), fit (per-object fit, --fit-seconds), rbf (random smooth bumps, a baseline), tet (mesh "
                 "inputs: Laplacian eigenmodes of the mesh's own tet mesh) or voxel (Laplacian eigenmodes of the cells"
                 " the object's volume fills)")


#: ``--handles``: the learned handles m of the bases that build their own (the constant handle is added)
HANDLES_HELP = ("handles m of the skinning basis besides the constant one, 1-64 (default 16; m + 1 in all; "
                "the eigen and modes bases may keep up to 4 fewer or more so as not to split a cluster of nearly "
                "equal eigenvalues or modes). "
                "More handles follow a shape's motion more closely (32: about a tenth lower frequency ratio) and "
                "cost a slower step; a network checkpoint fixes its own (the shipped one: 16)")
MAX_HANDLES = 64


class _StoreGiven(argparse.Action):
    """Store the value, and set ``<dest>_given`` (the user gave the option, as opposed to its default)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, self.dest + "_given", True)


def add_handles_argument(p) -> None:
    """Add --handles (dest ``num_handles``; ``num_handles_given`` is set when the user gave it) to a parser."""
    p.add_argument("--handles", dest="num_handles", type=int, default=16, metavar="M", help=HANDLES_HELP,
                   action=_StoreGiven)


def check_handles(args) -> None:
    """Validate ``--handles`` before any work: an integer in [1, MAX_HANDLES], and not another count than the
    checkpoint's with ``--skinning network``. Raises OptionError naming the option."""
    from physskin_gs.cli._common import check_int
    from physskin_gs.errors import OptionError

    m = getattr(args, "num_handles", 16)
    check_int("--handles", m, 1, MAX_HANDLES)
    basis = str(getattr(args, "skinning", "") or "").lower()
    if basis in ("network", "pretrained"):
        own = checkpoint_handles(getattr(args, "checkpoint", None))
        given = getattr(args, "num_handles_given", int(m) != 16)
        if own is not None and given and int(m) != own:
            which = f"--checkpoint {args.checkpoint}" if getattr(args, "checkpoint", None) else "the shipped network"
            raise OptionError(f"--handles {m} with --skinning network: {which} has {own} handles (its training fixed "
                              "them); leave --handles out, or use --skinning modes, eigen or tet for another count")
    if getattr(args, "checkpoint", None) and basis not in ("", "auto", "network", "pretrained"):
        import sys  # a named basis that never reads a checkpoint: the option was ignored without a word

        print(f"note: --checkpoint: not used by --skinning {basis} (it is the network's)", file=sys.stderr)


def checkpoint_handles(path=None):
    """The learned handle count m of a network checkpoint (``path``; None: the shipped one), from its metadata, or
    None when it cannot be read (a missing or damaged file fails later, where it is loaded, with its own error)."""
    from physskin_gs.model.checkpoint import checkpoint_metadata, default_checkpoint_path

    try:
        return int(checkpoint_metadata(path if path else default_checkpoint_path())["config"]["num_handles"])
    except Exception:  # noqa: BLE001 - see the docstring
        return None


def add_skinning_arguments(p, default: str = "auto") -> None:
    """Add --skinning, --handles, --checkpoint and --fit-seconds to an argparse parser."""
    p.add_argument("--skinning", type=str.lower, choices=SKINNING_CHOICES, default=default, help=SKINNING_HELP)
    add_handles_argument(p)
    p.add_argument("--checkpoint", help="network checkpoint (.safetensors) for --skinning network (default: the "
                                        "shipped data/physskin_m16.safetensors)")
    p.add_argument("--fit-seconds", dest="fit_seconds", type=float, default=60.0,
                   help="time budget of --skinning fit in seconds (default 60)")


def skinning_options(args):
    """:class:`physskin_gs.model.bases.SkinningOptions` from parsed arguments (handles, checkpoint, fit_seconds,
    seed)."""
    from physskin_gs.model.bases import SkinningOptions

    return SkinningOptions(num_handles=int(getattr(args, "num_handles", 16) or 16),
                           checkpoint=getattr(args, "checkpoint", None), fit_seconds=float(args.fit_seconds),
                           seed=int(getattr(args, "seed", 0) or 0))


def shared_data_dir(required: bool = False):
    """The shared data folder: ``$PHYSSKIN_SHARED_DATA``, else ``<repository>/../shared/data`` (a Path). With
    ``required``, raises OptionError when it does not exist (naming both places)."""
    import os
    from pathlib import Path

    from physskin_gs.errors import OptionError

    env = os.environ.get("PHYSSKIN_SHARED_DATA")
    root = Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared" / "data"
    if required and not root.is_dir():
        raise OptionError(f"shared data folder not found at {root} (set PHYSSKIN_SHARED_DATA, or pass --data)")
    return root
