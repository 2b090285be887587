"""Materials by name: Young's modulus E (Pa), Poisson ratio nu and density (kg/m^3) of common things.

``--material NAME`` (animate) and the viewer's *Material* dropdown set all three at once; an explicit ``--E``,
``--nu`` or ``--density`` still wins over the preset's value. The values are typical small-strain handbook
values (a real object varies by a factor of a few), chosen so an object behaves like the thing it is:

============  =========  =====  =========  ===================================================================
name          E (Pa)     nu     density    source
============  =========  =====  =========  ===================================================================
``soft``      1e5        0.45   100        the default: a soft toy (``animate`` without a material raises its E
                                           until the object stands: pipeline.STAND_SAG)
``jelly``     2e4        0.45   1030       PVA / gelatin hydrogels, about 20 kPa (Biomech. Model. Mechanobiol.
                                           8, 2009, 345: PVA gel E0 18-24 kPa; hydrogels span 1-300 kPa)
``foam``      5e4        0.30   30         flexible polyurethane seat foam: 22-35 kg/m^3 (foam selection guides);
                                           E from Gibson and Ashby's open-cell scaling E = E_s (rho / rho_s)^2
                                           with a 50 MPa solid at 1200 kg/m^3: about 30-50 kPa; foams have low nu
``rubber``    2e6        0.48   1150       natural rubber, small strain: E 1-5 MPa; density 1150 (Mechanical
                                           Engineering Handbook, rubbers table)
``plastic``   2e9        0.39   1020       ABS: E 2 GPa, nu 0.39, 1020 kg/m^3 (Mechanical Engineering
                                           Handbook, plastics table; 1.4-3.1 GPa in other tables)
``wood``      1.3e10     0.35   525        Douglas fir along the grain: E 13 GPa, 525 kg/m^3 (Halliday, Resnick,
                                           Walker, Table 13-1; Callister B.2: 10.8-13.6 GPa); isotropic here
``stone``     5e10       0.25   2700       natural stone (granite, marble): E about 50 GPa (natural-stone
                                           tables; granite 30-70 GPa), 2600-2800 kg/m^3, nu 0.25
``glass``     6.9e10     0.23   2500       soda-lime glass: E 69 GPa, nu 0.23, 2.5 g/cm^3 (Callister B.2-B.3)
``aluminium`` 6.9e10     0.33   2700       6061 aluminium alloy: E 69 GPa, nu 0.33, 2.70 g/cm^3 (Callister
                                           B.2-B.3); ``aluminum`` is accepted as its name too
``steel``     2.07e11    0.30   7850       plain carbon steel (1020): E 207 GPa, nu 0.30, 7.85 g/cm^3
                                           (Callister B.2-B.3)
============  =========  =====  =========  ===================================================================

The stone, glass and metal presets are as stiff as they are: at everyday sizes an object of them does not visibly
bend under its own weight or a drag; it falls, lands and is pushed as a (near) rigid body.

The simulator is isotropic Neo-Hookean; wood's anisotropy (E across the grain is 20x lower) is not modelled.
Pure data: no file, GUI or CLI code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

__all__ = ["Material", "MATERIALS", "DEFAULT_MATERIAL", "material", "stiffer_materials", "parse_pressure"]


@dataclass(frozen=True)
class Material:
    """A named isotropic material: E Young's modulus (Pa), nu Poisson ratio, density (kg/m^3), source (text)."""

    name: str
    E: float
    nu: float
    density: float
    source: str


MATERIALS: Dict[str, Material] = {m.name: m for m in (
    Material("soft", 1e5, 0.45, 100.0, "the default: a soft toy"),
    Material("jelly", 2e4, 0.45, 1030.0, "PVA / gelatin hydrogels, about 20 kPa"),
    Material("foam", 5e4, 0.30, 30.0, "flexible polyurethane foam"),
    Material("rubber", 2e6, 0.48, 1150.0, "natural rubber, small strain"),
    Material("plastic", 2e9, 0.39, 1020.0, "ABS"),
    Material("wood", 1.3e10, 0.35, 525.0, "Douglas fir along the grain (isotropic here)"),
    Material("stone", 5e10, 0.25, 2700.0, "natural stone (granite, marble)"),
    Material("glass", 6.9e10, 0.23, 2500.0, "soda-lime glass"),
    Material("aluminium", 6.9e10, 0.33, 2700.0, "6061 aluminium alloy"),
    Material("steel", 2.07e11, 0.30, 7850.0, "plain carbon steel"),
)}

#: Other spellings accepted by :func:`material` (not listed as presets of their own).
ALIASES: Dict[str, str] = {"aluminum": "aluminium"}

#: The material of the animation defaults (``AnimationConfig``'s E, nu and density).
DEFAULT_MATERIAL = "soft"


_PRESSURE_UNITS = {"pa": 1.0, "kpa": 1e3, "mpa": 1e6, "gpa": 1e9}


def parse_pressure(text) -> float:
    """A Young's modulus as a user types it, in Pa: a plain number (``2e9``, ``240000``; nan and inf too, for the
    caller's range check to name) or a number with Pa / kPa / MPa / GPa (any case, a space allowed: ``100kPa``,
    ``2 MPa``). Raises ValueError naming ``text`` otherwise."""
    import re

    t = str(text).strip()
    try:
        return float(t)
    except ValueError:
        pass
    m = re.fullmatch(r"([-+0-9.eE]+)\s*([A-Za-z]+)?", t)
    if m is None:
        raise ValueError(text)
    unit = (m.group(2) or "pa").lower()
    if unit not in _PRESSURE_UNITS:
        raise ValueError(text)
    return float(m.group(1)) * _PRESSURE_UNITS[unit]


def stiffer_materials(E: float, density: float, limit: int = 3) -> list:
    """Names of the named materials at least as stiff as ``E`` (Pa) that sag under their own weight at most 2/3
    as much as ``E`` at ``density`` (kg/m^3) does (a sag goes as density / E, so a light foam can qualify), the
    ``limit`` least stiff of them; an empty list when none is. Raises nothing."""
    fits = [m for m in MATERIALS.values() if m.E >= E and m.E / m.density >= 1.5 * E / max(density, 1e-30)]
    return [m.name for m in sorted(fits, key=lambda m: m.E)][:limit]


def material(name: str) -> Material:
    """The :class:`Material` called ``name`` (case-insensitive; :data:`ALIASES` too). Raises KeyError naming the
    known materials."""
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    if key not in MATERIALS:
        raise KeyError(f"unknown material {name!r} (known: {', '.join(MATERIALS)})")
    return MATERIALS[key]
