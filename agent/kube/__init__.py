"""The verdict on the Node: kubeconfig, a small API client, the node name, reconcile, publish.

Only agent.cli and agent.daemon.service (composition roots) use this package; checks never do (they
read the API through host facts, agent/kube/facts.py).
"""
