"""Models built from models: interpolation and distillation."""
