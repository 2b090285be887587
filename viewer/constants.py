"""Names and numbers shared by the viewer's parts (GUI labels, display modes, opacity factors).

Kept apart so that :mod:`.panel`, :mod:`.display`, :mod:`.interaction`, :mod:`.switching` and :mod:`.app` can
use them without importing each other; :mod:`.app` re-exports the display modes and ``XRAY_OPACITY`` under their old names.
"""

from __future__ import annotations

DISPLAY_CLIENT = "client splats"
DISPLAY_TORCH = "server render (torch, CPU)"
DISPLAY_GSPLAT = "server render (gsplat, CUDA)"
#: Short names accepted for ``display`` (the CLI's ``--display``).
DISPLAY_ALIASES = {"client": DISPLAY_CLIENT, "torch": DISPLAY_TORCH, "gsplat": DISPLAY_GSPLAT}

FIELD_NONE = "scene colours"
FIELD_ALL = "all handles (argmax)"

#: Pin region used by the "pin region" checkbox when the config names none (bottom 10% of the object).
DEFAULT_PIN = "below:0.1"
#: Opacity factor of the "x-ray" display option (handle markers inside the object become visible).
XRAY_OPACITY = 0.3
#: Opacity factor of the "dim static" display option (the static rows: support, background, floaters).
DIM_OPACITY = 0.35
#: Grey the "dim static" option blends the static rows' colours toward, and how far (0 = own colour, 1 = grey).
DIM_GREY = 0.55
DIM_MIX = 0.7
GRAVITY_DIRS = ["down (-up)", "-x", "+x", "-y", "+y", "-z", "+z"]

#: Entries of the "select" dropdown: the scene analysis' object, every row, or the box of the box gizmo.
SELECT_AUTO = "auto"
SELECT_ALL = "all"
SELECT_BOX = "box"
SELECT_CHOICES = [SELECT_AUTO, SELECT_ALL, SELECT_BOX]
#: Entries of the "up axis" dropdown (``AnimationConfig.up`` takes them with or without the "+").
UP_CHOICES = ["auto", "+x", "-x", "+y", "-y", "+z", "-z"]
