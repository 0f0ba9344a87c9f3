"""CI's tiers (.ci/tiers.py), run for real on small test directories: a tier whose pytest run
selects no test fails (it once passed as "no tests yet", even the core tier), a tier whose
tests pass passes, and under ``CI`` a test that skips fails with its reason."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(120)


def tiers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tiers", ROOT / ".ci" / "tiers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tier_of(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> str:
    """The verdict of a tier that runs pytest (as CI does: tiers.PYTEST, from the checkout) on
    a directory holding one test file with ``source``."""
    t = tiers()
    d = tmp_path / name
    d.mkdir()
    (d / f"test_{name}.py").write_text(source)
    monkeypatch.chdir(ROOT)  # tiers.PYTEST names the checkout's venv relative to it
    verdict, _ = t.tier(name, 60, [[*t.PYTEST, "-q", "--rootdir", str(d), str(d)]], 60.0)
    return str(verdict)


def test_a_tier_whose_pytest_selects_no_test_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    verdict = tier_of(tmp_path, monkeypatch, "empty", "def helper() -> None:\n    pass\n")
    assert verdict.startswith("FAILED") and "selected no test" in verdict, verdict


def test_a_tier_whose_tests_pass_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert tier_of(tmp_path, monkeypatch, "full", "def test_one() -> None:\n    assert True\n") == "passed"


def test_under_ci_a_skip_fails_with_its_reason(tmp_path: Path) -> None:
    """tests/conftest.py: under ``CI`` a skip (a ``skipif`` mark, or ``pytest.skip`` in the
    test) is a failure naming the reason; elsewhere it stays a skip."""
    (tmp_path / "test_skips.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.skipif(True, reason='no frobnicator here')\n"
        "def test_marked() -> None:\n    pass\n\n"
        "def test_inline() -> None:\n    pytest.skip('no widget here')\n\n"
        "@pytest.mark.xfail(strict=True)\n"
        "def test_expected_failure() -> None:\n    assert False\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", "-p", "conftest",
           "--rootdir", str(tmp_path), str(tmp_path)]
    ci = subprocess.run(cmd, env={**env, "CI": "true"}, capture_output=True, cwd=tmp_path, timeout=90)
    out = ci.stdout.decode()
    assert ci.returncode == 1, out
    assert "skipped" not in out and "1 xfailed" in out, out  # a skipif fails at set-up: an error
    assert "no frobnicator here" in out and "no widget here" in out, out
    env.pop("CI", None)
    local = subprocess.run(cmd, env=env, capture_output=True, cwd=tmp_path, timeout=90)
    assert local.returncode == 0 and "2 skipped" in local.stdout.decode(), local.stdout.decode()

