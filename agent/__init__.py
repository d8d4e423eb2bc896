"""gpu-node-agent: the core (host seam, engine, report, outputs).

The core never imports ``checks``: the command line (agent.cli) is the composition root
that hands the registry to the engine.
"""
