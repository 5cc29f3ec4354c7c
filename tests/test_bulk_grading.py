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


def run_child(tmp_path, mode, child=CHILD):
    environment = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}",
                       PYTHONPATH=str(ROOT / "autograde"))
    done = subprocess.run([sys.executable, "-c", child, str(tmp_path / f"{mode}.db"), mode], capture_output=True,
                          text=True, env=environment, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_gradebooks_tables_are_looked_for_once_per_engine(tmp_path):
    stock, bulk = run_child(tmp_path, "stock"), run_child(tmp_path, "bulk")
    assert stock["first"] > 0 and stock["five more"] >= 5 * 10  # nbgrader: every table, at every access
    assert bulk["first"] > 0 and bulk["five more"] == 0
    assert bulk["forked child"] == 0 and stock["forked child"] == 0


SAVE_CHILD = r'''
import json, sys
import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from nbgrader.api import Gradebook
from nbgrader.preprocessors import SaveAutoGrades
from nbgrader.utils import compute_checksum
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session
from qkv_autograde.grading import bulk_grading

url = "sqlite:///" + sys.argv[1]
if sys.argv[2] == "bulk":
    bulk_grading.enable()
commits, queries = [], []
event.listen(Session, "after_commit", lambda session: commits.append(1))
event.listen(Engine, "before_cursor_execute", lambda *args: queries.append(1))

def meta(**nbgrader):
    return {"nbgrader": dict({"schema_version": 3, "locked": False, "solution": False, "grade": False}, **nbgrader)}

answer = new_code_cell("def f():\n    raise NotImplementedError", metadata=meta(grade_id="answer", solution=True))
answer.metadata.nbgrader["checksum"] = compute_checksum(answer)  # left as released: "No response."
written = new_markdown_cell("my answer", metadata=meta(grade_id="written", solution=True, grade=True, points=2))
written.metadata.nbgrader["checksum"] = "released"  # changed: needs hand grading
passed = new_code_cell("assert True", metadata=meta(grade_id="passes", grade=True, points=3, locked=True))
failed = new_code_cell("assert False", metadata=meta(grade_id="fails", grade=True, points=1, locked=True),
                       outputs=[new_output("error", ename="AssertionError", evalue="", traceback=[])])
nb = new_notebook(cells=[answer, written, passed, failed])
with Gradebook(url) as gb:
    gb.add_assignment("a")
    gb.add_notebook("n", "a")
    gb.add_solution_cell("answer", "n", "a")
    gb.add_solution_cell("written", "n", "a")
    gb.add_grade_cell("written", "n", "a", max_score=2, cell_type="markdown")
    gb.add_grade_cell("passes", "n", "a", max_score=3, cell_type="code")
    gb.add_grade_cell("fails", "n", "a", max_score=1, cell_type="code")
    for cell in nb.cells:
        gb.add_source_cell(cell.metadata.nbgrader["grade_id"], "n", "a", cell_type=cell.cell_type, source=cell.source,
                           locked=cell.metadata.nbgrader["locked"], checksum=compute_checksum(cell))
    gb.add_student("ada")
    gb.add_submission("a", "ada")
before = len(commits)
SaveAutoGrades().preprocess(nb, {"nbgrader": {"notebook": "n", "assignment": "a", "student": "ada", "db_url": url}})
with Gradebook(url) as gb:
    notebook = gb.find_submission_notebook("n", "a", "ada")
    rows = sorted([g.name, g.auto_score, g.needs_manual_grade] for g in notebook.grades)
    comments = sorted([c.name, c.auto_comment] for c in notebook.comments)
# OverwriteCells on a notebook whose locked test was edited and whose points were raised
from nbgrader.preprocessors import OverwriteCells
tampered = nbformat.from_dict(nb)
tampered.cells[2].source = "pass  # my own test"
tampered.cells[3].metadata.nbgrader["points"] = 10
queries_before = len(queries)
restored, _ = OverwriteCells().preprocess(tampered, {"nbgrader": {"notebook": "n", "assignment": "a", "db_url": url}})
print(json.dumps({"grades": rows, "comments": comments, "commits": len(commits) - before,
                  "overwritten": [[c.source, c.metadata.nbgrader.get("points"), c.metadata.nbgrader["checksum"]]
                                  for c in restored.cells], "overwrite queries": len(queries) - queries_before}))
'''


def test_a_notebooks_automatic_grades_are_saved_in_one_commit_with_the_same_values(tmp_path):
    seen = {mode: run_child(tmp_path, mode, SAVE_CHILD) for mode in ("stock", "bulk")}
    assert seen["stock"]["grades"] == [["fails", 0.0, False], ["passes", 3.0, False], ["written", None, True]]
    assert seen["stock"]["comments"] == [["answer", "No response."], ["written", None]]
    assert seen["stock"]["commits"] >= 5, seen  # nbgrader: one a cell looked up (and its gradebook's own)
    assert {k: v for k, v in seen["bulk"].items() if k not in ("commits", "overwrite queries")} == \
        {k: v for k, v in seen["stock"].items() if k not in ("commits", "overwrite queries")}
    # one, for the whole notebook: none a cell, and none for the course, which the set-up's gradebook found already
    assert seen["bulk"]["commits"] == 1, seen
    # OverwriteCells: the same notebook back, the released cells read at once instead of a query or two a cell
    assert seen["stock"]["overwritten"][2][0] == "assert True" and seen["stock"]["overwritten"][3][1] == 1.0
    assert seen["bulk"]["overwritten"] == seen["stock"]["overwritten"]
    # nbgrader: a query a cell and another a graded cell (7 here, with the gradebook's own in the stock run); here
    # the notebook, then its source, task and grade cells, whatever their number
    assert seen["bulk"]["overwrite queries"] <= 5 < seen["stock"]["overwrite queries"], seen


CONNECTIONS_CHILD = r'''
import json, os, sys
from nbgrader.api import Gradebook
from sqlalchemy import event
from sqlalchemy.engine import Engine
from qkv_autograde.grading import bulk_grading

url = "sqlite:///" + sys.argv[1]
bulk_grading.enable()
connects, course_lookups = [], []
event.listen(Engine, "connect", lambda *a: connects.append(1))
event.listen(Engine, "before_cursor_execute",
             lambda conn, cursor, sql, *rest: course_lookups.append(1) if "FROM course" in sql else None)

def opened_five_times():
    before = len(connects), len(course_lookups)
    for _ in range(5):
        with Gradebook(url) as gradebook:
            assert [s.id for s in gradebook.students] == ["ada"]
            engine = gradebook.engine
    return {"connects": len(connects) - before[0], "course lookups": len(course_lookups) - before[1],
            "left open": engine.pool.checkedin()}

with Gradebook(url) as gradebook:
    gradebook.add_student("ada")
seen = {"outside the pass": opened_five_times()}
with bulk_grading.connections_kept():
    seen["in the pass"] = opened_five_times()
    child = os.fork()  # a connection must not cross a fork: the pool is emptied first
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
    seen["after a fork"] = opened_five_times()
seen["left open after the pass"] = sum(engine.pool.checkedin() for engine in bulk_grading._engines.values())
print(json.dumps(seen))
'''


def test_in_nbgraders_pass_the_gradebook_keeps_its_connection_and_finds_the_course_once(tmp_path):
    bulk = run_child(tmp_path, "bulk", CONNECTIONS_CHILD)
    # outside the pass, as nbgrader does: a connection per access, closed after it
    assert bulk["outside the pass"] == {"connects": 5, "course lookups": 0, "left open": 0}
    assert bulk["in the pass"] == {"connects": 1, "course lookups": 0, "left open": 1}
    assert bulk["after a fork"] == {"connects": 1, "course lookups": 0, "left open": 1}
    assert bulk["left open after the pass"] == 0
