"""snapd: a per-user daemon that gives every workspace a rollback history."""

__version__ = "0.1.0"
