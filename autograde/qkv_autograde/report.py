"""The anomaly report: one row per submission, its score and everything unusual the grader saw, by name.

Written after every autograde run next to the gradebook (`anomalies-<lesson>.csv` and `.html`). It reads what the
run left behind: the autograded notebooks' `qkv` metadata, the gradebook's scores and the staging notes (refused
folders, missing notebooks), so it is the same whether the run was one process or many.
"""
import html
import os

import nbformat
from nbgrader.api import Gradebook, MissingEntry

from .exports import write_csv


def rows(course_root, db_url, lesson, staged, autograded="autograded", extra=None):
    """[{student, notebook, score, max_score, anomalies}] for every student the run saw."""
    extra = extra or {}
    found = {}
    for entry in staged:
        found.setdefault((entry.student, entry.notebook), list(entry.anomalies))
    for student in extra:  # notes about a student nothing was staged for (or about the export as a whole: "")
        if not any(key[0] == student for key in found):
            found[(student, "")] = []
    with Gradebook(db_url) as gb:
        for (student, notebook), notes in sorted(found.items()):
            path = os.path.join(course_root, autograded, student, lesson, f"{notebook}.ipynb")
            if os.path.exists(path):
                meta = nbformat.read(path, as_version=4).metadata.get("qkv", {})
                for anomaly in meta.get("anomalies", []):
                    if anomaly not in notes:
                        notes.append(anomaly)
                if not meta.get("graded"):
                    notes.append({"name": "not graded", "detail": "the autograded notebook has no completion stamp"})
            elif notebook and not any(a["name"] == "missing notebook" for a in notes):
                notes.append({"name": "not graded", "detail": "grading stopped with an error: see nbgrader's log"})
            notes += [e for e in extra.get(student, []) if e not in notes]
            score, max_score = "", ""
            if notebook:
                try:
                    submission = gb.find_submission_notebook(notebook, lesson, student)
                    score, max_score = submission.score, submission.max_score
                except MissingEntry:
                    pass
            yield {"student": student, "notebook": notebook, "score": score, "max_score": max_score,
                   "anomalies": notes}


def write(course_root, db_url, lesson, staged, extra=None):
    table = list(rows(course_root, db_url, lesson, staged, extra=extra))
    base = os.path.join(course_root, f"anomalies-{lesson}")
    write_csv(base + ".csv", ["student", "notebook", "score", "max_score", "anomalies", "details"],
              [[row["student"], row["notebook"], row["score"], row["max_score"],
                "; ".join(a["name"] for a in row["anomalies"]),
                " | ".join(f"{a['name']}: {a['detail']}" for a in row["anomalies"])] for row in table])
    flagged = sum(bool(r["anomalies"]) for r in table)
    body = "".join(
        f"<tr{' class=flag' if r['anomalies'] else ''}><td>{html.escape(r['student'] or '(the export)')}</td>"
        f"<td>{html.escape(r['notebook'])}</td><td>{r['score']}</td><td>{r['max_score']}</td><td><ul>"
        + "".join(f"<li><b>{html.escape(a['name'])}</b>: {html.escape(a['detail'])}</li>" for a in r["anomalies"])
        + "</ul></td></tr>" for r in table)
    with open(base + ".html", "w") as f:
        f.write(f"""<!doctype html><meta charset=utf-8><title>qkv grading anomalies: {html.escape(lesson)}</title>
<style>body{{font-family:sans-serif}} td{{vertical-align:top;padding:4px 8px}} tr.flag{{background:#fff3cd}}</style>
<h1>{html.escape(lesson)}: {len(table)} submissions, {flagged} with anomalies</h1>
<p>Read every highlighted row before releasing grades: a timeout, a dead kernel, a refused folder or an edited
locked cell means the score may not be what the student earned.</p>
<table><tr><th>student</th><th>notebook</th><th>score</th><th>max</th><th>anomalies</th></tr>{body}</table>""")
    return table
