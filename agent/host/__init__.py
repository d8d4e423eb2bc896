"""The Host seam and its sources: the live machine, a bare tree, a bundle; and `collect`, which
captures what the checks declare into a bundle (redacted).

Checks see the host only through ``agent.host.seam.Host`` (docs/architecture.md).
"""
