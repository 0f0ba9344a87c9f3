"""Capture: the inotify watcher, ignore rules, workspace roots, scans and the stat cache, ingest of
file bytes into the store, and the live workspace that turns events into versions and marks."""
