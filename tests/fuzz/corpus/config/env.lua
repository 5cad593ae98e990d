set "a" { }
source.webhook { name = "w", preset = "stripe", secret = env "NOPE", set = "a" }
