local t = {} ; local c = t ; for i = 1, 100000 do c.a = {} ; c = c.a end
set "a" { }
rule "r" { set = "a", match = t, target = target.file { path = "x" } }
