-- snapd for Neovim: a timeline of the workspace's marks that follows the daemon's events,
-- per-file history with diffs, restore, rollback and the revert of one turn with the plan
-- shown and confirmed, undo, and an optional mark on save. Everything goes through
-- `snapctl --json` (snapd/cli.lua).
--
-- "What you confirmed is what runs": a rollback (or revert) is planned (--dry-run), the plan
-- is shown in a buffer and confirmed, then applied with that plan's token (--plan-token); if
-- the workspace changed so that the plan differs, the new plan is shown and confirmed again.
local cli = require("snapd.cli")

local M = {}

M.config = {
  cmd = { "snapctl" }, -- how to run snapctl
  mark_on_save = false, -- mark the workspace after every :write of a file in it
  agent = "nvim", -- the agent name of marks made from here
  timeline_limit = 50, -- marks shown in the timeline
  --- Ask before anything changes the workspace; true to go ahead.
  confirm = function(question)
    return vim.fn.confirm(question, "&Yes\n&No", 2) == 1
  end,
}

local function notify(msg, level)
  vim.notify("snapd: " .. msg, level or vim.log.levels.INFO)
end
M.notify = notify

--- The path of buffer `buf` (0: current), or nil for a buffer with no file.
function M.buffer_path(buf)
  local name = vim.api.nvim_buf_get_name(buf or 0)
  if name == "" or name:match("^snapd://") then
    return nil
  end
  return vim.fn.fnamemodify(name, ":p")
end

--- The watched workspace root holding `path` (from `status`), or nil + why.
function M.workspace_of(path)
  local st, err = cli.run({ "status" })
  if not st then
    return nil, err
  end
  local real = vim.uv.fs_realpath(path) or path
  local best
  for _, w in ipairs(st.workspaces or {}) do
    local root = w.root
    if type(root) == "string" and w.watching and (real == root or vim.startswith(real, root:gsub("/$", "") .. "/")) then
      if not best or #root > #best then
        best = root
      end
    end
  end
  if not best then
    return nil, "no watched workspace contains " .. real .. " (`snapctl watch` it)"
  end
  return best
end

-- -- the plan buffer and confirmation -------------------------------------------------------

local function plan_lines(title, plan)
  local lines = { title, "" }
  if #(plan.lines or {}) == 0 then
    table.insert(lines, "nothing to change")
  end
  vim.list_extend(lines, plan.lines or {})
  for _, k in ipairs((plan.plan or {}).kept or {}) do
    table.insert(lines, "kept: " .. cli.path(k.path) .. ": " .. cli.text(k.reason))
  end
  local revert = type(plan.revert) == "table" and plan.revert or {}
  for _, p in ipairs(revert.merged or {}) do
    table.insert(lines, "merged with later changes: " .. cli.path(p))
  end
  for _, k in ipairs(revert.keeps or {}) do
    table.insert(lines, "keeps: " .. cli.path(k.path) .. ": " .. cli.text(k.reason))
  end
  for _, x in ipairs(revert.sessions_kept or {}) do
    local agent = cli.text(x.agent) ~= "" and (" (" .. cli.text(x.agent) .. ")") or ""
    table.insert(lines, "keeps the later changes of session " .. cli.text(x.session) .. agent)
  end
  for _, p in ipairs(revert.markers or {}) do
    table.insert(lines, "conflict markers written into: " .. cli.path(p))
  end
  for _, w in ipairs(plan.warnings or {}) do
    table.insert(lines, "warning: " .. w)
  end
  return lines
end

--- Show `lines` in the read-only scratch buffer `name`, in a window of its own; returns the buffer.
local function show_in(name, lines)
  local buf = vim.fn.bufnr(name)
  if buf == -1 then
    buf = vim.api.nvim_create_buf(false, true)
    vim.api.nvim_buf_set_name(buf, name)
  end
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  if vim.fn.bufwinid(buf) == -1 then
    vim.cmd("botright split")
    vim.api.nvim_win_set_buf(0, buf)
    vim.cmd("wincmd p")
  end
  return buf
