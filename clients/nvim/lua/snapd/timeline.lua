-- The timeline: a buffer per workspace listing its marks, newest first (id, time, label,
-- agent, files changed), kept current by `snapctl events`: any event of the workspace (a mark,
-- a rollback, a revert, an undo; a gap or a restart notice too) re-reads the log, so a lost
-- event can never leave it stale for longer than the next one. On a `turn-start` line, `R`
-- (or :SnapdRevert) reverts that turn.
local cli = require("snapd.cli")
local snapd = require("snapd")

local M = {}

local followers = {} -- root -> job id of its `snapctl events`
local HEADER = 2 -- lines above the first mark

local function bufname(root)
  return "snapd://timeline" .. root
end

local function changed(m)
  local s = m.summary
  if type(s) ~= "table" or s.changed == nil or s.changed == vim.NIL then
    return "-"
  end
  return tostring(s.changed) .. " changed"
end

--- What a `snapctl run` turn ran (its marks carry `summary.run`), and how it ended.
local function ran(m)
  local r = type(m.summary) == "table" and m.summary.run
  if type(r) ~= "table" then
    return ""
  end
  local ended = ""
  if cli.text(r.signal) ~= "" then
    ended = " → " .. cli.shown(r.signal)
  elseif cli.text(r.exit) ~= "" then
    ended = " → exit " .. cli.text(r.exit)
  end
  return "  $ " .. cli.shown(m.message) .. ended
end

local function line(m)
  local label = cli.text(m.label)
  return string.format("%s  %s  %-24s %-10s %s%s", m.id, os.date("%Y-%m-%d %H:%M:%S", math.floor(m.created)),
    label, cli.text(m.agent) ~= "" and cli.text(m.agent) or "-", changed(m), ran(m))
end

--- Re-read the log of `root` into its timeline buffer (if one is open).
function M.refresh(root)
  local buf = vim.fn.bufnr(bufname(root))
  if buf == -1 then
    return
  end
  local page, err = cli.run({ "log", "-w", root, "-n", tostring(snapd.config.timeline_limit) })
  if not page then
    snapd.notify(err, vim.log.levels.ERROR)
    return
  end
  local lines = {
    "snapd timeline of " .. root .. "   <CR> roll back to the mark · R revert the turn · u undo · r refresh · q close",
    string.rep("-", 60),
  }
  for _, m in ipairs(page.marks) do
    table.insert(lines, line(m))
  end
  if (page.more or 0) > 0 then
    table.insert(lines, string.format("… %d older mark(s)", page.more))
  end
  vim.b[buf].snapd_marks = vim.tbl_map(function(m)
    return { id = m.id, label = cli.text(m.label), session = cli.text(m.session) }
  end, page.marks)
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
end

local function mark_under_cursor()
  local marks = vim.b.snapd_marks or {}
  return marks[vim.api.nvim_win_get_cursor(0)[1] - HEADER]
end

--- Revert the turn on the cursor's line of the timeline (the daemon refuses a mark that is
--- not a `turn-start`, saying so).
function M.revert_here()
  local root = vim.b.snapd_root
  local m = root and vim.bo.filetype == "snapd-timeline" and mark_under_cursor()
  if not m then
    snapd.notify("put the cursor on a turn-start line of :SnapdTimeline (or give :SnapdRevert a mark)", vim.log.levels.WARN)
    return nil
  end
  local who = m.session ~= "" and (" of session " .. m.session) or ""
  return snapd.revert(root, m.id, "revert the turn " .. m.id .. who .. " in " .. root)
end

--- End every `snapctl events` this Neovim started (also on exit: they would outlive it).
function M.stop_all()
  for root, job in pairs(followers) do
    vim.fn.jobstop(job)
    followers[root] = nil
  end
end

--- The process ids of the running followers.
function M.pids()
  local out = {}
  for _, job in pairs(followers) do
    table.insert(out, vim.fn.jobpid(job))
  end
  return out
end

local function follow(root)
  if followers[root] then
    return
  end
  if vim.tbl_isempty(followers) then
    vim.api.nvim_create_autocmd("VimLeavePre", {
      group = vim.api.nvim_create_augroup("snapd_followers", { clear = true }),
      callback = M.stop_all,
    })
  end
  followers[root] = cli.follow(root, function(obj)
    if obj.workspace == root or obj.notice then
      vim.schedule(function()
        M.refresh(root)
      end)
    end
  end)
end

--- Open (or show again) the timeline of the workspace holding the current buffer.
function M.open()
  local root = snapd.current_root()
  if not root then
    return
  end
  local buf = vim.fn.bufnr(bufname(root))
  if buf == -1 then
    buf = vim.api.nvim_create_buf(true, true)
    vim.api.nvim_buf_set_name(buf, bufname(root))
    vim.bo[buf].filetype = "snapd-timeline"
    vim.b[buf].snapd_root = root
    local function map(key, fn)
      vim.keymap.set("n", key, fn, { buffer = buf, nowait = true })
    end
    map("<CR>", function()
      local m = mark_under_cursor()
      if m then
        snapd.rollback(root, m.id, nil, "roll " .. root .. " back to " .. m.id .. " (" .. m.label .. ")")
      end
    end)
    map("R", M.revert_here)
    map("u", function()
      snapd.undo(root)
    end)
    map("r", function()
      M.refresh(root)
    end)
    map("q", "<cmd>close<cr>")
    vim.api.nvim_create_autocmd("BufWipeout", {
      buffer = buf,
      callback = function()
        if followers[root] then
          vim.fn.jobstop(followers[root])
          followers[root] = nil
        end
      end,
    })
  end
  if vim.fn.bufwinid(buf) == -1 then
    vim.cmd("topleft vsplit")
    vim.api.nvim_win_set_buf(0, buf)
  else
    vim.fn.win_gotoid(vim.fn.bufwinid(buf))
  end
  M.refresh(root)
  follow(root)
  return buf
end

return M
