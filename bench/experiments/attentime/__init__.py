"""The Attentime seed's experiments beside a standard transformer (docs/attentime.md):
`python -m bench.experiments.attentime.run`, its data sets (tasks) and the world evaluation (eval_world)."""
