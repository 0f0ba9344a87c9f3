"""Driving the five real coding agents offline: installs, private homes, one turn in a sealed namespace.

Each agent's real program comes from its package registry, pinned: the npm ones from this
directory's ``package-lock.json`` (``npm ci`` into ``node_modules``), Aider from PyPI with
``aider-constraints.txt`` into ``.aider-venv`` (its many pins would fight the project's venv).
:func:`install` does both and is what CI's agents tier runs first (``python agent_harness.py``).

A turn (:func:`run_turn`) runs ``unshare -n`` → ``netns_run.py``: a fresh network namespace with
only loopback, where the scripted model (``model_server.py``) listens on 127.0.0.1:``PORT`` and
the agent runs with a private ``HOME`` and config dirs (the facts of issue 10: base URLs, fake
keys, telemetry and updates off). A machine where that cannot be set up (not root, no ``unshare``,
an agent not installed) makes the test fail under ``CI`` and skip elsewhere, with the reason.

Every agent turn is timed; the times are printed (``-s``) and written to ``times.json`` in the
test's temp dir, and docs/reliability.md quotes them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
NODE_BIN = HERE / "node_modules" / ".bin"
OPENCODE = HERE / "node_modules" / "opencode-linux-x64" / "bin" / "opencode"  # the native binary package
AIDER_VENV = HERE / ".aider-venv"
PORT = 8765  # the namespace is fresh: the port is always free there
BASE = f"http://127.0.0.1:{PORT}"
FAKE_KEY = "sk-snapd-tests-fake-key"
sys.path.insert(0, str(HERE))

from model_server import Call, Script, recorded  # noqa: E402 - after the path above

AGENTS = ("claude-code", "codex", "gemini", "opencode", "aider")


# -- installing -----------------------------------------------------------------------------------


def install() -> dict[str, float]:
    """Install every agent, pinned; seconds per part. Skips what is already installed and current."""
    times: dict[str, float] = {}
    lock = HERE / "package-lock.json"
    stamp = HERE / "node_modules" / ".snapd-installed-lock.json"  # the lock this install was made from
    start = time.monotonic()
    programs = [a.program() for a in REGISTRY.values() if a.name != "aider"]
    if not stamp.exists() or stamp.read_text() != lock.read_text() or not all(p.exists() for p in programs):
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE, check=True)
        stamp.write_text(lock.read_text())
    times["npm (claude-code, codex, gemini, opencode)"] = time.monotonic() - start
    start = time.monotonic()
    constraints = HERE / "aider-constraints.txt"
    done = AIDER_VENV / ".installed"
    if not done.exists() or done.read_text() != constraints.read_text():
        if not (AIDER_VENV / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(AIDER_VENV)], check=True)
        pip = [
            str(AIDER_VENV / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ]
        subprocess.run(pip + ["-c", str(constraints), "aider-chat"], check=True)
        done.write_text(constraints.read_text())
    times["pip (aider)"] = time.monotonic() - start
    return times


# -- one agent's setup ----------------------------------------------------------------------------


@dataclass
class Sandbox:
    """One test's private world: a HOME, a workspace, and a directory for the turns' files."""

    top: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    extra_args: list[str] = field(default_factory=list)  # the agent's flags for hooks, before the prompt
    turns: int = 0

    @property
    def home(self) -> Path:
        return self.top / "home"

    @property
    def ws(self) -> Path:
        return self.top / "ws"

    def env(self) -> dict[str, str]:
        """A clean environment: nothing of the caller's (no real keys, no CI quirks), plus the extras."""
        path = os.pathsep.join(
            [str(NODE_BIN), str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]
        )
        env = {
            "HOME": str(self.home),
            "PATH": path,
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "NO_COLOR": "1",
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_DATA_HOME": str(self.home / ".local/share"),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "XDG_STATE_HOME": str(self.home / ".local/state"),
            "TMPDIR": str(self.top / "tmp"),
        }
        env.update(self.extra_env)
        return env


@dataclass(frozen=True)
class Agent:
    """How to run one agent: its setup in a sandbox, its command line, its tool calls for a turn."""

    name: str
    program: Callable[[], Path]
    prepare: Callable[[Sandbox], dict[str, str]]  # writes config files; returns the agent's env vars
    argv: Callable[[Sandbox, str], list[str]]  # the command for one prompt
    calls: Callable[[Path], tuple[Call, ...]]  # the turn's tool calls, for a workspace
    reply: Callable[[Path], str] = lambda ws: ""  # a tool-less agent's whole answer


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


