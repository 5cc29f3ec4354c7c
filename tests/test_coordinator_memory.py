"""make grade's coordinator keeps flat memory as the class grows (issue 45): what it used to keep per student or per
pair of students, it does not. Measured by bench/bench_grading_limit.py 01-lookup N --only-grade on 2 cores: peak RSS
175 MB at 40 and at 200 students, 198 MB at 1,000 (before: 339-346 MB at 1,000); here, the mechanisms, each on its
own and in a few seconds."""
import copy
import tracemalloc

import numpy as np

from qkv_autograde.reports import similarity


def test_the_autograde_converter_keeps_nothing_of_the_notebooks_it_has_written(monkeypatch):
    """nbconvert's exporter remembers the metadata of every notebook it converts; one exporter converts the class."""
    import nbformat
    from nbconvert.exporters import NotebookExporter
    from nbgrader.converters import Autograde
    from nbgrader.coursedir import CourseDirectory

    from qkv_autograde.grading.converter import QkvAutograde

    def convert(self, notebook_filename):  # what nbgrader's own step does with the exporter, without a gradebook
        nb = nbformat.v4.new_notebook(metadata={"qkv": {"anomalies": [], "graded": True}})
        self.exporter.from_notebook_node(nb, resources={"metadata": {"name": notebook_filename, "path": "."}})

    monkeypatch.setattr(Autograde, "convert_single_notebook", convert)
    converter = QkvAutograde(coursedir=CourseDirectory())
    converter.exporter = NotebookExporter(parent=converter)
    for student in range(5):
        converter.convert_single_notebook(f"student{student}.ipynb")
    assert converter.exporter._nb_metadata == {}


def test_equal_schemas_read_once_per_notebook_share_one_validator():
    """nbgrader's metadata validator reads its schema file anew for every notebook: one validator for them all."""
    import json
    import os

    import nbgrader.nbgraderformat

    from qkv_autograde.grading import bulk_grading

    with open(os.path.join(os.path.dirname(nbgrader.nbgraderformat.__file__), "v3.json")) as f:
        text = f.read()
    metadata = {"grade": False, "locked": True, "solution": False, "grade_id": "c1", "schema_version": 3}
    bulk_grading._SchemasCheckedOnce.validate(metadata, json.loads(text))
    before = len(bulk_grading._validators)
    for _ in range(20):  # the schema of twenty notebooks' validators
        bulk_grading._SchemasCheckedOnce.validate(metadata, json.loads(text))
    assert len(bulk_grading._validators) == before


def _classroom(students, seed=0):
    """Answers of `students` students: most share code with a small group of classmates (ten students wrote each
    of their lines, so every pair in a group shares rare fingerprints), and one pair copied each other."""
    rng = np.random.default_rng(seed)
    answers = []
    for k in range(students):
        group = rng.integers(0, 4000, 30, dtype=np.uint64) + np.uint64(1000 * (k // 10))
        own = rng.integers(1 << 40, 1 << 62, 20, dtype=np.uint64)
        prints = {int(h): [(1, 1)] for h in np.concatenate([group, own])}
        answers.append(similarity.Answer(f"s{k:05d}", "f", "", prints))
    answers.append(similarity.Answer("copier", "f", "", copy.deepcopy(answers[7].prints)))
    return answers


def test_comparing_a_class_keeps_no_list_or_record_per_pair_of_students():
    """3,000 students: 4.5 million pairs, of which a few thousand share anything. A list of every pair's similarity
    alone is 36 MB (the comparison took 125 MB); the class's norm and the pairs named come from counts (15 MB, most
    of it the class's fingerprints as arrays)."""
    answers = _classroom(3000)
    tracemalloc.start()
    try:
        pairs, similarities, limit = similarity.compare_class(answers)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(similarities) == 3001 * 3000 // 2 and limit == 301
    assert set(similarity.flagged_pairs(pairs, similarities)) == {("copier", "s00007")}
    assert peak < 30e6, f"comparing 3,000 students took {peak / 1e6:.0f} MB"


def test_the_class_norm_from_counts_is_the_norm_of_the_list():
    values = [0.0] * 40 + [0.05, 0.1, 0.1, 0.5, 1.0] * 3
    counted = similarity.PairSimilarities.of(values)
    assert len(counted) == len(values) and list(counted) == sorted(values)
    assert similarity.far_out_fence(counted) == similarity.far_out_fence(values)
    assert similarity.far_out_fence(similarity.PairSimilarities.of(values[40:])) > 0
