for i = 1, 100000 do set ("s" .. i) { partitions = 4 } end
