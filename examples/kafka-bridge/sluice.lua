-- examples/kafka-bridge/sluice.lua — Kafka → sluice → Kafka (docs/kafka-bridge.md).
--
--   KAFKA_BROKERS=host:9092 ./bin/sluice serve -c examples/kafka-bridge/sluice.lua
--
-- Orders are read from the topic "orders" (a consumer group; offsets are
-- committed only once the events are on sluice's disk), stored in the set
-- "orders", and routed back to Kafka: every order to "orders.audit", big
-- ones marked vip to "orders.big". Records of the lane feature-x (a `lane`
-- record header) go to "orders.big.feature-x" instead of production's topic.

server { listen = "127.0.0.1:8080", data_dir = "data" }

local brokers = env("KAFKA_BROKERS", "127.0.0.1:9092")

set "orders" { partitions = 4 }
set "orders-dlq" { partitions = 1 }

-- A test lane: its events fall back to the base rules unless a rule
-- overrides it (docs/lanes.md).
lane "feature-x" { env = "boe" }

source.kafka {
  name = "orders-in",
  brokers = brokers,
  topics = { "orders" },
  group = "sluice-orders",      -- offsets are this group's: another name reads again
  start = "beginning",          -- where a partition without a committed offset starts
  set = "orders",
  type = "shop.order",          -- records that are not CloudEvents are wrapped with this type
  source = "kafka://orders",
}

-- Big orders, marked vip, to orders.big, keyed like the input record
-- (partitionkey = the record's key), so one customer's orders stay in order.
rule "big-orders" {
  set = "orders",
  match = { data = { amount = { { numeric = { ">", 100 } } } } },
  transform = function(e) e.data.vip = true; return e end,
  target = target.kafka { brokers = brokers, topic = "orders.big" },
  lanes = {
    -- feature-x's big orders go to its own topic, never to production's
    ["feature-x"] = { target = target.kafka { brokers = brokers, topic = "orders.big.feature-x" } },
  },
  dlq = "orders-dlq",
}

-- Every order, as a structured CloudEvent (JSON with its attributes), to the
-- audit topic. feature-x orders fall back to this rule and keep their lane:
-- their records carry a `lane: feature-x` header.
rule "audit" {
  set = "orders",
  target = target.kafka { brokers = brokers, topic = "orders.audit", body = "structured" },
  dlq = "orders-dlq",
}
