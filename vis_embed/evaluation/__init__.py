"""Evaluation: retrieval metrics, peer protocols, the benchmark harness and reports."""
