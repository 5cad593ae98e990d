set "logs" { partitions = 1 }
set "gh" { }
source.file { path = "/var/log/app/*.log", set = "logs", type = "app.log", parse = "json" }
source.webhook { name = "github", preset = "github", secret = "s", set = "gh" }
source.kafka { brokers = "k1:9092", topics = { "orders" }, group = "g", set = "logs" }
