-- wrk script: cycles through the request paths listed in a file, one per
-- line. Used by bench/compare for the many-keys and cold-start workloads.
--
--   wrk -t1 -c64 -d10s --latency -s bench/keys.lua http://host:port -- paths.txt [fan [once]]
--
-- fan (default 1) sends each path that many times in a row before moving to
-- the next, so with fan >= the connection count every connection asks for
-- the same cold key at about the same moment (the cold-start workload).
-- With "once", wrk ends after as many answers as one pass over the list
-- asks (paths x fan): the thread stops and sends SIGINT to wrk's main
-- thread, which then reports as at the end of -d (now only a bound), with
-- the real elapsed time. Linux only (tgkill through LuaJIT's FFI).
-- Requests are formatted once in init, so the per-request Lua cost is a
-- table lookup and is the same for every server measured.

local counter = 0

function setup(thread)
   thread:set("id", counter)
   counter = counter + 1
end

local reqs = {}
local fan = 1
local n = 0
local answers = 0
local total = 0

function init(args)
   local file = args[1]
   if not file then
      error("keys.lua: give the paths file after --")
   end
   fan = tonumber(args[2] or "1")
   for line in io.lines(file) do
      if line ~= "" then
         reqs[#reqs + 1] = wrk.format("GET", line)
      end
   end
   if #reqs == 0 then
      error("keys.lua: no paths in " .. file)
   end
   total = #reqs * fan
   if args[3] == "once" then
      response = stop_after_pass
   end
   -- Threads start at different places in the list.
   n = ((id or 0) * math.floor(#reqs / 4)) * fan
end

function request()
   local i = math.floor(n / fan) % #reqs + 1
   n = n + 1
   return reqs[i]
end

-- The response function of "once". It is installed only then: without a
-- global response wrk makes no Lua call per answer.
function stop_after_pass(status, headers, body)
   answers = answers + 1
   if answers == total then
      wrk.thread:stop()
      interrupt_main()
   end
end

function interrupt_main()
   local ffi = require("ffi")
   ffi.cdef[[
      int getpid(void);
      long syscall(long number, ...);
   ]]
   local tgkill = ({x64 = 234, arm64 = 131})[ffi.arch]
   if tgkill then
      local pid = ffi.C.getpid()
      ffi.C.syscall(tgkill, ffi.cast("long", pid), ffi.cast("long", pid), ffi.cast("long", 2))
   end
end
