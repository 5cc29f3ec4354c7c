"""What `make grade`'s coordinator changes in its own process to put a whole class into the gradebook in one burst.

nbgrader is written for one notebook at a time, and three of its habits dominate once the grading itself has
moved to the workers (measured on 40 submissions of lesson 01, coordinator alone):

- Every commit waits for the disk. nbgrader commits to its sqlite gradebook ~37 times per notebook, and in
  sqlite's default mode each commit is an fsync: 1,482 commits took 5.7 s. Here the gradebook uses the
  write-ahead log with `synchronous=NORMAL`: a commit is appended to the log and the disk is synced at
  checkpoints; a killed process loses nothing, a power cut at worst the last commits, never the database
  (sqlite.org/wal.html), and a run cut short is regraded by the next one anyway (converter.py).
- Every gradebook access builds a new SQLAlchemy engine (nbgrader opened 361 of them), so no SQL statement is
  ever compiled only once. Here one engine per database URL serves them all (nbgrader still closes its
  sessions and disposes of the connections after each use).
- Every cell's nbgrader metadata is validated with `jsonschema.validate`, which checks the (fixed) schema itself
  again on every call, about two thirds of the cost. Here each schema is checked once: once per text, as every
  notebook's validator reads the schema file anew (kept by the dict's identity, each copy and its validator stayed
  in memory, about 20 KB a notebook: issue 45).
- SaveAutoGrades looks up each graded cell's grade and each answer's comment with a query joining six tables, and
  commits after each (~37 queries and commits a notebook): here the submitted notebook's grades and comments are
  read in one query each, and committed once, after the last cell (`_save_auto_grades_at_once`): the same rows get
  the same values, and a notebook whose grading fails is graded 0 anyway (converter.graded_as_zero).
- Every gradebook access lists the database's tables and checks each of nbgrader's tables exists (sqlalchemy's
  inspect and create_all: a PRAGMA per table), about eleven times per notebook. Here that is done once per engine:
  the tables are made or found the first time, and nothing in a grading run drops them.
- Every gradebook access then looks the course up (Gradebook.check_course: a query and a commit), about ten times
  a notebook, 1 CPU-s of a class of 40. Here once per engine and course: nothing in a grading run removes a course.
- OverwriteCells (the sanitize step that restores what a student may not change) looks up each cell's released
  version with a query of its own, and each grade cell's points with another: here its gradebook reads the
  notebook's source, grade and task cells once (`_ReleasedCellsAtOnce`), nbgrader's query answering any other name.
- Every gradebook access ends by closing the engine's connections (Gradebook.close disposes of its engine), so the
  next one connects anew. During nbgrader's pass (`connections_kept`, converter.py), the connection goes back to
  the shared engine's pool instead (0.5 CPU-s of a class of 40); they are all closed when the pass ends, and before
  this process forks (a connection must not cross a fork: sqlite.org/howtocorrupt.html).

Together: 4.9 -> 2.8 CPU-s for the coordinator's share of 40 submissions, 1.9 -> 1.2 CPU-s for staging them. The
stock `nbgrader` commands are left as nbgrader ships them; these changes live only in the process that calls
`enable()`, and the children it forks start without the shared engines.
"""
import contextlib
import json
import os
import sqlite3

import jsonschema
import nbgrader.api
import nbgrader.nbgraderformat.common
import nbgrader.preprocessors.overwritecells
from nbgrader.api import Comment, Grade, GradeCell, MissingEntry, SourceCell, TaskCell
from nbgrader.preprocessors import SaveAutoGrades
from sqlalchemy import event
from sqlalchemy.engine import Engine

from qkv_autograde.reports.hand_scores import by_cell_name

_enabled = False
_engines = {}      # (database URL, options) -> the one engine for it
_validators = {}   # the schema's JSON text -> its validator: the schema was checked when it was added
_last_schema = []  # [(schema, its validator)]: the dict last validated against, which is most often the next


def _write_ahead(dbapi_connection, _record):
    if isinstance(dbapi_connection, sqlite3.Connection):
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()


def _one_engine_per_database(url, **options):
    key = (str(url), tuple(sorted(options.items())))
    if key not in _engines:
        _engines[key] = _create_engine(url, **options)
    return _engines[key]


_create_engine = nbgrader.api.create_engine


_tables_ready = {}  # id(engine) -> (engine, its table names) once nbgrader's tables were made or found there


def _create_all_once(bind=None, **options):
    if bind is not None and _tables_ready.get(id(bind), (None,))[0] is bind:
        return None
    result = _create_all(bind=bind, **options)
    if bind is not None:
        _tables_ready[id(bind)] = (bind, tuple(_inspect(bind).get_table_names()))
    return result


class _TablesFound:
    """The one question nbgrader's Gradebook asks sqlalchemy.inspect about an engine whose tables are ready."""

    def __init__(self, names):
        self.names = names

    def get_table_names(self):
        return list(self.names)


def _inspect_ready(subject):
    ready = _tables_ready.get(id(subject))
    return _TablesFound(ready[1]) if ready is not None and ready[0] is subject else _inspect(subject)


_create_all = nbgrader.api.Base.metadata.create_all
_inspect = nbgrader.api.inspect
_check_course = nbgrader.api.Gradebook.check_course
_courses_found = {}  # engine -> the course ids found or made there


def _check_course_once(self, course_id="default_course", **kwargs):
    if not kwargs and course_id in _courses_found.get(self.engine, ()):
        return None  # Gradebook.__init__, its one caller, ignores the course it returns
    course = _check_course(self, course_id, **kwargs)
    _courses_found.setdefault(self.engine, set()).add(course_id)
    return course


