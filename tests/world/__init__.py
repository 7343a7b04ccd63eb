"""Tests of the built-in world."""
