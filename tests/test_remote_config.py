"""The ``[remotes.NAME]`` tables of config.toml (snapd/remote_config.py, docs/operations.md
"Remotes"): read strictly by the daemon with an error naming the file and the key, leniently by a
client; added and removed by `remote add` / `remote remove` keeping the user's comments."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from e2e_helpers import base_env

from snapd import remote_config
from snapd.config import load_config, service_environment
from snapd.errors import ConfigError, NotFound, UsageError

pytestmark = pytest.mark.timeout(60)

GOOD = """\
# my snapd settings
size_cap = "2 MiB"  # keep big files out

[remotes.backup]
# the bucket the CI boxes share
url = "s3://my-bucket/snapd"
endpoint = "http://127.0.0.1:9000"
region = "us-east-1"
profile = "snapd"
password_file = "/home/me/.snapd-pass"
push = "on-mark"

[remotes.nas]
url = "file:///mnt/nas/snapd"
"""


def _env(tmp_path: Path, text: str) -> dict[str, str]:
    home = tmp_path / "h"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(text)
    return {"SNAPD_HOME": str(home)}


def test_remote_tables_are_read_with_the_settings(tmp_path: Path) -> None:
    config = load_config(_env(tmp_path, GOOD))
    assert config.capture.size_cap == 2 << 20  # the settings beside them still apply
    assert dict(config.remotes) == {
        "backup": {
            "url": "s3://my-bucket/snapd", "endpoint": "http://127.0.0.1:9000", "region": "us-east-1",
            "profile": "snapd", "password_file": "/home/me/.snapd-pass", "push": "on-mark",
        },
        "nas": {"url": "file:///mnt/nas/snapd"},
    }
    assert config.warnings == ()
    assert load_config(_env(tmp_path / "none", "")).remotes == {}


@pytest.mark.parametrize(
    ("table", "key", "says"),
    [
        ('url = "s3://b/p"\npush = "always"', "remotes.r.push", 'one of "manual", "on-mark"'),
        ('url = "s3://b/p"\npasword_file = "/x"', "remotes.r.pasword_file", "unknown key"),
        ('url = "s3://b/p"\npassword_file = "pass.txt"', "remotes.r.password_file", "an absolute path"),
        ('url = "s3://b/p"\nendpoint = "127.0.0.1:9000"', "remotes.r.endpoint", "http:// or https://"),
        ('url = "http://b/p"', "remotes.r.url", "s3://BUCKET/PREFIX or file:///DIR"),
        ('url = 3', "remotes.r.url", "s3://BUCKET/PREFIX"),
        ('region = "eu"', "remotes.r.url", "has no url"),
    ],
)
def test_a_bad_remote_table_is_refused_naming_the_file_and_the_key(
    tmp_path: Path, table: str, key: str, says: str
) -> None:
    env = _env(tmp_path, f"size_cap = \"2 MiB\"\n[remotes.r]\n{table}\n")
    with pytest.raises(ConfigError) as err:
        load_config(env)
    assert err.value.details["key"] == key
    assert str(tmp_path / "h" / "config.toml") in err.value.message and says in err.value.message
    # a client is lenient: the table is left out, said so, and the other settings apply
    client = load_config(env, lenient=True)
    assert client.remotes == {} and client.capture.size_cap == 2 << 20
    assert any(key.rsplit(".", 1)[0] in w for w in client.warnings), client.warnings


def test_remotes_must_be_tables_of_tables_with_usable_names(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must hold \\[remotes.NAME\\] tables"):
        load_config(_env(tmp_path, 'remotes = "s3://b/p"\n'))
    with pytest.raises(ConfigError, match="must be a table"):
        load_config(_env(tmp_path, '[remotes]\nr = "s3://b/p"\n'))
    with pytest.raises(ConfigError, match="not a remote name"):
        load_config(_env(tmp_path, '[remotes."bad name"]\nurl = "s3://b/p"\n'))


def test_the_remote_password_variable_is_known(tmp_path: Path) -> None:
    """SNAPD_REMOTE_PASSWORD is read by remote commands: not a misspelled setting."""
    env = {"SNAPD_HOME": str(tmp_path), "SNAPD_REMOTE_PASSWORD": "pw", "SNAPD_REMOTE_PASSWROD": "pw"}
    (warning,) = load_config(env).warnings
    assert "SNAPD_REMOTE_PASSWROD" in warning
    # a secret: never copied into a service unit's environment (`snapd install-service`)
    assert service_environment({**env, "SNAPD_LOG_LEVEL": "debug"}) == {
        "SNAPD_HOME": str(tmp_path), "SNAPD_LOG_LEVEL": "debug"}


def test_snapd_start_refuses_a_bad_remote_table(tmp_path: Path) -> None:
    """The daemon's load is strict: `snapd start` stops with one line naming file and key."""
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.toml").write_text('[remotes.r]\nurl = "s3://b/p"\npush = "sometimes"\n')
    cp = subprocess.run([sys.executable, "-m", "snapd", "start"], env=base_env(home), cwd="/",
                        capture_output=True, timeout=30)
    assert cp.returncode == 2, cp
    assert b"remotes.r.push" in cp.stderr and str(home / "config.toml").encode() in cp.stderr, cp.stderr