end

--- Show `lines` in the plan buffer (snapd://plan), in a window of its own; returns the buffer.
function M.show_plan(lines)
  return show_in("snapd://plan", lines)
end

local function close_plan()
  local buf = vim.fn.bufnr("snapd://plan")
  if buf ~= -1 then
    for _, win in ipairs(vim.fn.win_findbuf(buf)) do
      if #vim.api.nvim_list_wins() > 1 then
        vim.api.nvim_win_close(win, true)
      end
    end
  end
end

--- Unmodified buffers of files under `root` read their file again (a rollback changed them);
--- a modified one is left, with a warning.
function M.reload(root)
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    local path = vim.api.nvim_buf_is_loaded(buf) and M.buffer_path(buf)
    if path and vim.startswith(path, root .. "/") then
      if vim.bo[buf].modified then
        notify(path .. " has unsaved changes; it was not reloaded", vim.log.levels.WARN)
      else
        vim.api.nvim_buf_call(buf, function()
          vim.cmd("silent! edit!")
        end)
      end
    end
  end
end

local function unsaved_under(root)
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    local path = M.buffer_path(buf)
    if path and vim.bo[buf].modified and vim.startswith(path, root .. "/") then
      return path
    end
  end
end

--- The conflicts a revert was refused for, with their hunks, in the snapd://conflicts buffer.
function M.show_conflicts(title, conflicts)
  local lines = { title .. ": refused, nothing changed", "" }
  local function side(name, texts)
    for i, t in ipairs(texts or {}) do
      -- one buffer line per line of the file: its line ending is not part of it
      table.insert(lines, string.format("    %-16s %s", i == 1 and name or "", (cli.text(t):gsub("\r?\n$", ""):gsub("\n", "\\n"))))
    end
    if #(texts or {}) == 0 then
      table.insert(lines, string.format("    %-16s (no lines)", name))
    end
  end
  for _, c in ipairs(conflicts) do
    table.insert(lines, "conflict: " .. cli.path(c.path) .. ": " .. cli.text(c.reason))
    for _, h in ipairs(c.hunks or {}) do
      table.insert(lines, "  at line " .. cli.text(h.line) .. " of the file now:")
      side("now:", h.ours)
      side("after the turn:", h.base)
      side("before it:", h.theirs)
    end
  end
  return show_in("snapd://conflicts", lines)
end

--- Plan, show, confirm, apply: `rollback --to target` (or undo when target is nil), limited to
--- `paths` when given. Returns the result, or nil when nothing was applied.
function M.rollback(root, target, paths, title)
  local base = target and { "rollback", "-w", root, "--to", target } or { "undo", "-w", root }
  title = title or (target and ("roll " .. root .. " back to " .. target) or ("undo the last rollback of " .. root))
  return M.planned(root, base, paths, title, "rolled back")
end

--- Revert the turn that `mark` (a turn-start mark's id) began: take back what the turn changed,
--- keep everything changed since. Plan, show, confirm, apply; a conflict with a later change
--- refuses the whole revert, and the conflicts are listed in snapd://conflicts.
function M.revert(root, mark, title)
  title = title or ("revert the turn " .. mark .. " in " .. root)
  return M.planned(root, { "revert", "-w", root, "--turn", mark }, nil, title, "reverted")
end

--- The one plan → show → confirm → apply flow: `base` is the snapctl command without
--- --dry-run / -y; `done` says what happened ("rolled back"). Returns the result, or nil.
function M.planned(root, base, paths, title, done)
  local dirty = unsaved_under(root)
  if dirty then
    notify("save or discard the changes to " .. dirty .. " first", vim.log.levels.WARN)
    return nil
  end
  local plan, err, e = cli.run(vim.list_extend(vim.deepcopy(base), { "--dry-run" }), paths)
  if not plan then
    if e and e.code == "revert_conflict" and type(e.details) == "table" then
      M.show_conflicts(title, e.details.conflicts or {})
    end
    notify(err, vim.log.levels.ERROR)
    return nil
  end
  while true do
    M.show_plan(plan_lines(title, plan))
    if #(plan.lines or {}) == 0 then
      notify("nothing to change")
      return nil
    end
    if not M.config.confirm(title .. ": apply this plan?") then
      close_plan()
      notify("nothing changed")
      return nil
    end
    local token = plan.plan.token
    local res, msg, e = cli.run(vim.list_extend(vim.deepcopy(base), { "-y", "--plan-token", token }), paths)
    if res then
      close_plan()
      M.reload(root)
      local how = res.ok and done or (done .. ", with paths left as they were (see :messages)")
      notify(string.format("%s: %d path(s) changed; undo returns to %s", how, res.applied or 0, cli.text(res.pre_rollback)))
      for _, x in ipairs(vim.list_extend(vim.deepcopy(res.conflicts or {}), res.kept or {})) do
        notify("left: " .. cli.path(x.path) .. ": " .. cli.text(x.reason), vim.log.levels.WARN)
      end
      for _, p in ipairs(type(res.revert) == "table" and res.revert.markers or {}) do
        notify("conflict markers in " .. cli.path(p), vim.log.levels.WARN)
      end
      return res
    end
    if e and e.code == "revert_conflict" and type(e.details) == "table" then
      close_plan() -- it changed since the plan, and now clashes: nothing was written
      M.show_conflicts(title, e.details.conflicts or {})
      notify(msg, vim.log.levels.ERROR)
      return nil
    end
    if not (e and e.code == "plan_changed" and type(e.details) == "table") then
      notify(msg, vim.log.levels.ERROR)
      return nil
    end
    plan = e.details -- the workspace changed: show the new plan and ask again
    title = title .. " (the workspace changed: new plan)"
  end
end

--- Undo the last rollback (or undo) of the workspace holding the current buffer.
function M.undo(root)
  root = root or M.current_root()
  if root then
    return M.rollback(root, nil, nil)
  end
end

--- A mark of the workspace holding `path`.
function M.mark(label, path)
  path = path or M.buffer_path(0) or vim.fn.getcwd()
  local m, err = cli.run({ "mark", label, "-w", path, "--agent", M.config.agent })
  if not m then
    notify(err, vim.log.levels.ERROR)
    return nil
  end
  notify("mark " .. m.id .. " (" .. m.label .. ")")
  return m
end

--- The workspace of the current buffer (or of the timeline/history buffer shown).
function M.current_root()
  if vim.b.snapd_root then
    return vim.b.snapd_root
  end
  local root, err = M.workspace_of(M.buffer_path(0) or vim.fn.getcwd())
  if not root then
    notify(err, vim.log.levels.ERROR)
  end
  return root
end

-- -- mark on save --------------------------------------------------------------------------

local function set_mark_on_save(on)
  local group = vim.api.nvim_create_augroup("snapd_mark_on_save", { clear = true })
  if not on then
    return
  end
  vim.api.nvim_create_autocmd("BufWritePost", {
    group = group,
    callback = function(ev)
      local path = M.buffer_path(ev.buf)
      -- Only files already in a watched workspace: a mark from elsewhere would register a new one.
      local root = path and M.workspace_of(path)
      if not root then
        return
      end
      local rel = path:sub(#root + 2)
      cli.start({ "mark", "save", "-w", root, "--agent", M.config.agent, "-m", "saved " .. rel }, function(_, err)
        if err then
          notify("mark on save failed: " .. err, vim.log.levels.WARN)
        end
      end)
    end,
  })
end

function M.setup(opts)
  if vim.fn.has("nvim-0.10") ~= 1 then
    error("snapd.nvim needs Neovim 0.10 or later (vim.system, vim.base64)")
  end
  M.config = vim.tbl_extend("force", M.config, opts or {})
  cli.cmd = M.config.cmd
  set_mark_on_save(M.config.mark_on_save)
end

return M
