"""The built-in physical world: seeded 2-D scenes, their frames and their canonical semantic states."""
