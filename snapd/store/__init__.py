"""The store: content-addressed objects, trees, the SQLite catalog of marks and versions, and
the durable-write helpers they share. It knows nothing of watching, rollback or sockets."""
