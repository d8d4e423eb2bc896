"""NVML in a killable worker process: the worker (the only importer of pynvml), the client
that supervises it, and the XID event stream.
"""
