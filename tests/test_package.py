"""Package-level behaviour: importing the library has no side effects; the CLI sets the OpenMP wait policy and
single-threaded OpenBLAS before torch and numpy load (physskin_gs/_runtime.py, physskin_gs/cli/__init__.py)."""

from __future__ import annotations

import os
import subprocess
import sys


def _run(code: str, env_value=None, blas_value=None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OPENBLAS_NUM_THREADS")}
    if env_value is not None:
        env["OMP_WAIT_POLICY"] = env_value
    if blas_value is not None:
        env["OPENBLAS_NUM_THREADS"] = blas_value
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_library_import_has_no_side_effects():
    code = ("import sys, os, physskin_gs; print('torch' in sys.modules, 'numpy' in sys.modules, "
            "os.environ.get('OMP_WAIT_POLICY'), os.environ.get('OPENBLAS_NUM_THREADS'))")
    assert _run(code) == "False False None None"
    assert _run("import physskin_gs; print(physskin_gs.GaussianScene.__name__)") == "GaussianScene"


def test_cli_sets_passive_openmp_wait_policy_and_user_setting_wins():
    code = "import os, physskin_gs.cli, torch; print(os.environ.get('OMP_WAIT_POLICY'))"
    assert _run(code) == "PASSIVE"
    assert _run(code, "ACTIVE") == "ACTIVE"


def test_cli_sets_single_threaded_openblas_before_numpy_and_user_setting_wins():
    # numpy's OpenBLAS reads the variable when it loads: the count it runs with is the proof, not the variable
    code = ("import os, physskin_gs.cli, numpy, threadpoolctl; "
            "print(os.environ.get('OPENBLAS_NUM_THREADS'), "
            "[i['num_threads'] for i in threadpoolctl.threadpool_info() if i['internal_api'] == 'openblas'][:1])")
    assert _run(code) == "1 [1]"
    out = _run(code, blas_value="2")
    assert out.startswith("2 ")
    # a numpy that was loaded first keeps its runtime: the CLI does not pretend otherwise
    code_late = "import numpy, os, physskin_gs.cli; print(os.environ.get('OPENBLAS_NUM_THREADS'))"
    assert _run(code_late) == "None"
