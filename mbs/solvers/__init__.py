"""Time integrators (see the solver table in README.md)."""
