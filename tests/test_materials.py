"""Materials by name (physskin_gs.materials, ``animate --material``): the presets, their resolution against explicit
options, their record in sequence.json, and the physics they give (a stiff material's static sag follows rho / E)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from conftest import blob_scene, save_scene_file


def test_presets_and_lookup():
    from physskin_gs.materials import DEFAULT_MATERIAL, MATERIALS, material
    from physskin_gs.pipeline import AnimationConfig

    d = AnimationConfig()
    soft = material(DEFAULT_MATERIAL)
    assert (soft.E, soft.nu, soft.density) == (d.E, d.nu, d.density)  # the defaults are the "soft" preset
    assert material(" Wood ").E == 1.3e10 and material("rubber").density == 1150.0
    for m in MATERIALS.values():
        assert m.E > 0 and -1.0 < m.nu < 0.5 and m.density > 0 and m.source
    with pytest.raises(KeyError, match="known: soft, jelly, foam, rubber, plastic, wood"):
        material("marble")


def test_explicit_values_win_over_the_preset():
    from physskin_gs.cli.animate import resolve_material
    from physskin_gs.errors import OptionError

    a = SimpleNamespace(material="rubber", E=5e6, nu=None, density=None)
    resolve_material(a)
    assert (a.material, a.E, a.nu, a.density) == ("rubber", 5e6, 0.48, 1150.0)
    b = SimpleNamespace(material=None, E=None, nu=None, density=None)
    resolve_material(b)
    assert (b.material, b.E, b.nu, b.density) == ("soft", 1e5, 0.45, 100.0)
    with pytest.raises(OptionError, match="--material: unknown material 'steel'"):
        resolve_material(SimpleNamespace(material="steel", E=None, nu=None, density=None))
    with pytest.raises(OptionError, match="--material is empty"):
        resolve_material(SimpleNamespace(material=" ", E=None, nu=None, density=None))


def test_cli_records_the_material(tmp_path, capsys):
    from physskin_gs.cli import main

    src = save_scene_file(blob_scene(400, seed=1), tmp_path / "blob.ply")
    out = tmp_path / "seq"
    assert main(["animate", str(src), "--headless", "--frames", "2", "--material", "wood", "--density", "600",
                 "--export", str(out)]) == 0
    mat = json.loads((out / "sequence.json").read_text())["material"]
    assert mat == {"name": "wood", "E": 1.3e10, "nu": 0.35, "density": 600.0}
    assert main(["animate", str(src), "--headless", "--frames", "2", "--material", "steel",
                 "--export", str(tmp_path / "x")]) == 2
    assert "unknown material 'steel' (known: soft, jelly" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()  # refused before any work


def _tip_sag(material_name: str, steps: int = 12) -> float:
    """Static sag (scene units = m) of the free end of a 1 x 0.4 x 0.4 m cantilever of ``material_name``, pinned
    over its first tenth, under gravity along -z, after ``steps`` implicit-Euler steps."""
    from physskin_gs.materials import material
    from physskin_gs.pipeline import AnimationConfig, prepare_animation

    m = material(material_name)
    scene = blob_scene(3000, seed=2)
    cfg = AnimationConfig(E=m.E, nu=m.nu, density=m.density, material=m.name, up="z", floor=False, select="all",
                          scale=1.0, pin="box:-0.6,-0.3,-0.3,-0.4,0.3,0.3", num_handles=8, num_cubature=256)
    anim = prepare_animation(scene, cfg)
    tip = scene.means[:, 0] > 0.4
    z0 = scene.means[tip, 2].double()
    anim.step(steps)
    return float((z0 - anim.deformed_scene().means[tip, 2].double()).mean())


def test_static_sag_follows_density_over_stiffness():
    """Linear elasticity: a cantilever's static sag under its own weight is proportional to rho / E (Euler-Bernoulli
    1.5 rho g L^4 / (E h^2) for a square section; the reduced basis is a little stiffer, the same for both). Plastic
    (rho / E = 5.1e-7 s^2/m^2) sags 12.6 times as far as wood (4.04e-8); both are quasi-static at dt = 0.03 s.
    Measured: plastic 3.9e-5 m (0.82 of Euler-Bernoulli's 4.7e-5), ratio 11.4 (nu 0.39 against 0.35). With the pin
    at a fixed 1e6 / s^2 the plastic beam swung 1.1e-3 m on its pin, 23 times its elastic sag."""
    torch.manual_seed(0)
    plastic, wood = _tip_sag("plastic"), _tip_sag("wood")
    assert plastic > 0 and wood > 0
    analytic = 1.5 * 1020.0 * 9.8 / (2e9 * 0.4 ** 2)  # 4.7e-5 m
    assert 0.5 * analytic < plastic < 1.05 * analytic, (plastic, analytic)
    assert plastic / wood == pytest.approx((1020.0 / 2e9) / (525.0 / 1.3e10), rel=0.15)