def test_add_and_remove_keep_the_users_comments(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(GOOD)
    os.chmod(path, 0o640)
    remote_config.add_table(path, "ci", {"url": "s3://ci-bucket/x", "push": "on-mark"})
    text = path.read_text()
    for comment in ("# my snapd settings", "# keep big files out", "# the bucket the CI boxes share"):
        assert comment in text
    assert remote_config.LOST_PASSWORD in text  # said where the remote is set
    assert text.startswith(GOOD)  # everything before is as it was
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    loaded = load_config({"SNAPD_HOME": str(tmp_path)}).remotes
    assert loaded["ci"] == {"url": "s3://ci-bucket/x", "push": "on-mark"}
    assert set(loaded) == {"backup", "nas", "ci"}
    remote_config.remove_table(path, "backup")
    text = path.read_text()
    assert "# my snapd settings" in text and "# keep big files out" in text
    assert "my-bucket" not in text and "the bucket the CI boxes share" not in text  # its own comment went
    assert set(tomllib.loads(text)["remotes"]) == {"nas", "ci"}
    remote_config.remove_table(path, "nas")
    remote_config.remove_table(path, "ci")
    assert "remotes" not in tomllib.loads(path.read_text())
    assert "# my snapd settings" in path.read_text()


def test_add_makes_the_file_and_refuses_what_would_break_it(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "config.toml"
    remote_config.add_table(path, "a", {"url": "file:///srv/snapd"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    before = path.read_bytes()
    with pytest.raises(UsageError, match="already"):
        remote_config.add_table(path, "a", {"url": "file:///elsewhere"})
    with pytest.raises(UsageError, match="not a remote name"):
        remote_config.add_table(path, "a b", {"url": "file:///srv/snapd"})
    with pytest.raises(ConfigError, match="remotes.b.push"):
        remote_config.add_table(path, "b", {"url": "file:///srv/snapd", "push": "later"})
    with pytest.raises(NotFound, match="no remote named 'zz'"):
        remote_config.remove_table(path, "zz")
    assert path.read_bytes() == before  # nothing written by a refusal
    assert list(path.parent.iterdir()) == [path]  # no temp file left


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"endpoint": "localhost:9000"}, "endpoint"),  # obstore would panic at the first request
        ({"endpoint": "http://127.0.0.1:9000/bucket"}, "endpoint"),
        ({"region": "eu west"}, "region"),
        ({"url": "s3://Bad_Bucket/p"}, "bucket"),
        ({"password_file": "relative.pass"}, "password_file"),
    ],
)
def test_remote_add_refuses_a_bad_table_before_anything_is_written(
    tmp_path: Path, fields: dict[str, str], says: str
) -> None:
    """The daemon's `remote add` checks the table (and the URL, endpoint and region by the
    remote library's own rules) before it reaches any server or writes config.toml."""
    from snapd.daemon.remotes import Remotes
    from snapd.errors import SnapdError
    from snapd.rollback.running import Running
    from snapd.store.store import Store

    config = tmp_path / "config.toml"
    config.write_text("# mine\n")
    with Store.open(tmp_path / "store") as store:
        remotes = Remotes(store, {}, config, tmp_path, Running(), password="pw")
        with pytest.raises(SnapdError, match=says) as err:
            remotes.add("r", {"url": "s3://bucket/p", **fields}, None, {})
        assert err.value.code in ("usage", "config")
    assert config.read_text() == "# mine\n" and not (tmp_path / "remotes").exists()


def test_an_open_remote_s_repr_holds_no_secret() -> None:
    """The daemon keeps a remote's password and AWS keys in memory (snapd/daemon/remotes.py):
    a repr of that record — in a log line, a traceback's locals, a debugger — shows neither."""
    from snapd.daemon.remotes import _Open

    held = _Open(
        repo=None,  # type: ignore[arg-type]
        password="canary-password-41",
        credentials={"AWS_SECRET_ACCESS_KEY": "canary-secret-42"},
        url="s3://b/p",
    )
    text = repr(held)
    assert "canary-password-41" not in text and "canary-secret-42" not in text
    assert "s3://b/p" in text
