"""Triton kernels used as kperf-ci's examples and GPU benchmark suite.

Each module is self-contained (it imports only torch and triton), so it can be imported by file
path in a worker process, as kperf's static capture does.
"""