class _SchemasCheckedOnce:
    """The part of the jsonschema module nbgrader's metadata validator uses, without re-checking the schema."""

    ValidationError = jsonschema.ValidationError

    @staticmethod
    def validate(instance, schema):
        if not _last_schema or _last_schema[0][0] is not schema:
            text = json.dumps(schema, sort_keys=True)
            if text not in _validators:
                kind = jsonschema.validators.validator_for(schema)
                kind.check_schema(schema)
                _validators[text] = kind(json.loads(text))
            _last_schema[:] = [(schema, _validators[text])]  # one dict held, not one per notebook
        error = jsonschema.exceptions.best_match(_last_schema[0][1].iter_errors(instance))
        if error is not None:
            raise error


class _OneSubmittedNotebook:
    """What SaveAutoGrades asks of its gradebook for one submitted notebook: its grades and comments by cell name,
    read in one query each; a name the notebook has twice (a grade and a task cell may share one) or not at all is
    looked up by nbgrader's own query, which prefers and raises as it always did. Its commits wait for `gradebook`'s
    one commit at the end."""

    def __init__(self, gradebook, notebook, lesson, student):
        self.gradebook, self.db = gradebook, self  # SaveAutoGrades commits through gradebook.db.commit()
        try:
            submitted = gradebook.find_submission_notebook(notebook, lesson, student)
        except MissingEntry:
            self.grades = self.comments = {}
            return
        self.grades = self._by_name(by_cell_name(gradebook.db, Grade, submitted.id))
        self.comments = self._by_name(by_cell_name(gradebook.db, Comment, submitted.id))

    @staticmethod
    def _by_name(rows):
        found, twice = {}, set()
        for name, row in rows:
            if name in found:
                twice.add(name)
            found[name] = row
        return {name: row for name, row in found.items() if name not in twice}

    def commit(self):
        pass

    def find_grade(self, name, *where):
        return self.grades[name] if name in self.grades else self.gradebook.find_grade(name, *where)

    def find_comment(self, name, *where):
        return self.comments[name] if name in self.comments else self.gradebook.find_comment(name, *where)


def _save_auto_grades_at_once(self, nb, resources):
    nbgrader_resources = resources["nbgrader"]
    self.notebook_id, self.assignment_id = nbgrader_resources["notebook"], nbgrader_resources["assignment"]
    self.student_id, self.db_url = nbgrader_resources["student"], nbgrader_resources["db_url"]
    with nbgrader.api.Gradebook(self.db_url) as gradebook:
        self.gradebook = _OneSubmittedNotebook(gradebook, self.notebook_id, self.assignment_id, self.student_id)
        nb, resources = super(SaveAutoGrades, self).preprocess(nb, resources)  # nbgrader's cell loop
        gradebook.db.commit()
    return nb, resources


_close = nbgrader.api.Gradebook.close
_keeping_connections = []  # [True] during nbgrader's pass


def _close_keeping_the_connection(self):
    if _keeping_connections and self.engine in _engines.values():
        self.db.remove()  # the session's connection goes back to the engine's pool
    else:
        _close(self)


def _close_connections():
    for engine in _engines.values():
        engine.dispose()


@contextlib.contextmanager
def connections_kept():
    """Within: a gradebook closed keeps its connection in its engine's pool, for the next one to use."""
    _keeping_connections[:] = [True]
    try:
        yield
    finally:
        _keeping_connections.clear()
        _close_connections()


class _ReleasedCellsAtOnce(nbgrader.api.Gradebook):
    """The gradebook OverwriteCells opens for one notebook: its find_source_cell and find_graded_cell answer from
    the notebook's cells, read in one query per kind the first time (a name is unique per kind and notebook; a graded
    cell is a grade cell before a task cell, as nbgrader's own lookup prefers); a name not there goes to nbgrader."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._released = {}

    def _cells(self, kind, notebook, assignment):
        key = (kind, notebook, assignment)
        if key not in self._released:
            found = self.find_notebook(notebook, assignment).id
            # queried by kind, so that each cell comes with its own table's columns (Notebook.grade_cells loads them
            # one cell at a time)
            kinds = (SourceCell,) if kind == "source" else (TaskCell, GradeCell)
            self._released[key] = {cell.name: cell for table in kinds
                                   for cell in self.db.query(table).filter(table.notebook_id == found)}
        return self._released[key]

    def find_source_cell(self, name, notebook, assignment):
        cell = self._cells("source", notebook, assignment).get(name)
        return cell if cell is not None else super().find_source_cell(name, notebook, assignment)

    def find_graded_cell(self, name, notebook, assignment):
        cell = self._cells("graded", notebook, assignment).get(name)
        return cell if cell is not None else super().find_graded_cell(name, notebook, assignment)


def _forget_engines():
    _engines.clear()
    _tables_ready.clear()
    _courses_found.clear()


def enable():
    """From now on, in this process: write-ahead log, one engine per gradebook (its tables and course looked for
    once, its connection kept within `connections_kept`), each schema checked once, each notebook's automatic grades
    saved at once."""
    global _enabled
    if _enabled:
        return
    event.listen(Engine, "connect", _write_ahead)
    nbgrader.api.create_engine = _one_engine_per_database
    nbgrader.nbgraderformat.common.jsonschema = _SchemasCheckedOnce
    nbgrader.api.Base.metadata.create_all = _create_all_once
    nbgrader.api.inspect = _inspect_ready
    nbgrader.api.Gradebook.check_course = _check_course_once
    nbgrader.api.Gradebook.close = _close_keeping_the_connection
    os.register_at_fork(before=_close_connections)
    SaveAutoGrades.preprocess = _save_auto_grades_at_once
    nbgrader.preprocessors.overwritecells.Gradebook = _ReleasedCellsAtOnce
    os.register_at_fork(after_in_child=_forget_engines)  # a pool's connections must not cross a fork
    _enabled = True
