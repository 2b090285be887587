"""Package-level behaviour: the OpenMP wait policy set before torch loads (physskin_gs/__init__.py)."""

from __future__ import annotations

import os
import subprocess
import sys


def _policy(env_value=None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if env_value is not None:
        env["OMP_WAIT_POLICY"] = env_value
    code = "import physskin_gs, os, torch; print(os.environ.get('OMP_WAIT_POLICY'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_passive_openmp_wait_policy_by_default_and_user_setting_wins():
    assert _policy() == "PASSIVE"
    assert _policy("ACTIVE") == "ACTIVE"
