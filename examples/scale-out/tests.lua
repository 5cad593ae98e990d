-- examples/scale-out/tests.lua — what each rule delivers (no cluster needed):
--
--   ./bin/sluice test examples/scale-out/sluice.lua examples/scale-out/tests.lua

local function order(id, key, amount)
  return { specversion = "1.0", id = id, source = "/shop", type = "order.created",
           partitionkey = key, data = { amount = amount } }
end

test "every order is delivered as it is" {
  rule = "all-orders",
  events = { order("o1", "cust-1", 150), order("o2", "cust-2", 20) },
  expect = { { id = "o1", partitionkey = "cust-1", data = { amount = 150 } },
             { id = "o2", data = { amount = 20 } } },
}

test "big orders are marked vip" {
  rule = "big-orders",
  events = { order("o3", "cust-1", 150), order("o4", "cust-2", 100), order("o5", "cust-3", 101) },
  expect = { { id = "o3", data = { amount = 150, vip = true } },
             { id = "o5", data = { amount = 101, vip = true } } },
}
