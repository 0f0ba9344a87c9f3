"""Inter-process calls: the wire protocol (pure), the daemon's ZeroMQ server and the client. The
only package that imports zmq."""
