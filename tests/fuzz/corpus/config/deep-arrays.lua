local t = {} ; local c = t ; for i = 1, 200000 do c = { c } end
set "a" { }
rule "r" { set = "a", match = { data = c }, target = target.file { path = "x" } }
