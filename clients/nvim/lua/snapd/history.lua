-- Per-file history (:SnapdHistory): every captured version of the current buffer's file,
-- newest first, from `snapctl history FILE --json` (between marks too). On a version: `d`
-- diffs it against the buffer (Neovim's diff mode, the version in a scratch buffer), `r`
-- restores the file to it (a rollback of that one path to the version's time: plan, confirm).
local cli = require("snapd.cli")
local snapd = require("snapd")

local M = {}

local HEADER = 2

local function size(v)
  local n = v.size
  if n == nil or n == vim.NIL then
    return "-"
  end
  return tostring(n) .. " B"
end

local function where(v)
  local parts = {}
  if type(v.mark) == "table" then
    table.insert(parts, (v.in_mark and "in " or "before ") .. cli.text(v.mark.label) .. " " .. cli.text(v.mark.id))
  end
  for _, s in ipairs(type(v.sessions) == "table" and v.sessions or {}) do
    table.insert(parts, "agent " .. cli.text(s.agent) .. " session " .. cli.text(s.session))
  end
  if cli.text(v.renamed_from) ~= "" then
    table.insert(parts, "renamed from " .. cli.text(v.renamed_from))
  end
  return table.concat(parts, ", ")
end

local function version_under_cursor()
  local versions = vim.b.snapd_versions or {}
  return versions[vim.api.nvim_win_get_cursor(0)[1] - HEADER]
end

--- The bytes of the file at `path` as captured in `version` (its time reference), as lines.
local function content(root, path, version)
  local r, err = cli.run({ "cat", "-w", root, version.ref, path })
  if not r then
    return nil, err
  end
  local data = vim.base64.decode(r.data_b64)
  local lines = vim.split(data, "\n", { plain = true })
  if lines[#lines] == "" then
    table.remove(lines)
  end
  return lines
end

--- Diff `version` of the file against its buffer `src` (side by side, diff mode).
function M.diff(root, path, rel, src, version)
  if version.status == "deleted" or version.kind ~= "file" then
    snapd.notify("that version is " .. (version.status == "deleted" and "a deletion" or "not a file") .. ": nothing to diff")
    return
  end
  local lines, err = content(root, path, version)
  if not lines then
    snapd.notify(err, vim.log.levels.ERROR)
    return
  end
  local name = "snapd://" .. version.ref .. "/" .. rel
  local buf = vim.fn.bufnr(name)
  if buf == -1 then
    buf = vim.api.nvim_create_buf(false, true)
    vim.api.nvim_buf_set_name(buf, name)
  end
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].filetype = vim.bo[src].filetype
  local src_win = vim.fn.bufwinid(src)
  if src_win == -1 then
    vim.cmd("tab split")
    vim.api.nvim_win_set_buf(0, src)
  else
    vim.fn.win_gotoid(src_win)
  end
  vim.cmd("diffthis")
  vim.cmd("rightbelow vsplit")
  vim.api.nvim_win_set_buf(0, buf)
  vim.cmd("diffthis")
  return buf
end

--- Open the history of the current buffer's file.
function M.open()
  local src = vim.api.nvim_get_current_buf()
  local path = snapd.buffer_path(src)
  if not path then
    snapd.notify("this buffer has no file", vim.log.levels.WARN)
    return
  end
  local root = snapd.workspace_of(path)
  if not root then
    snapd.notify("no watched workspace contains " .. path, vim.log.levels.ERROR)
    return
  end
  local h, err = cli.run({ "history", "-w", root, path })
  if not h then
    snapd.notify(err, vim.log.levels.ERROR)
    return
  end
  local rel = cli.text(h.path)
  local lines = {
    "history of " .. rel .. " in " .. root .. "   d diff with the buffer · r restore this version · q close",
    string.rep("-", 60),
  }
  for _, v in ipairs(h.versions) do
    table.insert(lines, string.format("%s  %-9s %-10s %s", os.date("%Y-%m-%d %H:%M:%S", math.floor(v.time)),
      v.status, size(v), where(v)))
  end
  if cli.text(h.pruned_before) ~= "" then
    table.insert(lines, "older versions pruned by retention (before " .. os.date("%Y-%m-%d %H:%M", math.floor(h.pruned_before)) .. ")")
  end
  local name = "snapd://history/" .. path
  local buf = vim.fn.bufnr(name)
  if buf == -1 then
    buf = vim.api.nvim_create_buf(true, true)
    vim.api.nvim_buf_set_name(buf, name)
    vim.bo[buf].filetype = "snapd-history"
  end
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.b[buf].snapd_root = root
  vim.b[buf].snapd_versions = vim.tbl_map(function(v)
    return { ref = v.ref, status = v.status, kind = cli.text(v.kind), time = v.time }
  end, h.versions)
  local function map(key, fn)
    vim.keymap.set("n", key, fn, { buffer = buf, nowait = true })
  end
  map("d", function()
    local v = version_under_cursor()
    if v then
      M.diff(root, path, rel, src, v)
    end
  end)
  map("r", function()
    local v = version_under_cursor()
    if v then
      snapd.rollback(root, v.ref, { path }, "restore " .. rel .. " to its version of " .. os.date("%Y-%m-%d %H:%M:%S", math.floor(v.time)))
    end
  end)
  map("q", "<cmd>close<cr>")
  vim.cmd("botright split")
  vim.api.nvim_win_set_buf(0, buf)
  return buf
end

return M
