"""The service's ops against the protocol's table (docs/protocol.md): every op has exactly one
handler, the handler takes exactly the op's declared arguments, and an op declares no argument
it would ignore. No daemon: the table is built by the service's constructor."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from snapd.config import load_config
from snapd.daemon.service import Service
from snapd.errors import BadRequest
from snapd.ipc import protocol
from snapd.store.store import Store

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def service(tmp_path: Path) -> Service:
    store = Store.open(tmp_path / "store")
    config = load_config({}, {"home": str(tmp_path / "snapd")})
    return Service(store, config, (tmp_path / "home",), lambda: None)


def test_each_handler_takes_exactly_its_ops_declared_arguments(service: Service) -> None:
    assert set(service.ops) == protocol.OPS
    for op, handler in service.ops.items():
        params = inspect.signature(handler).parameters.values()
        named = {p.name for p in params if p.kind is not p.VAR_KEYWORD}
        if any(p.kind is p.VAR_KEYWORD for p in params):
            named |= {"from", "to"}  # diff's Python keywords arrive as **refs
        assert named == set(protocol.OP_ARGS[op]), op
        required = {p.name for p in params if p.default is p.empty and p.kind is not p.VAR_KEYWORD}
        assert required == {n for n, a in protocol.OP_ARGS[op].items() if a.required}, op


@pytest.mark.parametrize("op", ["status", "verify", "gc"])
def test_ops_on_the_whole_daemon_take_no_workspace(op: str) -> None:
    """status, verify and gc act on the daemon and the whole store: a workspace argument would
    be accepted and ignored, so it is refused as the unknown argument it is."""
    for name in ("workspace", "cwd"):
        with pytest.raises(BadRequest, match=f"unknown argument '{name}'"):
            protocol.validate_args(op, {name: b"/somewhere"})
