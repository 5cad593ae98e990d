-- examples/quickstart/sluice.lua — orders come in, big ones are marked and
-- routed to a file, and every order leaves a one-line note in another.
--
--   sluice check examples/quickstart/sluice.lua
--   sluice test  examples/quickstart/sluice.lua examples/quickstart/tests.lua
--   sluice serve -c examples/quickstart/sluice.lua

server { listen = "127.0.0.1:8080", data_dir = "data" }

-- Every order.created event must carry data that fits the schema: an event
-- that does not is refused at ingest (400 SchemaViolation).
set "orders" {
  partitions = 4,
  retention = "7d",
  schemas = { ["order.created"] = "schemas/order_created.json" },
}

-- Orders over 100 get data.vip = true and go to out/big-orders.ndjson.
rule "big-orders" {
  set = "orders",
  description = "orders over 100, marked vip",
  match = { type = { "order.created" }, data = { amount = { { numeric = { ">", 100 } } } } },
  transform = function(e)
    e.data.vip = true
    return e
  end,
  target = target.file { path = "out/big-orders.ndjson" },
}

-- One line of text per order (an input template: the target gets the text,
-- not the event).
rule "order-notes" {
  set = "orders",
  match = { type = { "order.created" } },
  input = {
    paths = { id = "$.id", amount = "$.data.amount", currency = "$.data.currency" },
    template = "order <id>: <amount> <currency>",
  },
  target = target.file { path = "out/order-notes.txt" },
}
