"""Turning an item into the model's inputs: prompts applied, processor run, lengths and token budgets."""
