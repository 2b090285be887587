"""Subspace physics on skinning handles (method.md 9): analytic stable Neo-Hookean kernels and the backward-Euler
Newton simulator. See :mod:`physskin_gs.physics.simulator` and :mod:`physskin_gs.physics.neohookean`."""

from physskin_gs.physics.neohookean import (
    energy_density,
    first_piola,
    hessian,
    project_psd_eigh,
    projected_hessian,
    svd3,
    sym3_eigh,
)
from physskin_gs.physics.simulator import StepStats, SubspaceSimulator, orthonormal_handle_basis

__all__ = [
    "SubspaceSimulator",
    "StepStats",
    "orthonormal_handle_basis",
    "energy_density",
    "first_piola",
    "hessian",
    "projected_hessian",
    "project_psd_eigh",
    "svd3",
    "sym3_eigh",
]
