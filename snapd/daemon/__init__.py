"""The daemon side: the process life cycle and its entry point, the service ops, notifications
to the service manager, the systemd unit and logging."""
