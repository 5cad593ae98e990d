-- examples/lanes/tests.lua — which lane goes where:
--
--   ./bin/sluice test examples/lanes/sluice.lua examples/lanes/tests.lua

local function order(id, lane)
  return { specversion = "1.0", id = id, source = "/shop", type = "order.created",
           lane = lane, data = { amount = 42 } }
end

test "billing: production orders and the boe lanes, each by its route" {
  rule = "billing",
  events = { order("base-1"), order("fx-1", "feature-x"), order("fy-1", "feature-y") },
  expect = { { id = "base-1" }, { id = "fx-1", lane = "feature-x" }, { id = "fy-1", lane = "feature-y" } },
}

test "billing: the ppe lane goes through its override" {
  rule = "billing",
  events = { order("rc-1", "release-42") },
  expect = { { id = "rc-1", lane = "release-42", data = { amount = 42, preprod = true } } },
}

test "audit: no override and no fallback for the ppe lane" {
  rule = "audit",
  events = { order("base-1"), order("rc-1", "release-42"), order("fy-1", "feature-y") },
  expect = { { id = "base-1" }, { id = "fy-1" } },
}

test "a lane the config does not declare is refused, as the server refuses it" {
  rule = "billing",
  events = { order("x-1", "no-such-lane"), order("base-2") },
  expect = { { id = "base-2" } },
  expect_error = "UnknownLane",
}
