"""Package-level behaviour: importing the library has no side effects; the CLI sets the OpenMP wait policy before
torch loads (physskin_gs/cli/__init__.py)."""

from __future__ import annotations

import os
import subprocess
import sys


def _run(code: str, env_value=None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if env_value is not None:
        env["OMP_WAIT_POLICY"] = env_value
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_library_import_has_no_side_effects():
    code = "import sys, os, physskin_gs; print('torch' in sys.modules, os.environ.get('OMP_WAIT_POLICY'))"
    assert _run(code) == "False None"
    assert _run("import physskin_gs; print(physskin_gs.GaussianScene.__name__)") == "GaussianScene"


def test_cli_sets_passive_openmp_wait_policy_and_user_setting_wins():
    code = "import os, physskin_gs.cli, torch; print(os.environ.get('OMP_WAIT_POLICY'))"
    assert _run(code) == "PASSIVE"
    assert _run(code, "ACTIVE") == "ACTIVE"
