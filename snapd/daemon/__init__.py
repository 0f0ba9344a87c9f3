"""The daemon side: the process life cycle and its entry point, the service ops, notifications
to the service manager, the systemd unit and logging."""

import sys

# structlog imports rich at its own import, when rich is installed (import-linter brings it into
# a development venv), for nothing but its console renderer's tracebacks: time every daemon
# start paid before it could answer (a same-run A/B: status 0.177 -> 0.150 s; docs/benchmarks.md).
# The daemon's log lines need no rich. With rich marked absent, structlog renders tracebacks as
# plain text, so the daemon starts and logs the same whether or not another package installed
# rich. A process that imported rich before this keeps it.
sys.modules.setdefault("rich", None)  # type: ignore[arg-type]
