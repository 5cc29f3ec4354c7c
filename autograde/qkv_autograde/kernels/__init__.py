"""Kernels: the student's code, walled off. The bubblewrap sandbox, the kernel's view of qkv (graded references
withheld), warm templates forked per submission, the bounded sockets and outputs, the memory the grader measures
from outside, and the student's functions called as plain data through qkv.wire.

Imports nothing else of qkv_autograde: a kernel knows nothing of gradebooks, classes or reports.
"""
