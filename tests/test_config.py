"""Config precedence and locations, with explicit environments: never the developer's own."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from snapd import config as cfg
from snapd.config import ensure_private_dir, load_config
from snapd.errors import ConfigError, PermissionRefused

pytestmark = pytest.mark.timeout(30)
UID = 4242


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "userhome"  # conftest's autouse fixture already owns tmp_path/"home"
    h.mkdir()
    return h


def load(env: dict[str, str], tmp: Path, **overrides: object) -> cfg.Config:
    return load_config(env, overrides, uid=UID, tmp_base=tmp / "tmpbase")


def test_defaults_follow_xdg_fallbacks(home: Path, tmp_path: Path) -> None:
    c = load({"HOME": str(home)}, tmp_path)
    loc = c.locations
    assert loc.home is None
    assert loc.data_dir == loc.state_dir == home / ".local/share/snapd"
    assert loc.store_dir == home / ".local/share/snapd/store"
    assert loc.config_file == home / ".config/snapd/config.toml"
    # No XDG_RUNTIME_DIR: the per-uid directory under the (injected) tmp base.
    assert loc.runtime_dir == tmp_path / "tmpbase" / f"snapd-{UID}"
    assert c.endpoint == f"ipc://{loc.runtime_dir}/control.sock"
    assert (c.retention.max_age_days, c.retention.max_marks) == (14, 2000)
    assert c.retention.budget_bytes == 5 << 30
    assert (c.capture.size_cap, c.request_max_bytes) == (64 << 20, 1 << 20)
    assert (c.log_level, c.log_file, c.capture.extra_ignore) == ("info", None, ())


def test_xdg_variables_are_used(home: Path, tmp_path: Path) -> None:
    env = {"HOME": str(home), "XDG_DATA_HOME": str(tmp_path / "d"),
           "XDG_CONFIG_HOME": str(tmp_path / "c"), "XDG_RUNTIME_DIR": str(tmp_path / "r")}
    loc = load(env, tmp_path).locations
    assert loc.data_dir == tmp_path / "d/snapd"
    assert loc.config_file == tmp_path / "c/snapd/config.toml"
    assert loc.runtime_dir == tmp_path / "r/snapd"


def test_relative_xdg_values_are_ignored(home: Path, tmp_path: Path) -> None:
    env = {"HOME": str(home), "XDG_DATA_HOME": "rel", "XDG_RUNTIME_DIR": "rel"}
    loc = load(env, tmp_path).locations
    assert loc.data_dir == home / ".local/share/snapd"
    assert loc.runtime_dir == tmp_path / "tmpbase" / f"snapd-{UID}"


def test_snapd_home_holds_everything(tmp_path: Path) -> None:
    h = tmp_path / "sh"
    env = {"HOME": "/nonexistent", "SNAPD_HOME": str(h), "XDG_RUNTIME_DIR": "/run/user/1"}
    loc = load(env, tmp_path).locations
    assert (loc.home, loc.state_dir, loc.data_dir) == (h, h, h)
    assert loc.runtime_dir == h / "run"
    assert loc.config_file == h / "config.toml"
    assert loc.lock_file == h / "snapd.lock" and loc.endpoint_file == h / "endpoint"


def test_relative_snapd_home_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="absolute"):
        load({"SNAPD_HOME": "relative/dir"}, tmp_path)


def test_long_snapd_home_gets_a_short_deterministic_socket(tmp_path: Path) -> None:
    long_home = tmp_path / ("x" * 120)
    env = {"SNAPD_HOME": str(long_home)}
    # The temp base as short as /tmp is: pytest's own temp path may already be too long for
    # a socket (/tmp/pytest-of-root/pytest-2931/test_long_snapd_home_gets_a_sh0/...).
    short = Path(tempfile.mkdtemp(prefix="snapd-t-", dir="/tmp"))
    try:
        c = load(env, short)
        sock = c.locations.socket_path
        assert len(os.fsencode(sock)) <= cfg.IPC_PATH_MAX
        assert sock.parent.parent == short / "tmpbase"
        assert sock.parent.name.startswith(f"snapd-{UID}-")
        assert load(env, short).endpoint == c.endpoint  # a client computes the same one
        other = load({"SNAPD_HOME": str(long_home) + "2"}, short)
    finally:
        shutil.rmtree(short)
    assert other.endpoint != c.endpoint
    # The daemon records what it bound where clients look first.
    cfg.write_endpoint_file(c.locations.state_dir, c.endpoint)
    assert cfg.read_endpoint_file(long_home) == c.endpoint
    assert cfg.resolve_endpoint(c) == c.endpoint
    assert stat.S_IMODE(os.stat(long_home / "endpoint").st_mode) == 0o600


def test_endpoint_file_takes_precedence_and_is_validated(tmp_path: Path) -> None:
    c = load({"SNAPD_HOME": str(tmp_path / "h")}, tmp_path)
    assert cfg.read_endpoint_file(c.locations.state_dir) is None
    assert cfg.resolve_endpoint(c) == c.endpoint
    cfg.write_endpoint_file(c.locations.state_dir, "ipc:///elsewhere/s")
    assert cfg.resolve_endpoint(c) == "ipc:///elsewhere/s"
    (tmp_path / "h" / "endpoint").write_text("tcp://0.0.0.0:1\n")
    with pytest.raises(ConfigError, match="ipc://"):
        cfg.read_endpoint_file(c.locations.state_dir)


def write_config(tmp_path: Path, text: str) -> dict[str, str]:
    h = tmp_path / "h"
    h.mkdir(exist_ok=True)
    (h / "config.toml").write_text(text)
    return {"SNAPD_HOME": str(h)}


def test_precedence_defaults_file_env_overrides(tmp_path: Path) -> None:
    env = write_config(tmp_path, """
