"""Chunking machinery of the ``chunk`` pass: op rules, region discovery, the rewrite."""
