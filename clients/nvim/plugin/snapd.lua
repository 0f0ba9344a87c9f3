-- snapd.nvim: commands. require("snapd").setup({...}) sets the options (see doc/snapd.txt).
if vim.g.loaded_snapd then
  return
end
vim.g.loaded_snapd = true

local function cmd(name, fn, opts)
  vim.api.nvim_create_user_command(name, fn, opts or {})
end

cmd("SnapdTimeline", function()
  require("snapd.timeline").open()
end, { desc = "snapd: the marks of this workspace, kept current" })
cmd("SnapdHistory", function()
  require("snapd.history").open()
end, { desc = "snapd: every captured version of this file" })
cmd("SnapdMark", function(o)
  require("snapd").mark(o.args ~= "" and o.args or "nvim")
end, { nargs = "?", desc = "snapd: mark the workspace (label, default nvim)" })
cmd("SnapdRollback", function(o)
  local snapd = require("snapd")
  local root = snapd.current_root()
  if root then
    snapd.rollback(root, o.args, nil)
  end
end, { nargs = 1, desc = "snapd: roll the workspace back to a mark (plan, confirm)" })
cmd("SnapdRestore", function(o)
  local snapd = require("snapd")
  local path = snapd.buffer_path(0)
  local root = path and snapd.current_root()
  if root then
    snapd.rollback(root, o.args, { path }, "restore " .. path .. " to " .. o.args)
  end
end, { nargs = 1, desc = "snapd: restore this file to a mark or a time (@10m…) (plan, confirm)" })
cmd("SnapdRevert", function(o)
  if o.args == "" then
    require("snapd.timeline").revert_here()
    return
  end
  local snapd = require("snapd")
  local root = snapd.current_root()
  if root then
    snapd.revert(root, o.args)
  end
end, { nargs = "?", desc = "snapd: revert the turn on this timeline line (or that turn-start MARK): plan, confirm" })
cmd("SnapdUndo", function()
  require("snapd").undo()
end, { desc = "snapd: undo the last rollback (plan, confirm)" })
