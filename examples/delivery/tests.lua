-- examples/delivery/tests.lua — which orders each rule delivers:
--
--   sluice test examples/delivery/sluice.lua examples/delivery/tests.lua

local function order(id, type)
  return { specversion = "1.0", id = id, source = "/shop", type = type, subject = "cust-7",
           data = { amount = 42 } }
end

test "created orders go to the webhook" {
  rule = "orders-to-webhook",
  events = { order("o1", "order.created"), order("o2", "order.cancelled") },
  expect = { { id = "o1", subject = "cust-7" } },
}

test "every order goes to Kafka" {
  rule = "orders-to-kafka",
  events = { order("o1", "order.created"), order("o2", "order.cancelled") },
  expect = { { id = "o1" }, { id = "o2" } },
}
