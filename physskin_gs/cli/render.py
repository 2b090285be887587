"""``physskin-gs render PATH -o OUT.png``: render a Gaussian scene to an image, or a turntable video.

Camera: an orbit camera around the centre of the scene's robust (1st-99th percentile) bounding box, at ``--azimuth``
/ ``--elevation`` degrees about the ``--up`` axis; the distance frames the box unless ``--distance`` is given.
Default up axis ``auto``, the same rule as ``animate``: the normal of the support plane the object stands on (scene
analysis); without one the file axis the object stands on most stably when that is clear, else the format's
convention (.splat / compressed PLY -y, INRIA PLY +z, meshes +y). Backend ``auto`` uses gsplat when CUDA is
available, else the pure-torch rasteriser. The input file is never overwritten, an existing output only with
``--force``; what was written is checked (a missing or incomplete image or video is an error, exit code 2).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from physskin_gs.cli._common import (OutputError, add_mesh_and_frame_arguments, check_int, check_number,
                                     require_input_file, resolve_up_option, scene_up, verify_written)
from physskin_gs.cli._outputs import Output, claim_outputs, refuse_inputs
from physskin_gs.errors import OptionError

_IMAGE_EXT = {".png", ".jpg", ".jpeg"}
_VIDEO_EXT = {".mp4", ".mov", ".mkv", ".webm", ".gif"}


def register(sub) -> None:
    p = sub.add_parser(
        "render",
        help="render a Gaussian scene (or a mesh, as animate samples it) to a PNG, or a turntable video with "
             "--turntable N",
        description=(
            "Render a Gaussian scene (INRIA PLY, .splat, compressed PLY, glTF, USD; a mesh is drawn as the Gaussians "
            "animate samples on its surface) from an orbit camera that frames the "
            "scene's robust bounding box. Default up axis auto: the support plane's normal when the object stands "
            "on one; without one the file axis the object stands on most stably when that is clear, else the "
            "format's convention (.splat/compressed -y, INRIA PLY +z, meshes +y)."
        ),
    )
    p.add_argument("path", help="scene file")
    p.add_argument("-o", "--output", required=True, help="output image (.png/.jpg) or, with --turntable, video (.mp4)")
    p.add_argument("--width", type=int, default=512, help="image width in pixels (default 512)")
    p.add_argument("--height", type=int, default=512, help="image height in pixels (default 512)")
    p.add_argument("--azimuth", type=float, default=45.0, help="degrees around the up axis (default 45)")
    p.add_argument("--elevation", type=float, default=20.0, help="degrees above the horizon (default 20)")
    p.add_argument("--distance", type=float, default=None, help="camera distance from the target (default: frame the scene)")
    p.add_argument("--fov", type=float, default=40.0, help="vertical field of view in degrees (default 40)")
    p.add_argument(
        "--up", default="auto",
        help="up axis: auto (default: the up axis recorded in the file (our exported frames), else the normal of "
             "the support plane the object stands on, else the axis it stands on most stably or the format's "
             "convention, as in animate), y, -y, z, -z, x, -x or 'ux,uy,uz'",
    )
    p.add_argument("--backend", choices=["auto", "gsplat", "torch"], default="auto", help="rasteriser (default auto)")
    p.add_argument("--background", default="white", help="white, black or 'r,g,b' in [0, 1] (default white)")
    p.add_argument("--sh-degree", type=int, default=None, help="use at most this SH degree (default: all in the file)")
    p.add_argument("--turntable", type=int, default=0, metavar="N",
                   help="render N frames around the up axis into a video (default 0: one still image)")
    p.add_argument("--fps", type=float, default=30.0, help="turntable frames per second (default 30)")
    p.add_argument("--quat-order", choices=["wxyz", "xyzw"], default="wxyz", help="stored quaternion order (default wxyz)")
    add_mesh_and_frame_arguments(p, "drawn")
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    p.set_defaults(func=run)


def parse_background(text: str):
    """``--background`` value -> (r, g, b) floats in [0, 1]: 'white', 'black' or 'r,g,b'.

    Raises OptionError for anything else."""
    t = text.strip().lower()
    if t == "white":
        return (1.0, 1.0, 1.0)
    if t == "black":
        return (0.0, 0.0, 0.0)
    try:
        vals = [float(v) for v in t.split(",")]
    except ValueError:
        vals = []
    if len(vals) != 3 or not all(0.0 <= v <= 1.0 for v in vals):
        raise OptionError(f"--background {text!r}: use white, black or 'r,g,b' with values in [0, 1]")
    return tuple(vals)


def run(args) -> int:
    import torch

    from physskin_gs.io import drop_invalid
    from physskin_gs.render import auto_frame, render_scene_frame, to_uint8, write_video

    src, out = require_input_file(args.path), str(args.output)
    ext = Path(out).suffix.lower()
    check_int("--turntable", args.turntable, 0, 100_000, unit="frames")
    check_int("--mesh-gaussians", args.mesh_gaussians, 16, 10_000_000)
    if args.frame is not None:
        check_int("--frame", args.frame, 1, 10_000_000)
    if args.turntable and ext not in _VIDEO_EXT:
        raise OptionError(f"--turntable writes a video; give -o a {'/'.join(sorted(_VIDEO_EXT))} path, got {out!r}")
    if not args.turntable and ext not in _IMAGE_EXT:
        raise OptionError(f"-o must end in .png or .jpg (or use --turntable N with .mp4), got {out!r}")
    target = Output("-o", out, replace=args.force)
    refuse_inputs([target], [src])
    if args.width <= 0 or args.height <= 0 or args.width > 16384 or args.height > 16384:
        raise OptionError(f"--width/--height must be in 1..16384, got {args.width}x{args.height}")
    check_number("--fov", args.fov, 0.0, 180.0, lo_open=True, hi_open=True, unit="degrees")
    check_number("--fps", args.fps, 0.0, 1000.0, lo_open=True)
    check_number("--azimuth", args.azimuth, -3600.0, 3600.0, unit="degrees")
    check_number("--elevation", args.elevation, -90.0, 90.0, lo_open=True, hi_open=True, unit="degrees")
    if args.distance is not None:
        check_number("--distance", args.distance, 0.0, None, lo_open=True, unit="scene units")
    if args.sh_degree is not None:
        check_int("--sh-degree", args.sh_degree, 0, 4)
    auto_up, up = resolve_up_option(args.up)
    background = parse_background(args.background)
    claim_outputs([target], inputs=[src])  # every option is valid: now the output (folders made, lock taken)
    width, height = args.width, args.height
    if args.turntable:
        w16, h16 = 16 * math.ceil(width / 16), 16 * math.ceil(height / 16)
        if (w16, h16) != (width, height):
            print(f"note: video frames must be multiples of 16; rendering {w16}x{h16}", file=sys.stderr)
        width, height = w16, h16

    from physskin_gs.cli._common import load_scene_or_mesh, warn_scene

    scene = load_scene_or_mesh(src, args.quat_order, args.mesh_gaussians, frame=args.frame)

    warn_scene(scene, src)
    if auto_up:
        from physskin_gs.errors import PhysSkinError

        try:
            up = scene_up(scene)
        except PhysSkinError as exc:  # the analysis' message names no file ("no valid opaque Gaussians ...")
            if str(src) in str(exc):
                raise
            raise type(exc)(f"{src}: {exc}") from None
    scene, dropped = drop_invalid(scene)
    if dropped:
        print(f"note: dropped {dropped} Gaussians with non-finite values or zero quaternions", file=sys.stderr)
    if args.sh_degree is not None:
        scene = scene.with_sh_degree(min(args.sh_degree, scene.sh_degree))
    device = torch.device("cuda" if args.backend != "torch" and torch.cuda.is_available() else "cpu")
    if args.backend == "gsplat" and device.type != "cuda":
        raise OptionError("--backend gsplat needs a CUDA device; use --backend torch or auto")
    scene = scene.to(device)
    means = scene.means
    covars = scene.covariances()
    opac = scene.opacities
    sh = scene.sh

    sizes = scene.log_scales.max(dim=1).values.exp()  # [N] largest standard deviations (once, not per frame)

    def camera(azimuth: float):
        return auto_frame(
            means, up=up, azimuth=azimuth, elevation=args.elevation, width=width, height=height,
            fov_y=math.radians(args.fov), distance=args.distance, sizes=sizes,
        )

    def frame(azimuth: float):
        res = render_scene_frame(means, covars, opac, sh, camera(azimuth), background, args.backend)
        return to_uint8(res.rgb), float((res.alpha > 0.5).float().mean())

    t0 = time.perf_counter()
    if not args.turntable:
        import imageio.v2 as imageio

        img, cover = frame(args.azimuth)
        from physskin_gs.io._shared import atomic_output

        try:
            with atomic_output(out) as tmp:
                imageio.imwrite(tmp, img)
        except (OSError, ValueError) as exc:
            raise OutputError(f"could not write {out}: {exc}") from None
        verify_written(out, "image")
        print(
            f"wrote {out} ({width}x{height}, {scene.num_gaussians} Gaussian{'' if scene.num_gaussians == 1 else 's'}, "
            f"SH degree {scene.sh_degree}, "
            f"{100 * cover:.1f}% covered, {time.perf_counter() - t0:.2f} s)"
        )
        return 0

    from physskin_gs import interrupts

    n = args.turntable
    azimuths = [args.azimuth + 360.0 * i / n for i in range(n)]

    def frames():
        from physskin_gs.cli._common import progress_bar

        for az in progress_bar(azimuths, "turntable", "frame"):
            interrupts.check()
            yield frame(az)[0]

    written = write_video(frames(), out, fps=args.fps)  # checked after writing (raises PhysSkinError)
    if not Path(written).is_dir():  # a folder of PNG frames when imageio-ffmpeg is missing (write_video warns)
        verify_written(written, "video")
    print(f"wrote {written} ({n} frames, {width}x{height}, {time.perf_counter() - t0:.1f} s)")
    return 0
