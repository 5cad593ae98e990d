-- examples/kafka-bridge/tests.lua — routing of the bridge, without Kafka:
--
--   ./bin/sluice test examples/kafka-bridge/sluice.lua examples/kafka-bridge/tests.lua
--
-- The events are what source.kafka stores for a plain JSON record of the
-- topic "orders" (docs/sources.md#sourcekafka): id TOPIC-PARTITION-OFFSET,
-- the record's key as partitionkey, its value as data.

local function record(offset, key, amount, lane)
  return { specversion = "1.0", id = "orders-0-" .. offset, source = "kafka://orders",
           type = "shop.order", partitionkey = key, lane = lane,
           datacontenttype = "application/json", data = { amount = amount } }
end

test "big orders are marked vip" {
  rule = "big-orders",
  events = { record(0, "cust-1", 150), record(1, "cust-2", 20), record(2, "cust-1", 101) },
  expect = {
    { id = "orders-0-0", partitionkey = "cust-1", data = { amount = 150, vip = true } },
    { id = "orders-0-2", data = { amount = 101, vip = true } },
  },
}

test "feature-x's big orders go through its override, lane kept" {
  rule = "big-orders",
  events = { record(3, "cust-9", 500, "feature-x") },
  expect = { { id = "orders-0-3", lane = "feature-x", data = { vip = true } } },
}

test "every order is audited, feature-x's too (fallback to the base rule)" {
  rule = "audit",
  events = { record(4, "cust-1", 5), record(5, "cust-2", 500, "feature-x") },
  expect = { { id = "orders-0-4" }, { id = "orders-0-5", lane = "feature-x" } },
}

test "an undeclared lane is refused, as the source refuses its record" {
  rule = "audit",
  events = { record(6, "cust-1", 5, "nobody") },
  expect = {},
  expect_error = "UnknownLane",
}
