"""API access only: kubeconfig and credentials, a small client, the node name, the session.

The command line and the Node publisher (agent/outputs/node/) use it; checks never do (they
read the API through host facts, agent/kube/facts.py).
"""
