-- examples/quickstart/tests.lua — tests for the rules of sluice.lua:
--
--   sluice test examples/quickstart/sluice.lua examples/quickstart/tests.lua
--
-- The format is in docs/testing.md. A tests file is Lua: a helper keeps the
-- events short.

local function order(id, amount, extra)
  local e = { specversion = "1.0", id = id, source = "/shop", type = "order.created",
              time = "2024-05-01T12:00:00Z", data = { amount = amount, currency = "EUR" } }
  for k, v in pairs(extra or {}) do e[k] = v end
  return e
end

test "big orders are marked vip" {
  rule = "big-orders",
  events = { order("o1", 150), order("o2", 5), order("o3", 100.5) },
  expect = {
    { id = "o1", data = { amount = 150, vip = true } },
    { id = "o3", data = { vip = true } },
  },
}

test "an order of exactly 100 is not big" {
  rule = "big-orders",
  events = { order("o4", 100) },
  expect = {},
}

test "cancelled orders are not routed" {
  rule = "big-orders",
  events = { order("o5", 500, { type = "order.cancelled" }) },
  expect = {},
}

test "the rule sees the event as stored" {
  rule = "big-orders",
  events = {
    -- events can be JSON text too, as they would be posted
    [[{"specversion":"1.0","id":"o6","source":"/shop","type":"order.created",
       "time":"2024-05-01T12:00:00Z","data":{"amount":250,"currency":"USD"}}]],
  },
  expect = {
    { specversion = "1.0", id = "o6", source = "/shop", type = "order.created",
      time = "2024-05-01T12:00:00Z", data = { amount = 250, currency = "USD", vip = true },
      sluiceset = "orders", sluicepartition = 0, sluiceoffset = 0 },
  },
  exact = true,
}

test "every order leaves a note" {
  rule = "order-notes",
  events = { order("o7", 12), order("o8", 99.5) },
  expect = { "order o7: 12 EUR", "order o8: 99.5 EUR" },
}

test "an order without a currency is refused at ingest" {
  rule = "big-orders",
  events = { { specversion = "1.0", id = "o9", source = "/shop", type = "order.created",
               data = { amount = 150 } } },
  expect_error = "SchemaViolation",
}
