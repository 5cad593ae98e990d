local t = setmetatable({}, { __index = function(t, k) while true do end end })
set "x" (t)
