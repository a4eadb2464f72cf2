"""End-to-end recipes: the PTB reproduction."""
