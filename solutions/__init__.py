"""Worked solutions to the notebooks' exercises (see README.md)."""
