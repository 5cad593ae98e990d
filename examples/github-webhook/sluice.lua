-- examples/github-webhook/sluice.lua — GitHub webhooks in, verified, routed
-- to HTTP services (docs/sources.md#sourcewebhook, docs/targets.md).
--
--   GH_SECRET=… ./bin/sluice serve -c examples/github-webhook/sluice.lua
--
-- GitHub posts to http://HOST:8080/v1/webhooks/github with the secret set in
-- the repository's webhook settings (content type application/json). sluice
-- checks X-Hub-Signature-256 before anything else: a bad signature gets 401
-- and nothing is stored. A verified delivery becomes one CloudEvent of type
-- com.github.<X-GitHub-Event> with id X-GitHub-Delivery and the payload as
-- data, stored in the set "github"; two rules route what matters.

server { listen = "127.0.0.1:8080", data_dir = "data" }

-- Every verified delivery, kept 30 days (replay a rule over it with
-- `sluice replay`).
set "github" { partitions = 1, retention = "30d" }
-- Deliveries a target gave up on (after retries, or a 4xx answer).
set "github-dlq" { partitions = 1 }

source.webhook {
  name = "github",          -- the URL: /v1/webhooks/github
  preset = "github",        -- X-Hub-Signature-256, X-GitHub-Event, X-GitHub-Delivery
  secret = env("GH_SECRET", "change-me"),  -- "NEW, OLD" while rotating
  set = "github",
}

-- Pushes to main: a small JSON document (an input template) to the deploy
-- service, which wants the repository, the commit and who pushed.
rule "deploy-main" {
  set = "github",
  match = { type = { "com.github.push" }, data = { ref = { "refs/heads/main" } } },
  input = {
    paths = { repo = "$.data.repository.full_name", sha = "$.data.after",
              by = "$.data.pusher.name", delivery = "$.id" },
    template = [[{"repo": "<repo>", "sha": "<sha>", "by": "<by>", "delivery": "<delivery>"}]],
  },
  target = target.http {
    url = env("DEPLOY_URL", "http://127.0.0.1:9000/deploy"),
    body = "data",          -- the template's document as the body, not a CloudEvent
    auth = { bearer = env("DEPLOY_TOKEN", "dev-token") },
  },
  retry = { attempts = 20, max_age = "1h" },
  dlq = "github-dlq",
}

-- Pull requests opened (not edited, closed, …): the whole CloudEvent to the
-- review bot, one request per event at most 5 a second.
rule "review-bot" {
  set = "github",
  match = { type = { "com.github.pull_request" }, data = { action = { "opened", "reopened" } } },
  target = target.http {
    url = env("REVIEW_URL", "http://127.0.0.1:9000/review"),
    rate = 5,
  },
  dlq = "github-dlq",
}
