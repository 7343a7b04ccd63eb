"""Atari games recorded with the Arcade Learning Environment, as semworld domains (pong, freeway)."""
