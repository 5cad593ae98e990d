set "o" { }
rule "r" { set = "o", match = { type = { "x" } }, target = target.http { url = "http://127.0.0.1:1/{type}", mode = "binary", retry = { attempts = 3 } } }
rule "k" { set = "o", target = target.kafka { brokers = "127.0.0.1:9092", topic = "t" } }
rule "s" { set = "o", target = target.set { set = "o2" } }
