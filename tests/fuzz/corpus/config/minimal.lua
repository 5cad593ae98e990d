set "demo" { }
