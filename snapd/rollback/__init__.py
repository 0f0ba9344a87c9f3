"""Rollback: the plan from the current state to a mark (pure), its write-ahead journal and
application, and the live rollback of a watched workspace with its crash recovery."""
