"""The checks: one module per check (or small family), each a pure function of host facts.

``checks.registry.ALL_CHECKS`` is the explicit registry; importing this package has no side
effects and discovers nothing.
"""
