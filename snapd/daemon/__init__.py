"""The daemon side: the process life cycle and its entry point, the service ops, notifications
to the service manager, the systemd unit and logging."""

import sys

# structlog imports rich at its own import, when rich is installed (import-linter brings it into
# a development venv), for nothing but its console renderer's tracebacks: 60-80 ms of every
# daemon start, before it can answer anything (docs/benchmarks.md, the restart's imports floor).
# The daemon's log lines need no rich. With rich marked absent, structlog renders tracebacks as
# plain text, so the daemon starts and logs the same whether or not another package installed
# rich. A process that imported rich before this keeps it.
sys.modules.setdefault("rich", None)  # type: ignore[arg-type]
