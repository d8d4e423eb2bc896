"""NVML in a killable worker process: the worker process (worker.py and readers.py, the only
importers of pynvml), the client that supervises it, and the XID event stream.
"""
