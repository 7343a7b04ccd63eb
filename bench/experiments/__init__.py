"""Scripts that reproduce a result the docs report (tensor memory, Attentime, the projection, the horizon plots,
rebuilding a recipe phase), each run from the repository root as `python -m bench.experiments.X`."""