NEW_TEXT = "created by the agent\n"
EDIT_BEFORE = "line one\nline two\n"
EDIT_AFTER = "line one\nline 2, edited by the agent\n"


def _claude_prepare(box: Sandbox) -> dict[str, str]:
    (box.home / ".claude").mkdir(parents=True, exist_ok=True)
    return {
        "ANTHROPIC_BASE_URL": BASE,
        "ANTHROPIC_API_KEY": FAKE_KEY,
        "CLAUDE_CONFIG_DIR": str(box.home / ".claude"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }


def _claude_argv(box: Sandbox, prompt: str) -> list[str]:
    flags = "--output-format json --permission-mode acceptEdits --allowedTools Bash --model claude-sonnet-4-5"
    return [str(NODE_BIN / "claude"), "-p", prompt, *flags.split(), *box.extra_args]


def _claude_calls(ws: Path) -> tuple[Call, ...]:
    return (
        Call("Write", {"file_path": str(ws / "new.txt"), "content": NEW_TEXT}),
        Call("Read", {"file_path": str(ws / "edit.txt")}),
        Call(
            "Edit",
            {
                "file_path": str(ws / "edit.txt"),
                "old_string": "line two",
                "new_string": "line 2, edited by the agent",
            },
        ),
        Call("Bash", {"command": "rm gone.txt", "description": "Delete gone.txt"}),
    )


CODEX_CONFIG = f"""\
model = "scripted-model"
model_provider = "scripted"
approval_policy = "never"
sandbox_mode = "workspace-write"

# Codex's sandbox makes a writable root's .git read-only, creating an empty .git there as a mount
# point when none exists: with /tmp writable (its default), every test after it would find
# itself "in a git work tree" under /tmp. The sandbox's $TMPDIR is the box's own.
[sandbox_workspace_write]
exclude_slash_tmp = true

[model_providers.scripted]
name = "scripted"
base_url = "{BASE}/v1"
env_key = "SCRIPTED_API_KEY"
wire_api = "responses"
"""


def _codex_prepare(box: Sandbox) -> dict[str, str]:
    (box.home / ".codex").mkdir(parents=True, exist_ok=True)
    (box.home / ".codex" / "config.toml").write_text(CODEX_CONFIG)
    return {"CODEX_HOME": str(box.home / ".codex"), "SCRIPTED_API_KEY": FAKE_KEY}


def _codex_argv(box: Sandbox, prompt: str) -> list[str]:
    return [str(NODE_BIN / "codex"), "exec", "--skip-git-repo-check", *box.extra_args, prompt]


def _codex_calls(ws: Path) -> tuple[Call, ...]:
    return (
        Call("exec_command", {"cmd": f"printf '%s' '{NEW_TEXT}' > new.txt"}),
        Call("exec_command", {"cmd": "sed -i 's/^line two$/line 2, edited by the agent/' edit.txt"}),
        Call("exec_command", {"cmd": "rm gone.txt"}),
    )


def _gemini_prepare(box: Sandbox) -> dict[str, str]:
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
    }
    _write_json(box.home / ".gemini" / "settings.json", settings)
    return {"GOOGLE_GEMINI_BASE_URL": BASE, "GEMINI_API_KEY": FAKE_KEY, "GEMINI_CLI_TRUST_WORKSPACE": "true"}


def _gemini_argv(box: Sandbox, prompt: str) -> list[str]:
    gemini = str(NODE_BIN / "gemini")
    return [gemini, "-m", "gemini-2.5-flash", "--approval-mode", "yolo", *box.extra_args, "-p", prompt]


def _gemini_calls(ws: Path) -> tuple[Call, ...]:
    return (
        Call("write_file", {"file_path": str(ws / "new.txt"), "content": NEW_TEXT}),
        Call(
            "replace",
            {
                "file_path": str(ws / "edit.txt"),
                "old_string": "line two",
                "new_string": "line 2, edited by the agent",
                "instruction": "Edit line two",
            },
        ),
        Call("run_shell_command", {"command": "rm gone.txt", "description": "Delete gone.txt"}),
    )


