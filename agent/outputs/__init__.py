"""Outputs: each renders a Report (text, JSON, Prometheus metrics and the endpoint serving them,
the node_exporter textfile, the NFD feature file, the verdict on the Node). No output builds or
reads a Host (docs/architecture.md).
"""
