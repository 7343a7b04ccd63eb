"""Benchmarks of the product: speed, cost and quality, each run from the repository root as `python -m bench.X`
(docs/benchmarks.md lists them). bench.experiments holds the scripts that reproduce a documented result."""
