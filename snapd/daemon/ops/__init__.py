"""The protocol's ops, one method ``op_NAME`` each, grouped by what they act on: the daemon
and the store as a whole (:mod:`.daemon`), watching workspaces (:mod:`.workspaces`), marks
(:mod:`.marks`), rollbacks (:mod:`.rollback`), and files across marks (:mod:`.files`).

Each method's keyword arguments are exactly the op's declared arguments
(``snapd.ipc.protocol.OP_ARGS``, docs/protocol.md): the protocol admits nothing else, and an op
declares nothing it does not use. Every failure a user can cause is a :class:`SnapdError`.
"""
