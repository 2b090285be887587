"""`physskin-gs train` (placeholder: being built)."""

from physskin_gs.errors import PhysSkinError


def register(sub) -> None:
    p = sub.add_parser("train", help="(not available yet)")
    p.set_defaults(func=run)


def run(args) -> int:
    raise PhysSkinError("'train' is not available yet")
