set "bad name!" { partitions = -1 }
rule "r" { set = "nope", match = { a = "b" } }
rule "r" { }
unknown_call()
