"""``snapctl ui``: the timeline of a workspace, a client of the daemon like :mod:`snapd.cli`.

:mod:`.timeline` turns marks into rows (pure), :mod:`.source` talks to the daemon (requests in
worker threads, the live events in a thread of their own), :mod:`.app` and :mod:`.screens` are
the Textual app. Only this package imports ``textual`` (an import-linter contract), and no
other ``snapctl`` command loads it: ``pip install 'snapd[ui]'`` installs it.
"""
