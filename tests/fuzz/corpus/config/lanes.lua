lane "feature-x" { env = "boe" }
lane "release-42" { env = "ppe" }
lanes { auto = true }
set "o" { }
rule "b" { set = "o", target = target.file { path = "x" }, lanes = { ["release-42"] = { target = target.file { path = "y" } } } }
