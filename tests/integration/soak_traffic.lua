-- SPDX-License-Identifier: Apache-2.0
-- wrk script for `make soak` (tests/integration/soak.py): the bulk traffic
-- through HAProxy, with hot, warm and cold API keys and client IPs.
--
--   wrk -t T -c C -d D -s soak_traffic.lua URL -- DELAY_MS
--
-- Each connection waits DELAY_MS before each request, so the rate is about
-- C x 1000 / (DELAY_MS + latency): modest and steady, not as fast as wrk can.
-- The client IP goes in X-Forwarded-For (the soak's HAProxy takes `src` from
-- it). Keys and IPs:
--   hot:  4 API keys and 4 IPs, 40% of the requests (the free plan: mostly 429)
--   warm: 100 API keys (and the kit's tenant-* keys) and 200 IPs, 35%
--   cold: an API key and an IP never sent before, 20%
--   none: no API key at all (only the IP rules apply), 5%
-- 2% of the requests go to /login (the kit's rule that fails closed).
-- The soak's bound-check keys (soak-bound-*) are never sent from here.
--
-- done() prints one line for soak.py to read:
--   soak-wrk: requests=N s2xx=N s429=N s5xx=N other=N degraded=N unavailable=N
-- (per status class, counted in response(); wrk's own "Non-2xx or 3xx" count
-- lumps the expected 429s with the 5xx that must not happen).

local threads = {}
local counter = 1

function setup(thread)
    thread:set("id", counter)
    counter = counter + 1
    table.insert(threads, thread)
end

local tenants = {"tenant-paid-1", "tenant-paid-2", "tenant-ent-1", "tenant-big-1"}
local delay_ms = 10
local seq = 0
-- counters, read by done() through thread:get()
s2xx, s429, s5xx, other, degraded, unavailable = 0, 0, 0, 0, 0, 0

function init(args)
    delay_ms = tonumber(args[1] or "10")
    math.randomseed(os.time() * 1000 + id)
end

local function pick_key()
    local x = math.random()
    if x < 0.40 then
        return "soak-hot-" .. math.random(4)
    elseif x < 0.70 then
        return "soak-warm-" .. math.random(100)
    elseif x < 0.75 then
        return tenants[math.random(#tenants)]
    elseif x < 0.95 then
        seq = seq + 1
        return "soak-cold-" .. id .. "-" .. seq .. "-" .. math.random(1000000000)
    end
    return nil
end

local function pick_ip()
    local x = math.random()
    if x < 0.40 then
        return "10.0.0." .. math.random(4)
    elseif x < 0.80 then
        local n = math.random(200)
        return "10.1." .. math.floor(n / 256) .. "." .. (n % 256)
    end
    return "10." .. math.random(2, 254) .. "." .. math.random(0, 255) .. "." .. math.random(1, 254)
end

function request()
    local headers = {["X-Forwarded-For"] = pick_ip()}
    local key = pick_key()
    if key then
        headers["X-Api-Key"] = key
    end
    local path = "/api/items"
    if math.random() < 0.02 then
        path = "/login"
    end
    return wrk.format("GET", path, headers)
end

function delay()
    return delay_ms
end

function response(status, headers, body)
    if status >= 200 and status < 300 then
        s2xx = s2xx + 1
    elseif status == 429 then
        s429 = s429 + 1
    elseif status >= 500 then
        s5xx = s5xx + 1
    else
        other = other + 1
    end
    local st = headers["ratelimit-status"] or headers["RateLimit-Status"]
    if st == "degraded" then
        degraded = degraded + 1
    elseif st == "unavailable" then
        unavailable = unavailable + 1
    end
end

function done(summary, latency, requests)
    local sum = {s2xx = 0, s429 = 0, s5xx = 0, other = 0, degraded = 0, unavailable = 0}
    for _, t in ipairs(threads) do
        for name, _ in pairs(sum) do
            sum[name] = sum[name] + (t:get(name) or 0)
        end
    end
    local e = summary.errors
    io.write(string.format("soak-wrk: requests=%d s2xx=%d s429=%d s5xx=%d other=%d degraded=%d "
                           .. "unavailable=%d connect=%d read=%d write=%d timeout=%d status=%d\n",
                           summary.requests, sum.s2xx, sum.s429, sum.s5xx, sum.other,
                           sum.degraded, sum.unavailable, e.connect, e.read, e.write,
                           e.timeout, e.status))
end
