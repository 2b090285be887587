"""``physskin-gs convert IN OUT.ply [--drop-invalid]``: any supported scene to an INRIA 3DGS PLY."""

from __future__ import annotations

import os
import sys
import warnings

from physskin_gs.cli._common import (OutputError, check_output_folder, refuse_existing, require_input_file,
                                     verify_written)
from physskin_gs.errors import OptionError


def register(sub) -> None:
    """Add the ``convert`` parser to ``sub`` (an argparse subparsers object)."""
    p = sub.add_parser(
        "convert",
        help="convert a Gaussian scene (INRIA PLY, .splat, compressed PLY) to an INRIA 3DGS PLY",
        description="Convert any supported Gaussian scene to a binary INRIA 3DGS PLY with raw values.",
    )
    p.add_argument("input", help="input scene file")
    p.add_argument("output", help="output .ply path (must differ from the input)")
    p.add_argument("--drop-invalid", action="store_true",
                   help="remove Gaussians with NaN/Inf values and report how many (zero-norm quaternions are the "
                        "identity rotation and are kept)")
    p.add_argument("--quat-order", choices=["wxyz", "xyzw"], default="wxyz",
                   help="component order of the input's stored quaternions (default wxyz)")
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    p.set_defaults(func=run)


def run(args) -> int:
    """Load ``args.input``, optionally drop invalid rows, save an INRIA PLY to ``args.output``; returns 0.

    Raises:
        OptionError: output not ``.ply``, the same file as the input (never overwritten), or an existing file
            without ``--force``.
        SceneFormatError / FileNotFoundError: unreadable input (see :func:`physskin_gs.io.load_scene`).
        OutputError: the output folder cannot be written, or the written file is missing.
    """
    from physskin_gs.io import drop_invalid, load_scene, save_scene, validate

    require_input_file(args.input)
    if not args.output.lower().endswith(".ply"):
        raise OptionError(f"{args.output}: output must be a .ply file (INRIA 3DGS PLY)")
    if os.path.exists(args.output) and os.path.exists(args.input) and os.path.samefile(args.input, args.output):
        raise OptionError(f"{args.output}: refusing to overwrite the input file; choose another output path")
    refuse_existing(args.output, args.force, "--force")
    check_output_folder(args.output, "output")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scene = load_scene(args.input, quat_order=args.quat_order)
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    if args.drop_invalid:
        scene, n = drop_invalid(scene)
        print(f"dropped {n} invalid Gaussians", file=sys.stderr)
    else:
        rep = validate(scene)
        if rep["num_invalid"]:
            print(f"warning: {rep['num_invalid']} invalid Gaussians kept (use --drop-invalid to remove them)",
                  file=sys.stderr)
    try:
        out = save_scene(scene, args.output)
    except OSError as exc:
        raise OutputError(f"could not write {args.output}: {exc.strerror or exc}") from None
    verify_written(out, "scene")
    print(f"wrote {scene.num_gaussians} Gaussians (SH degree {scene.sh_degree}, from {scene.format}) to {out}")
    return 0
