-- examples/github-webhook/tests.lua — what each rule sends, without a server
-- or GitHub:
--
--   ./bin/sluice test examples/github-webhook/sluice.lua examples/github-webhook/tests.lua
--
-- The events are what source.webhook stores for a GitHub delivery (see
-- docs/sources.md#sourcewebhook): type com.github.<event>, id the delivery id.

local function delivery(id, event, payload)
  return { specversion = "1.0", id = id, source = "/v1/webhooks/github",
           type = "com.github." .. event, webhook = "github",
           datacontenttype = "application/json", data = payload }
end

local function push(id, ref)
  return delivery(id, "push", { ref = ref, after = "c0ffee" .. id,
    repository = { full_name = "acme/shop" }, pusher = { name = "octocat" } })
end

test "a push to main becomes the deploy service's document" {
  rule = "deploy-main",
  events = { push("d1", "refs/heads/main") },
  expect = { { repo = "acme/shop", sha = "c0ffeed1", by = "octocat", delivery = "d1" } },
  exact = true,
}

test "pushes to other branches and tags are not deployed" {
  rule = "deploy-main",
  events = { push("d2", "refs/heads/feature"), push("d3", "refs/tags/v1.0") },
  expect = {},
}

test "other events never reach the deploy service" {
  rule = "deploy-main",
  events = { delivery("d4", "issues", { ref = "refs/heads/main", action = "opened" }) },
  expect = {},
}

test "opened and reopened pull requests go to the review bot as events" {
  rule = "review-bot",
  events = {
    delivery("p1", "pull_request", { action = "opened", number = 7 }),
    delivery("p2", "pull_request", { action = "closed", number = 7 }),
    delivery("p3", "pull_request", { action = "reopened", number = 7 }),
  },
  expect = {
    { id = "p1", type = "com.github.pull_request", data = { action = "opened", number = 7 } },
    { id = "p3", data = { action = "reopened" } },
  },
}
