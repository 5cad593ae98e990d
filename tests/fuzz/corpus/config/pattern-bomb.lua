local s = string.rep("a", 5000)
string.find(s, string.rep("a?", 5000) .. string.rep("a", 5000))
