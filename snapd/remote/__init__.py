"""History that outlives the machine: marks pushed to S3-compatible storage or a directory,
encrypted on the client, restored anywhere (docs/remote.md).

Above the store, below the daemon: this package reads marks and objects through the store's
public interface and never imports capture, rollback, ipc, daemon, cli or zmq (an import-linter
contract says so). Nothing on the CLI or hook path imports it; the daemon imports it lazily
inside the remote operations. ``obstore`` is imported by :mod:`snapd.remote.s3` alone,
``cryptography`` by :mod:`snapd.remote.crypto` alone.
"""
