"""`physskin-gs convert` (placeholder: being built)."""

from physskin_gs.errors import PhysSkinError


def register(sub) -> None:
    p = sub.add_parser("convert", help="(not available yet)")
    p.set_defaults(func=run)


def run(args) -> int:
    raise PhysSkinError("'convert' is not available yet")
