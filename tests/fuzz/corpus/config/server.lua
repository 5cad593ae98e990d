server { listen = "127.0.0.1:9090", data_dir = "d", lua_memory = "16MiB", lua_instructions = 100000 }
set "a" { partitions = 2, retention = "1h", durable = true }
