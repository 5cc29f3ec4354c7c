"""What make grade's coordinator changes in its own process (qkv_autograde.grading.bulk_grading): the gradebook it
writes is the one nbgrader would write, with less asked of sqlite on the way. Run in a child process:
enable() is for good."""
import json
import os
import subprocess
import sys

from lessons import ROOT

CHILD = r'''
import json, os, sys
from qkv_autograde.grading import bulk_grading
from nbgrader.api import Gradebook
from sqlalchemy import event
from sqlalchemy.engine import Engine

statements = []
event.listen(Engine, "before_cursor_execute", lambda conn, cursor, sql, *rest: statements.append(sql))
url = "sqlite:///" + sys.argv[1]
if sys.argv[2] == "bulk":
    bulk_grading.enable()

def table_checks():
    return sum(sql.lstrip().upper().startswith("PRAGMA") for sql in statements)

seen = {}
with Gradebook(url) as gradebook:  # a new database: nbgrader makes its tables
    gradebook.add_student("s1")
seen["first"] = table_checks()
for _ in range(5):
    with Gradebook(url) as gradebook:
        assert [s.id for s in gradebook.students] == ["s1"]
seen["five more"] = table_checks() - seen["first"]
child = os.fork()
if child == 0:  # a worker forked from the coordinator: its own engine, which looks for the tables again
    before = table_checks()
    with Gradebook(url) as gradebook:
        ok = [s.id for s in gradebook.students] == ["s1"]
    os._exit(0 if ok and table_checks() > before else 3)
seen["forked child"] = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
print(json.dumps(seen))
'''


def run_child(tmp_path, mode):
    environment = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}",
                       PYTHONPATH=str(ROOT / "autograde"))
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / f"{mode}.db"), mode], capture_output=True,
                          text=True, env=environment, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_gradebooks_tables_are_looked_for_once_per_engine(tmp_path):
    stock, bulk = run_child(tmp_path, "stock"), run_child(tmp_path, "bulk")
    assert stock["first"] > 0 and stock["five more"] >= 5 * 10  # nbgrader: every table, at every access
    assert bulk["first"] > 0 and bulk["five more"] == 0
    assert bulk["forked child"] == 0 and stock["forked child"] == 0
