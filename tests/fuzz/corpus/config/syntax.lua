set "a" {
