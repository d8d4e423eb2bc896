"""gpu-node-agent: the core (model, engine, report) and the command line; wings in folders.

The core never imports ``checks``: the command line (agent.cli) is the composition root
that hands the registry to the engine.
"""
