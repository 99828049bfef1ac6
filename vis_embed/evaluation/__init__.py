"""Evaluation: retrieval metrics, peer metrics, the benchmark harness and reports."""
