-- Running `snapctl ... --json`: the plugin's only way to reach the daemon. One place decodes
-- replies and errors, so every caller gets (result) or (nil, message, error object).
local M = {}

--- The command that runs snapctl (a list: {"python3", "-m", "snapd"} works too).
M.cmd = { "snapctl" }

local function nonempty(s)
  return s ~= nil and s ~= ""
end

--- argv for `args` (the command and its options), with --json before any "-- PATH...".
local function argv(args, paths)
  local out = vim.list_extend(vim.deepcopy(M.cmd), args)
  table.insert(out, "--json")
  if paths and #paths > 0 then
    table.insert(out, "--")
    vim.list_extend(out, paths)
  end
  return out
end

--- Run snapctl and wait. Returns result, or nil + message + the error object ({code, message,
--- details}). A rollback that kept paths exits non-zero but prints its result: that is a result.
function M.run(args, paths)
  local ok, proc = pcall(vim.system, argv(args, paths), { text = true })
  if not ok then
    return nil, "cannot run " .. table.concat(M.cmd, " ") .. ": " .. tostring(proc), { code = "spawn" }
  end
  local res = proc:wait()
  local decoded_ok, decoded = pcall(vim.json.decode, nonempty(res.stdout) and res.stdout or "null")
  if not decoded_ok or type(decoded) ~= "table" then
    local msg = nonempty(res.stderr) and vim.trim(res.stderr) or ("snapctl exited " .. res.code)
    return nil, msg, { code = "cli", message = msg }
  end
  if decoded.ok == false and type(decoded.error) == "table" then
    return nil, decoded.error.message, decoded.error
  end
  return decoded
end

--- Run snapctl without waiting; `done(result, message)` runs on the main loop.
function M.start(args, done)
  vim.system(argv(args), { text = true }, function(res)
    vim.schedule(function()
      local ok, decoded = pcall(vim.json.decode, nonempty(res.stdout) and res.stdout or "null")
      if ok and type(decoded) == "table" and not (decoded.ok == false and decoded.error) then
        done(decoded, nil)
      else
        done(nil, ok and type(decoded) == "table" and decoded.error and decoded.error.message or res.stderr)
      end
    end)
  end)
end

--- Follow `snapctl events -w root --json`; `on_event(obj)` per line (events and notices).
--- Returns the job id (vim.fn.jobstop ends it).
function M.follow(root, on_event)
  local partial = ""
  return vim.fn.jobstart(argv({ "events", "-w", root }), {
    on_stdout = function(_, data)
      data[1] = partial .. data[1]
      partial = table.remove(data)
      for _, line in ipairs(data) do
        local ok, obj = pcall(vim.json.decode, line)
        if ok and type(obj) == "table" then
          on_event(obj)
        end
      end
    end,
  })
end

--- Text a person reads, with control characters as \xNN (a label, a message, a file name
--- may hold a newline or an escape sequence; a buffer line holds no newline).
function M.shown(text)
  return (M.text(text):gsub("%c", function(c)
    return string.format("\\x%02x", c:byte())
  end))
end

--- A path from a reply (a string, or {b64 = …} when its bytes are not UTF-8) as text, as
--- `shown` says (in a b64 path, every byte past ASCII as \xNN too).
function M.path(p)
  if type(p) == "table" and type(p.b64) == "string" then
    return (vim.base64.decode(p.b64):gsub("[%c\128-\255]", function(c)
      return string.format("\\x%02x", c:byte())
    end))
  end
  return M.shown(p)
end

--- A JSON value as text: null (vim.NIL) and nil as "".
function M.text(v)
  if v == nil or v == vim.NIL then
    return ""
  end
  return tostring(v)
end

return M