def opencode_config_dir(directory: Path) -> None:
    """Make ``directory`` a config dir OpenCode will not ``npm install`` into (a 70 s stall
    offline, awaited before plugins load): it installs unless ``node_modules`` exists and the root
    of ``package-lock.json`` names every dependency of ``package.json`` and ``@opencode-ai/plugin``.
    The plugin package itself is linked from this directory's pinned install."""
    directory.mkdir(parents=True, exist_ok=True)
    deps = {"@opencode-ai/plugin": _locked("@opencode-ai/plugin")}
    _write_json(directory / "package.json", {"dependencies": deps})
    _write_json(
        directory / "package-lock.json", {"lockfileVersion": 3, "packages": {"": {"dependencies": deps}}}
    )
    # OpenCode writes this at start-up when missing, before any turn: written here, it is part of
    # the tree before the turn (what a rollback to the turn's start restores).
    (directory / ".gitignore").write_text(
        "\n".join(["node_modules", "package.json", "package-lock.json", "bun.lock", ".gitignore"])
    )
    modules = directory / "node_modules" / "@opencode-ai"
    modules.mkdir(parents=True, exist_ok=True)
    for name in ("plugin", "sdk"):
        if not (modules / name).exists():
            (modules / name).symlink_to(HERE / "node_modules" / "@opencode-ai" / name)


def _locked(package: str) -> str:
    lock = json.loads((HERE / "package-lock.json").read_text())
    return str(lock["packages"][f"node_modules/{package}"]["version"])


def _opencode_prepare(box: Sandbox) -> dict[str, str]:
    config = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": "scripted/scripted-model",
        "provider": {
            "scripted": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Scripted",
                "options": {"baseURL": f"{BASE}/v1", "apiKey": FAKE_KEY},
                "models": {"scripted-model": {"name": "Scripted model", "tool_call": True}},
            }
        },
    }
    config_dir = box.home / ".config" / "opencode"
    opencode_config_dir(config_dir)
    _write_json(config_dir / "opencode.json", config)
    opencode_config_dir(box.ws / ".opencode")
    return {
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    }


def _opencode_argv(box: Sandbox, prompt: str) -> list[str]:
    return [str(OPENCODE), "run", "--model", "scripted/scripted-model", *box.extra_args, prompt]


def _opencode_calls(ws: Path) -> tuple[Call, ...]:
    return (
        Call("write", {"filePath": str(ws / "new.txt"), "content": NEW_TEXT}),
        Call("read", {"filePath": str(ws / "edit.txt")}),
        Call(
            "edit",
            {
                "filePath": str(ws / "edit.txt"),
                "oldString": "line two",
                "newString": "line 2, edited by the agent",
            },
        ),
        Call("bash", {"command": "rm gone.txt", "description": "Delete gone.txt"}),
    )


def _aider_prepare(box: Sandbox) -> dict[str, str]:
    return {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "OPENAI_API_KEY": FAKE_KEY}


def _aider_argv(box: Sandbox, prompt: str) -> list[str]:
    flags = (
        "--model openai/scripted-model --no-check-update --analytics-disable --no-git --no-auto-commits "
        "--no-gitignore --yes-always --no-pretty --no-stream --no-show-model-warnings --edit-format diff "
        "--no-detect-urls --map-tokens 0"
    )
    aider = str(AIDER_VENV / "bin" / "aider")
    # Aider writes its histories at start-up, before a turn begins: kept in HOME, out of the workspace.
    history = [
        "--input-history-file",
        str(box.home / "aider.input"),
        "--chat-history-file",
        str(box.home / "aider.md"),
    ]
    base = ["--openai-api-base", f"{BASE}/v1"]
    return [aider, *base, *flags.split(), *history, *box.extra_args, "--message", prompt, "edit.txt"]


def _aider_reply(ws: Path) -> str:
    fence = "```"
    return (
        "Here are the changes.\n\n"
        f"new.txt\n{fence}\n<<<<<<< SEARCH\n=======\n{NEW_TEXT}>>>>>>> REPLACE\n{fence}\n\n"
        f"edit.txt\n{fence}\n<<<<<<< SEARCH\nline two\n=======\n"
        f"line 2, edited by the agent\n>>>>>>> REPLACE\n{fence}\n"
    )


def _npm_program(name: str) -> Callable[[], Path]:
    return lambda: NODE_BIN / name


REGISTRY: dict[str, Agent] = {
    "claude-code": Agent("claude-code", _npm_program("claude"), _claude_prepare, _claude_argv, _claude_calls),
    "codex": Agent("codex", _npm_program("codex"), _codex_prepare, _codex_argv, _codex_calls),
    "gemini": Agent("gemini", _npm_program("gemini"), _gemini_prepare, _gemini_argv, _gemini_calls),
    "opencode": Agent("opencode", lambda: OPENCODE, _opencode_prepare, _opencode_argv, _opencode_calls),
    "aider": Agent(
        "aider",
        lambda: AIDER_VENV / "bin" / "aider",
        _aider_prepare,
        _aider_argv,
        lambda ws: (),
        _aider_reply,
    ),
}


# -- running a turn -------------------------------------------------------------------------------


