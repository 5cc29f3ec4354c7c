"""`nbgrader collect` for a class that hands in through the exchange (JupyterHub's Assignments tab), keeping what it
collects the instructor's alone (issue 42).

nbgrader's submit makes each submission's folder in the exchange 0777 (so that the instructor can remove it later),
and its collect copies folders with their modes: submitted/<student>/<lesson>/ came out 0777, writable by every user
of the machine, a classmate's grade one edit away. Here every collected folder becomes 0700 and every file 0600 (with
nbgrader's groupshared option, 2770 and 0660: the course's group of graders, never everyone).
"""
import os

from nbgrader.exchange.default.collect import ExchangeCollect


class CollectPrivately(ExchangeCollect):
    def do_copy(self, src, dest, log=None):
        super().do_copy(src, dest, log)
        folders, files = (0o2770, 0o660) if self.coursedir.groupshared else (0o700, 0o600)
        for folder, _, names in os.walk(dest):
            os.chmod(folder, folders)
            for name in names:
                path = os.path.join(folder, name)
                if not os.path.islink(path):
                    os.chmod(path, files)
