"""`physskin-gs info` (placeholder: being built)."""

from physskin_gs.errors import PhysSkinError


def register(sub) -> None:
    p = sub.add_parser("info", help="(not available yet)")
    p.set_defaults(func=run)


def run(args) -> int:
    raise PhysSkinError("'info' is not available yet")
