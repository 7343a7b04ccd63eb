"""Domain implementations that ship with the pipeline (the built-in world's lives in world/domain.py). Inference
modules never import this package: they receive a domain from the registry in pipeline/domain.py."""
