-- examples/lanes/sluice.lua — test traffic on the production bus (docs/lanes.md).
--
--   ./bin/sluice serve -c examples/lanes/sluice.lua
--
-- Production orders go to the billing service. Two offline (boe) lanes test
-- branches: `feature-x` has its own billing endpoint, `feature-y` has none and
-- falls back to production billing (its deliveries carry X-Sluice-Lane). The
-- pre-production lane `release-42` is delivered only where a rule overrides it:
-- billing marks its orders, the audit rule has no override, so release-42
-- orders never reach the audit log.

server { listen = "127.0.0.1:8080", data_dir = "./sluice-data" }

set "orders" { partitions = 4 }

lane "feature-x"  { env = "boe", description = "billing rewrite" }
lane "feature-y"  { env = "boe" }
lane "release-42" { env = "ppe" }

rule "billing" {
  set = "orders",
  match = { type = { "order.created" } },
  target = target.http { url = env("BILLING_URL", "http://127.0.0.1:9001/hook") },
  lanes = {
    ["feature-x"] = {
      target = target.http { url = env("BILLING_FX_URL", "http://127.0.0.1:9002/hook") },
    },
    ["release-42"] = {
      transform = function(e) e.data.preprod = true; return e end,
    },
  },
}

rule "audit" {
  set = "orders",
  target = target.file { path = "audit.ndjson" },
}
