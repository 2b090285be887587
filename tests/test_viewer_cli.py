"""`physskin-gs animate` (viewer mode) through the real command line.

Needs the real pipeline (physskin_gs/pipeline.py) and the CLI's animate parser; skipped until both exist.
Every wait is bounded; the server binds 127.0.0.1 on a free port (``--port 0``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from physskin_gs.cli import main


def _animate_cli_ready() -> bool:
    try:
        import physskin_gs.pipeline  # noqa: F401
    except ImportError:
        return False
    from physskin_gs.cli import animate

    return "not available" not in (animate.__doc__ or "") + (animate.run.__doc__ or "")


pytestmark = pytest.mark.skipif(not _animate_cli_ready(), reason="physskin_gs.pipeline / animate CLI not available yet")


def test_bad_path_is_a_clear_error_before_any_server(tmp_path, monkeypatch, capsys):
    import viser

    started = []
    monkeypatch.setattr(viser, "ViserServer", lambda *a, **k: started.append(1))
    missing = tmp_path / "nope.ply"
    assert main(["animate", str(missing)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error:") and "nope.ply" in err[-1]
    bad = tmp_path / "garbage.splat"
    bad.write_bytes(b"\x00" * 33)  # not a multiple of 32 bytes
    assert main(["animate", str(bad)]) == 2
    assert "garbage.splat" in capsys.readouterr().err
    assert started == []


def test_animate_prints_url_serves_page_and_exits_cleanly_on_ctrl_c(splat_file):
    path = splat_file("spot_mesh2splat_10k.splat")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "physskin_gs", "animate", str(path), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        # a suite started in the background by a non-interactive shell inherits SIGINT ignored, and Python keeps
        # an ignored SIGINT ignored: give the child the default, as a terminal would
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines = []
    try:
        url = None
        end = time.monotonic() + 120
        os.set_blocking(proc.stdout.fileno(), False)
        buf = ""
        while url is None and time.monotonic() < end and proc.poll() is None:
            chunk = proc.stdout.read() or b""
            buf += chunk.decode("utf-8", "replace")
            for line in buf.splitlines():
                if "viewer running at " in line:
                    url = line.split("viewer running at ")[1].split()[0]
            time.sleep(0.1)
        lines.append(buf)
        assert url is not None, f"no URL printed; output:\n{buf}"
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url, timeout=10) as r:
            assert r.status == 200
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
