"""Model files: export, model cards, fingerprints of model files, tiny checkpoints."""
