"""The verdict on this host's Node: the labels and annotations a node identity may set,
reconcile (desired vs actual, pure) and the publisher that patches the Node through agent.kube.
"""
