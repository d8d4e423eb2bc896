"""`gpu-node-agent run`: the scheduler, its supervised threads, sd_notify. Assembled by the
command line (agent/cli_run.py), the one composition root.
"""
