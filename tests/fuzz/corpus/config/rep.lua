local s = string.rep("x", 1 << 20)
for i = 1, 100 do s = s .. s end