log_level = "debug"
size_cap = "1 MiB"
extra_ignore = ["*.log", "!keep.log"]
barrier_timeout_s = 2
[retention]
max_marks = 10
budget_bytes = "2 GiB"
""")
    c = load(env, tmp_path)
    assert (c.log_level, c.capture.size_cap, c.capture.barrier_timeout_s) == ("debug", 1 << 20, 2.0)
    assert c.capture.extra_ignore == ("*.log", "!keep.log")
    assert (c.retention.max_marks, c.retention.budget_bytes) == (10, 2 << 30)
    assert c.retention.max_age_days == 14  # untouched default

    env |= {"SNAPD_LOG_LEVEL": "WARNING", "SNAPD_RETENTION_MAX_MARKS": "20",
            "SNAPD_SIZE_CAP": "2048"}
    c = load(env, tmp_path)
    assert (c.log_level, c.retention.max_marks, c.capture.size_cap) == ("warning", 20, 2048)

    c = load(env, tmp_path, log_level="error", **{"retention.max_marks": 30})
    assert (c.log_level, c.retention.max_marks, c.capture.size_cap) == ("error", 30, 2048)


def test_overrides_choose_home_and_config_file(tmp_path: Path) -> None:
    (tmp_path / "other.toml").write_text('log_level = "error"\n')
    c = load({"SNAPD_HOME": str(tmp_path / "a")}, tmp_path, home=str(tmp_path / "b"),
             config_file=str(tmp_path / "other.toml"))
    assert c.locations.home == tmp_path / "b"
    assert c.log_level == "error"


def test_explicit_missing_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        load({"SNAPD_HOME": str(tmp_path), "SNAPD_CONFIG": str(tmp_path / "nope.toml")},
             tmp_path)


@pytest.mark.parametrize(
    "text, fragments",
    [
        ("log_level = ", ["not valid TOML"]),
        ("colour = 1", ["unknown setting 'colour'"]),
        ("[retention]\nmax_mark = 3", ["unknown setting 'retention.max_mark'"]),
        ("size_cap = -1", ["'size_cap' must be a positive size", "-1"]),
        ("size_cap = \"64 MB\"", ["'size_cap' must be a positive size"]),
        ("log_level = \"loud\"", ["'log_level' must be one of debug"]),
        ("extra_ignore = \"*.log\"", ["'extra_ignore' must be a list"]),
        ("log_file = \"relative.log\"", ["'log_file' must be an absolute path"]),
        ("[retention]\nmax_marks = true", ["'retention.max_marks' must be a positive integer"]),
    ],
)
def test_bad_config_file_names_file_and_key(
    tmp_path: Path, text: str, fragments: list[str]
) -> None:
    env = write_config(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load(env, tmp_path)
    assert str(tmp_path / "h" / "config.toml") in info.value.message
    for fragment in fragments:
        assert fragment in info.value.message


def test_bad_environment_value_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="environment variable SNAPD_BARRIER_TIMEOUT_S"):
        load({"SNAPD_HOME": str(tmp_path), "SNAPD_BARRIER_TIMEOUT_S": "soon"}, tmp_path)


def test_unknown_override_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown setting 'colour'"):
        load({"SNAPD_HOME": str(tmp_path)}, tmp_path, colour=True)


def test_ensure_private_dir_ignores_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        d = ensure_private_dir(tmp_path / "a" / "b")
    finally:
        os.umask(old)
    assert stat.S_IMODE(d.stat().st_mode) == 0o700


def test_ensure_private_dir_tightens_our_own_open_dir(tmp_path: Path) -> None:
    d = tmp_path / "open"
    d.mkdir()
    d.chmod(0o755)
    ensure_private_dir(d)
    assert stat.S_IMODE(d.stat().st_mode) == 0o700


def test_symlinked_runtime_dir_is_refused(tmp_path: Path) -> None:
    c = load({"HOME": str(tmp_path)}, tmp_path)
    runtime = c.locations.runtime_dir
    runtime.parent.mkdir(parents=True)
    (tmp_path / "attacker").mkdir()
    runtime.symlink_to(tmp_path / "attacker")
    with pytest.raises(PermissionRefused, match="symbolic link"):
        ensure_private_dir(runtime, uid=os.getuid())


def test_dir_owned_by_someone_else_is_refused(tmp_path: Path) -> None:
    d = tmp_path / f"snapd-{UID}"
    d.mkdir(mode=0o700)
    with pytest.raises(PermissionRefused, match=f"belongs to uid {os.getuid()}, not to uid {UID}"):
        ensure_private_dir(d, uid=UID)


def test_file_in_place_of_dir_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(PermissionRefused, match="cannot be used"):
        ensure_private_dir(tmp_path / "f")


def test_a_client_load_is_lenient_and_says_what_it_ignored(tmp_path: Path) -> None:
    """Issue 14, point 2: a client finds the daemon despite a broken setting; the daemon's
    own (strict) load still refuses it."""
    env = write_config(tmp_path, "log_levle = 1\nsize_cap = \"1 KiB\"\n[retention]\nmax_marks = -3\n")
    env["SNAPD_BARRIER_TIMEOUT_S"] = "soon"
    with pytest.raises(ConfigError):
        load(env, tmp_path)
    config = load_config(env, uid=UID, tmp_base=tmp_path / "tmpbase", lenient=True)
    assert config.locations.state_dir == tmp_path / "h"
    assert config.capture.size_cap == 1024  # the good settings still apply
    assert config.retention.max_marks == cfg.Retention().max_marks
    text = "\n".join(config.warnings)
    assert "log_levle" in text and "retention.max_marks" in text and "SNAPD_BARRIER_TIMEOUT_S" in text
    broken = write_config(tmp_path, "not toml [")
    assert "not valid TOML" in load_config(broken, uid=UID, lenient=True).warnings[0]
    # locations are never guessed: a relative SNAPD_HOME is an error even for a client
    with pytest.raises(ConfigError):
        load_config({"SNAPD_HOME": "relative"}, uid=UID, lenient=True)


def test_unknown_snapd_variables_are_warned_about(tmp_path: Path) -> None:
    """Issue 14, point 14: misspelled or list-valued SNAPD_* variables are named, not ignored."""
    env = {"SNAPD_HOME": str(tmp_path), "SNAPD_RETENTION_MAX_MARK": "5", "SNAPD_EXTRA_IGNORE": "*.log",
           "SNAPD_CONFIG": ""}
    warnings = load(env, tmp_path).warnings
    assert len(warnings) == 2, warnings
    assert "SNAPD_RETENTION_MAX_MARK " in warnings[1]
    assert "did you mean SNAPD_RETENTION_MAX_MARKS" in warnings[1]
    assert "SNAPD_EXTRA_IGNORE" in warnings[0] and "no environment form" in warnings[0]
    assert load({"SNAPD_HOME": str(tmp_path), "SNAPD_LOG_LEVEL": "debug"}, tmp_path).warnings == ()
    # the crash tests' seam is armed by tests/crash_launcher.py, not by a variable snapd reads
    (stray,) = load({"SNAPD_HOME": str(tmp_path), "SNAPD_TEST_CRASH_AFTER": "apply.:1"}, tmp_path).warnings
    assert "SNAPD_TEST_CRASH_AFTER" in stray


def test_client_deadline_has_no_default_so_commands_keep_theirs(tmp_path: Path) -> None:
    """Issue 14, point 5: unset client_timeout_s means "each command's own deadline"."""
    assert load({"SNAPD_HOME": str(tmp_path)}, tmp_path).client_timeout_s is None
    set_by_env = load({"SNAPD_HOME": str(tmp_path), "SNAPD_CLIENT_TIMEOUT_S": "2.5"}, tmp_path)
    assert set_by_env.client_timeout_s == 2.5
    for bad in ("inf", "nan", "0", "-1"):
        with pytest.raises(ConfigError):
            load({"SNAPD_HOME": str(tmp_path), "SNAPD_CLIENT_TIMEOUT_S": bad}, tmp_path)


def test_the_documented_settings_are_the_settings_with_their_defaults() -> None:
    """Issue 9: each setting is defined once, under its documented name (docs/operations.md,
    the config.toml example): every key there is a setting, its example value parses, and the
    layers read the one Config's groups (a workspace's CaptureSettings, the GC's Retention)."""
    import tomllib

    text = (Path(__file__).parent.parent / "docs" / "operations.md").read_text()
    example = text.split("```toml\n", 1)[1].split("```", 1)[0]
    doc = tomllib.loads(example)
    keys = {f"retention.{k}": v for k, v in doc.pop("retention").items()} | doc
    assert set(keys) <= set(cfg.SETTINGS), set(keys) - set(cfg.SETTINGS)
    for key, value in keys.items():
        cfg.parse_setting(key, value)
    assert {k for k, s in cfg.SETTINGS.items() if s.holder == "capture"} == {
        "size_cap", "extra_ignore", "precious", "barrier_timeout_s", "watch_limit", "scan_fs_types"}
    defaults = cfg.Config(cfg.resolve_locations({}, "/x", None, UID, Path("/tmp")))
    assert defaults.capture == cfg.CaptureSettings() and defaults.capture.size_cap == 64 << 20
    assert defaults.retention == cfg.Retention() and defaults.gc_interval_s == 3600
