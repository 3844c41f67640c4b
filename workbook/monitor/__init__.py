"""Per-layer gradient norms recorded while a model trains, drawn live (04)."""
