"""The processes of a student's kernel, read from Linux's /proc, and the error a grader sees when the kernel dies.

Its own module so that kernel_memory (which measures those processes) and student_kernel (which drives the kernel
and uses kernel_memory) do not import each other (issue 41, item 9).
"""
import os


class KernelDied(RuntimeError):
    pass


def process_tree(root):
    """`root` and every live process below it: {pid: the fields of /proc/PID/stat after the command name}."""
    children, stats = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        stats[int(entry)] = fields
    tree, stack = {}, [root]
    while stack:
        pid = stack.pop()
        if pid in stats:
            tree[pid] = stats[pid]
        stack += children.get(pid, [])
    return tree


def process_tree_cpu_seconds(root):
    """CPU seconds used so far by `root` and every live process below it (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    return sum(int(fields[11]) + int(fields[12]) for fields in process_tree(root).values()) / tick
