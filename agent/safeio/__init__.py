"""Reading and writing what the agent does not trust: bounded reads of regular files, bounded
JSON and YAML, directories walked without following a symlink, atomic replacement.

The bottom of the house (docs/architecture.md): it imports nothing from the agent but
``agent.errors``.
"""
