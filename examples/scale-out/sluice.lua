-- examples/scale-out/sluice.lua — one event set on a Kafka cluster, shared by
-- every `sluice serve` started with this file (docs/scale-out.md).
--
--   KAFKA_BROKERS=host:9092 ./bin/sluice serve -c examples/scale-out/sluice.lua \
--     --data /var/lib/sluice-r1 --listen 0.0.0.0:8080
--
-- Start it on as many machines as you like (each with a data folder of its
-- own): they form the consumer group sluice.set.orders, which splits the 6
-- partitions of the topic demo.orders among them, and each router runs both
-- rules over the partitions it owns. run.sh does it on one machine with
-- librdkafka's mock cluster and three routers.

server {
  kafka = {
    brokers = env("KAFKA_BROKERS", "127.0.0.1:9092"),
    topic_prefix = "demo.",        -- the set's topic demo.orders, the cursors in demo.cursors
    client_id = "sluice-demo",
    session_timeout = "6s",        -- a killed router's partitions move after this long
  },
}

-- The topic is created at start when missing (6 partitions, 3 replicas); the
-- mock cluster cannot create topics, so run.sh makes it beforehand.
set "orders" { backend = "kafka", partitions = 6, replication = 3, ack = "durable" }

-- Where this router writes what it delivers: each router a file of its own,
-- so that you can see which router routed which partitions.
local out = env("ROUTER_OUT", "out")

-- Every order, as delivered, to this router's file.
rule "all-orders" {
  set = "orders",
  start = "beginning",
  target = target.file { path = out .. "/orders.ndjson" },
}

-- Orders over 100, marked vip. Both rules read the topic through one shared
-- reader per partition: one fetch per router, whatever the number of rules.
rule "big-orders" {
  set = "orders",
  start = "beginning",
  match = { data = { amount = { { numeric = { ">", 100 } } } } },
  transform = function(e) e.data.vip = true; return e end,
  target = target.file { path = out .. "/big-orders.ndjson" },
}
