local t = {}; t.x = t
set "a" { }
rule "r" { set = "a", match = t, target = target.file { path = "x" } }
