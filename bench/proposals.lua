-- wrk script: agents posting refund_order tool calls, a realistic mix (docs/benchmarks.md).
--
--   BENCH_SESSIONS=file BENCH_KEY_PREFIX=run-1 BENCH_EXPECT=200,201,422 \
--     wrk -t2 -c16 -d10s -s bench/proposals.lua http://127.0.0.1:8000/api/agent/tool-calls
--
-- Each line of BENCH_SESSIONS (written by bench/shop.py):
--   token \t delivered orders "number:remaining:late_ok,..." \t other orders "number,..." \t another customer's order
--
-- Per request, a random agent session (one per customer) sends:
--   72 %  a valid proposal (201 new preview, or 200 when the same pending proposal comes again)
--    6 %  an idempotent replay: the thread's last keyed request again, byte for byte (200)
--    4 %  order_unavailable (another customer's order; or one that does not exist)    422
--    4 %  order_not_refundable (pending, shipped or cancelled)                         422
--    3 %  zero_amount                                                                  422
--    6 %  amount_exceeds_remaining                                                     422
--    5 %  reason_not_applicable (late, on an order delivered within 7 days)            422
-- Arguments go as a JSON string (as models emit them) or as an object; 60 % carry an Idempotency-Key.
-- done() prints one line "BENCH_JSON {...}" with throughput, latency (and its histogram) and every status seen.

local sessions = {}
local expect = {}

local function split(text, sep)
  local items = {}
  if text == nil or text == "" then return items end
  for item in string.gmatch(text, "([^" .. sep .. "]+)") do table.insert(items, item) end
  return items
end

local function load()
  local path = os.getenv("BENCH_SESSIONS")
  for line in io.lines(path) do
    local fields = {}
    for field in string.gmatch(line .. "\t", "([^\t]*)\t") do table.insert(fields, field) end
    local s = { token = fields[1], delivered = {}, late = {}, early = {}, closed = split(fields[3], ","), foreign = fields[4] }
    for _, entry in ipairs(split(fields[2], ",")) do
      local number, remaining, late_ok = string.match(entry, "^([^:]+):(%d+):(%d)$")
      local order = { number = number, remaining = tonumber(remaining) }
      table.insert(s.delivered, order)
      if late_ok == "1" then table.insert(s.late, order) else table.insert(s.early, order) end
    end
    table.insert(sessions, s)
  end
  for code in string.gmatch(os.getenv("BENCH_EXPECT") or "200,201,422", "(%d+)") do expect[tonumber(code)] = true end
end

load()

-- Main state: every thread's tables are read back in done().
local threads = {}

function setup(thread)
  thread:set("thread_id", #threads + 1)
  table.insert(threads, thread)
end

-- Thread state.
statuses = {}
bad_bodies = 0
local counter = 0
local last_keyed = nil
local prefix = nil

function init(args)
  math.randomseed(os.time() * 1000 + (thread_id or 0) * 7919)
  prefix = (os.getenv("BENCH_KEY_PREFIX") or "bench") .. "-t" .. tostring(thread_id or 0) .. "-"
end

local function pick(list) return list[math.random(#list)] end

local function amount_up_to(limit)
  if limit < 1 then return 1 end
  return math.random(1, limit)
end

local function call(s, order_id, amount, reason)
  counter = counter + 1
  local arguments = string.format('{"order_id":"%s","amount_minor":%d,"reason":"%s"}', order_id, amount, reason)
  local body
  if math.random() < 0.5 then
    body = '{"name":"refund_order","arguments":"' .. string.gsub(arguments, '"', '\\"') .. '","call_id":"call_' .. counter .. '"}'
  else
    body = '{"name":"refund_order","arguments":' .. arguments .. '}'
  end
  local headers = { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. s.token }
  if math.random() < 0.6 then
    headers["Idempotency-Key"] = prefix .. counter
    last_keyed = wrk.format("POST", nil, headers, body)
    return last_keyed
  end
  return wrk.format("POST", nil, headers, body)
end

function request()
  local s = pick(sessions)
  local r = math.random(100)
  if r <= 72 or (r > 95 and #s.early == 0) or (r > 82 and r <= 86 and #s.closed == 0) then
    local order = pick(s.delivered)
    local reason = "damaged"
    if math.random() < 0.3 then reason = "unwanted" end
    if #s.late > 0 and math.random() < 0.2 then order, reason = pick(s.late), "late" end
    if order.remaining < 1 then return call(s, order.number, 0, reason) end
    return call(s, order.number, amount_up_to(order.remaining), reason)
  elseif r <= 78 then
    if last_keyed ~= nil then return last_keyed end
    local order = pick(s.delivered)
    return call(s, order.number, amount_up_to(order.remaining), "damaged")
  elseif r <= 80 then
    return call(s, s.foreign, 100, "damaged")
  elseif r <= 82 then
    return call(s, "NOPE-" .. math.random(1000000), 100, "damaged")
  elseif r <= 86 then
    return call(s, pick(s.closed), 100, "damaged")
  elseif r <= 89 then
    return call(s, pick(s.delivered).number, 0, "unwanted")
  elseif r <= 95 then
    local order = pick(s.delivered)
    return call(s, order.number, order.remaining + math.random(1, 5000), "damaged")
  else
    return call(s, pick(s.early).number, 100, "late")
  end
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  if not expect[status] then
    bad_bodies = bad_bodies + 1
  elseif status == 200 or status == 201 then
    if not string.find(body, '"ok":%s*true') then bad_bodies = bad_bodies + 1 end
  elseif status == 422 then
    if not (string.find(body, '"ok":%s*false') and string.find(body, '"code":')) then bad_bodies = bad_bodies + 1 end
  end
end

function done(summary, latency, requests)
  local merged, bad = {}, 0
  for _, thread in ipairs(threads) do
    for code, n in pairs(thread:get("statuses")) do merged[code] = (merged[code] or 0) + n end
    bad = bad + thread:get("bad_bodies")
  end
  local parts = {}
  for code, n in pairs(merged) do table.insert(parts, string.format('"%d":%d', code, n)) end
  -- The latency histogram as [microseconds, count] pairs, so that runs in slices can be merged.
  local histogram = {}
  for i = 1, #latency do
    local value, count = latency(i)
    table.insert(histogram, string.format("[%d,%d]", value, count))
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"latency_us":{"p50":%d,"p90":%d,"p95":%d,"p99":%d,"mean":%.1f,"max":%d},' ..
    '"statuses":{%s},"unexpected":%d,"socket_errors":{"connect":%d,"read":%d,"write":%d,"timeout":%d},' ..
    '"histogram":[%s]}\n',
    summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(90), latency:percentile(95), latency:percentile(99), latency.mean, latency.max,
    table.concat(parts, ","), bad, e.connect, e.read, e.write, e.timeout, table.concat(histogram, ",")))
end
