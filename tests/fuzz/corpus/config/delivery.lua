-- examples/delivery/sluice.lua — orders to a webhook and to Kafka, with
-- retries and a dead-letter set (docs/targets.md).
--
--   sluice serve -c examples/delivery/sluice.lua
--
-- Endpoints come from the environment, so the file holds no secrets.

server { data_dir = "data" }

set "orders" { partitions = 4 }
-- Events a target gave up on, with sluiceerror, sluiceattempts, … attributes.
-- `sluice redrive orders-dlq --to orders` puts them back.
set "orders-dlq" { partitions = 1, retention = "14d" }

rule "orders-to-webhook" {
  set = "orders",
  match = { type = { "order.created" } },
  target = target.http {
    url = env("HOOK_URL", "http://127.0.0.1:9000/orders/{subject}"),
    auth = { bearer = env("HOOK_TOKEN", "dev-token") },
    timeout = "5s",
    concurrency = 4,
  },
  -- A webhook that is down for a while is retried for two hours, then the
  -- event goes to the dlq; a 4xx answer sends it there at once.
  retry = { attempts = 40, max_age = "2h", initial = "200ms", max = "1m" },
  dlq = "orders-dlq",
}

rule "orders-to-kafka" {
  set = "orders",
  -- every order event, as a record of topic orders.<type> keyed by subject
  target = target.kafka {
    brokers = env("KAFKA_BROKERS", "127.0.0.1:9092"),
    topic = "orders.{type}",
    key = "{subject}",
    properties = { ["linger.ms"] = 2 },
  },
  dlq = "orders-dlq",
}