@dataclass
class Turn:
    """What one agent turn did: its exit, output, time, and every request the model got."""

    returncode: int
    timed_out: bool
    seconds: float
    stdout: str
    stderr: str
    requests: list[dict[str, Any]]

    def describe(self) -> str:
        paths = [f"{r['method']} {r['path']}" for r in self.requests]
        return (
            f"exit {self.returncode} after {self.seconds:.1f}s (timed out: {self.timed_out})\n"
            f"requests: {paths}\n"
            f"stdout: {self.stdout[-3000:]}\nstderr: {self.stderr[-3000:]}"
        )


def setup_problem(agent: Agent) -> str | None:
    """Why this machine cannot run ``agent`` in a sealed namespace, or None."""
    if os.geteuid() != 0:
        return "a network namespace of our own needs root (unshare -n)"
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare (util-linux) or ip (iproute2) is missing"
    if not agent.program().exists():
        return (
            f"{agent.name} is not installed at {agent.program()}: run `python tests/agents/agent_harness.py`"
        )
    probe = subprocess.run(["unshare", "-n", "ip", "link", "set", "lo", "up"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"unshare -n failed: {probe.stderr.strip()}"
    return None


def new_sandbox(top: Path, agent: Agent) -> Sandbox:
    box = Sandbox(top)
    for d in (box.home, box.ws, top / "tmp", top / "turns"):
        d.mkdir(parents=True, exist_ok=True)
    box.extra_env.update(agent.prepare(box))
    return box


def run_turn(
    box: Sandbox,
    agent: Agent,
    prompt: str,
    script: Script,
    timeout: float = 180.0,
    argv: list[str] | None = None,
    interrupt_when: Path | None = None,
) -> Turn:
    """One agent turn in a loopback-only namespace with the scripted model; its record. With
    ``interrupt_when``, the agent gets SIGINT (Ctrl-C) once that file exists."""
    box.turns += 1
    turn_dir = box.top / "turns" / str(box.turns)
    turn_dir.mkdir(parents=True)
    spec = {
        "port": PORT,
        "script": script.to_json(),
        "record": str(turn_dir / "requests.jsonl"),
        "result": str(turn_dir / "result.json"),
        "argv": argv or agent.argv(box, prompt),
        "cwd": str(box.ws),
        "env": box.env(),
        "timeout": timeout,
        "interrupt_when": str(interrupt_when) if interrupt_when else None,
    }
    (turn_dir / "spec.json").write_text(json.dumps(spec, indent=2))
    runner = subprocess.run(
        ["unshare", "-n", sys.executable, str(HERE / "netns_run.py"), str(turn_dir / "spec.json")],
        capture_output=True,
        text=True,
        timeout=timeout + 30,
    )
    if runner.returncode != 0 or not (turn_dir / "result.json").exists():
        raise AssertionError(f"the namespace runner failed ({runner.returncode}): {runner.stderr[-3000:]}")
    result = json.loads((turn_dir / "result.json").read_text())
    turn = Turn(requests=recorded(turn_dir / "requests.jsonl"), **result)
    times = box.top / "times.json"
    log = json.loads(times.read_text()) if times.exists() else []
    log.append({"agent": agent.name, "turn": box.turns, "seconds": round(turn.seconds, 1)})
    times.write_text(json.dumps(log))
    print(f"{agent.name} turn {box.turns}: {turn.seconds:.1f}s, {len(turn.requests)} requests")
    return turn


def resume_argv(agent: Agent, box: Sandbox, prompt: str) -> list[str]:
    """The command for a next turn in the agent's most recent session in this workspace."""
    if agent.name == "codex":
        return [
            str(NODE_BIN / "codex"),
            "exec",
            "--skip-git-repo-check",
            *box.extra_args,
            "resume",
            "--last",
            prompt,
        ]
    more = {"claude-code": ["--continue"], "gemini": ["--resume", "latest"], "opencode": ["--continue"]}
    argv = agent.argv(box, prompt)
    at = 2 if agent.name == "opencode" else 1  # after `opencode run`
    return argv[:at] + more.get(agent.name, []) + argv[at:]


def turn_script(agent: Agent, ws: Path, token: str) -> Script:
    """The standard turn: create new.txt, edit edit.txt, delete gone.txt (Aider: no delete)."""
    return Script(token=token, calls=agent.calls(ws), reply=agent.reply(ws), final=f"Finished {token}.")


def main() -> None:
    times = install()
    for part, seconds in times.items():
        print(f"agents install: {part}: {seconds:.0f}s", flush=True)


if __name__ == "__main__":
    main()
