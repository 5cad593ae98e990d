local t = setmetatable({}, {__pairs = function() while true do end end, __index = function() while true do end end, __len = function() while true do end end})
set "a" (t)
rule "r" (t)
