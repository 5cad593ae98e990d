-- lua/sluice.lua — helpers for rule functions (placeholder; see rules/sandbox.h)
return nil
