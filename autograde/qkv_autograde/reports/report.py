"""The anomaly report: one row per submission, its score and everything unusual the grader saw, by name.

Written after every autograde run next to the gradebook (`anomalies-<lesson>.csv` and `.html`). It reads what the
run left behind: the autograded notebooks' `qkv` metadata, the gradebook's scores and the staging notes (refused
folders, missing notebooks), so it is the same whether the run was one process or many.

It is cumulative: the notes of every collection round stay on it, each with its round (number, date, export),
read from the lesson's history (history.py), and a `collected` column says what each round did with the
submission; the score is the latest grade. Each time it is written it appends to that history a `graded` record
for every notebook graded since (score, anomaly names, the notebook's sha256).
"""
import html
import os
import sys

import nbformat
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.coursedir import CourseDirectory

from qkv_autograde.reports import hand_scores, similarity, variant_rows
from qkv_autograde.intake import history, late, submissions
from qkv_autograde.reports.exports import final_score, write_csv
from qkv_autograde.reports.exports import lms_records
from qkv_autograde.intake.lms_names import shown


def _key(note):
    return note["name"], note["detail"]


def rows(course_root, db_url, lesson, staged, autograded="autograded", extra=None):
    """[{student, name, notebook, score, max_score, anomalies, collected, graded, hand_grading}] for every student
    the run saw or the history names. An anomaly from an earlier collection carries "rounds": the rounds that noted
    it. `graded`: the autograded notebook's time and the names of its grading's anomalies, or None. `name`: the name
    kept for display (display_names). `hand_grading`: the cells that wait for hand grading in formgrader."""
    extra = extra or {}
    past = history.read(course_root, lesson)
    names = display_names(course_root, lesson)
    earlier = history.notes_by_student(past)
    copying = variant_rows.merge(_copying(course_root, lesson, autograded), course_root, lesson, autograded)
    found = {}
    for entry in staged:
        found.setdefault((entry.student, entry.notebook), list(entry.anomalies))
    for student in list(extra) + list(earlier):  # notes about a student nothing was staged for (or the export: "")
        if not any(key[0] == student for key in found):
            found[(student, "")] = []
    with Gradebook(db_url) as gb:
        for (student, notebook), notes in sorted(found.items()):
            path = os.path.join(course_root, autograded, student, lesson, f"{notebook}.ipynb")
            graded = None
            if os.path.exists(path):
                meta = nbformat.read(path, as_version=4).metadata.get("qkv", {})
                for anomaly in meta.get("anomalies", []):
                    if anomaly not in notes:
                        notes.append(anomaly)
                if not meta.get("graded"):
                    notes.append({"name": "not graded", "detail": "the autograded notebook has no completion stamp"})
                else:
                    graded = {"time": f"{os.stat(path).st_mtime_ns}",
                              "anomalies": [a.get("name") for a in meta.get("anomalies", []) if isinstance(a, dict)]}
                notes += copying.get(student, [])
            elif notebook and not any(a["name"] in submissions.NOT_STAGED for a in notes):
                notes.append({"name": "not graded", "detail": "grading stopped with an error: see nbgrader's log"})
            # every round's notes (this run's intake notes among them, in the history already), then the rest
            seen = {_key(a) for a in notes}
            for entry in earlier.get(student, []) + extra.get(student, []):
                if _key(entry) not in seen:
                    seen.add(_key(entry))
                    notes.append(entry)
            score, max_score, hand_grading = "", "", []
            if notebook:
                try:
                    submission = gb.find_submission_notebook(notebook, lesson, student)
                    score, max_score = final_score(submission), submission.max_score  # as grades.csv has it
                    notes = _lateness_as_graded(notes, submission.assignment,
                                                os.path.join(course_root, "submitted", student, lesson))
                    notes += hand_scores.report_notes(course_root, gb, past, lesson, student, notebook)
                    hand_grading = sorted(g.name for g in submission.grades if g.needs_manual_grade)
                except MissingEntry:
                    pass
            yield {"student": student, "name": names.get(student) or _gradebook_name(gb, student),
                   "notebook": notebook, "score": score, "max_score": max_score,
                   "anomalies": notes, "collected": history.collections_of(past, student, notebook),
                   "graded": graded, "hand_grading": hand_grading}


def display_names(course_root, lesson, submitted="submitted"):
    """{student: the name the LMS showed} from intake's `.lms.json` records (student data: shown, never trusted)."""
    records = lms_records(CourseDirectory(root=course_root, submitted_directory=submitted))
    return {student: shown(record["name"]) for (student, where), record in records.items()
            if where == lesson and isinstance(record.get("name"), str)}


def _gradebook_name(gb, student):
    """nbgrader's first and last name of a student no LMS named (`nbgrader db student add`), or ""."""
    try:
        known = gb.find_student(student)
    except MissingEntry:
        return ""
    return shown(" ".join(part for part in (known.first_name, known.last_name) if part))


def _lateness_as_graded(notes, submission, submitted_folder):
    """The notes with the gradebook's verdict on lateness (late.py: the extension, the time, the LMS's mark) in
    place of what collection said, so that the report agrees with the penalty in grades.csv and the feedback."""
    kept = [a for a in notes if a.get("name") not in ("late", "extension")]
    verdict = late.report_note(submission, submitted_folder)
    return kept + [verdict] if verdict else kept


def _copying(course_root, lesson, autograded):
    """{student: [copying anomaly]} (similarity.py): it flags only, so a failure of its own never stops the report."""
    try:
        return similarity.class_report(course_root, lesson, autograded)[0]
    except Exception as error:
        print(f"qkv grader: copy detection failed ({type(error).__name__}: {error}); the report has no copying rows",
              file=sys.stderr)
        return {}


def _evidence(note):
    """The matching lines of a copying anomaly, side by side."""
    def side(lines):
        return html.escape("\n".join(f"{n:4d}  {text}" for n, text in lines))

    return "".join(f"<table class=pair><tr><th>{html.escape(e['left_title'])}</th><th>{html.escape(e['right_title'])}"
                   f"</th></tr><tr><td><pre>{side(e['left'])}</pre></td><td><pre>{side(e['right'])}</pre></td></tr>"
                   f"</table>" for e in note.get("evidence", [])[:similarity.MAX_LINES_SHOWN])


def record_gradings(course_root, lesson, table, submitted="submitted"):
    """A `graded` history record for every row whose autograded notebook is new since the last one recorded."""
    past = history.read(course_root, lesson)
    found = []
    for row in table:
        graded = row.get("graded")
        if not graded or history.already_graded(past, row["student"], row["notebook"], graded["time"]):
            continue
        path = os.path.join(course_root, submitted, row["student"], lesson, f"{row['notebook']}.ipynb")
        found.append(history.graded_record(row["student"], row["notebook"],
                                           history.sha256_of(path) if os.path.isfile(path) else None,
                                           row["score"], row["max_score"], graded["anomalies"], graded["time"]))
    history.append(course_root, lesson, found)


def _round_of(note):
    return f" [{'; '.join(note['rounds'])}]" if note.get("rounds") else ""


def who(student, name):
    """A student as a report names them: the name kept for display and the id, which alone is unique."""
    return f"{name} ({student})" if name else student


def waiting_for_hand_grading(table):
    """The sentence saying what is left to grade by hand in formgrader, and whose: rows with `student`, `name`
    and `hand_grading` (the cells)."""
    waiting = [row for row in table if row["hand_grading"]]
    count = sum(len(row["hand_grading"]) for row in waiting)
    if not count:
        return "No written answer waits for hand grading."
    return (f"{count} written answer{'s' if count != 1 else ''} wait{'' if count != 1 else 's'} for hand grading "
            f"(formgrader): " + ", ".join(who(row["student"], row["name"]) for row in waiting) + ".")


def write(course_root, db_url, lesson, staged, extra=None):
    table = list(rows(course_root, db_url, lesson, staged, extra=extra))
    record_gradings(course_root, lesson, table)
    base = os.path.join(course_root, f"anomalies-{lesson}")
    write_csv(base + ".csv", ["student", "name", "notebook", "score", "max_score", "anomalies", "details", "collected",
                              "hand_grading"],
              [[row["student"], row["name"], row["notebook"], row["score"], row["max_score"],
                "; ".join(a["name"] for a in row["anomalies"]),
                " | ".join(f"{a['name']}: {a['detail']}{_round_of(a)}" for a in row["anomalies"]),
                " | ".join(row["collected"]), "; ".join(row["hand_grading"])] for row in table])
    flagged = sum(bool(r["anomalies"]) for r in table)
    body = "".join(
        f"<tr{' class=flag' if r['anomalies'] else ''}><td>{html.escape(r['student'] or '(the export)')}</td>"
        f"<td>{html.escape(r['name'])}</td>"
        f"<td>{html.escape(r['notebook'])}</td><td>{r['score']}</td><td>{r['max_score']}</td><td><ul>"
        + "".join(f"<li><b>{html.escape(a['name'])}</b>: {html.escape(a['detail'])}"
                  f"<small>{html.escape(_round_of(a))}</small>{_evidence(a)}</li>" for a in r["anomalies"])
        + "</ul></td><td><ul>" + "".join(f"<li>{html.escape(c)}</li>" for c in r["collected"])
        + f"</ul></td><td>{html.escape(', '.join(r['hand_grading']))}</td></tr>" for r in table)
    with open(base + ".html", "w") as f:
        f.write(f"""<!doctype html><html lang=en><meta charset=utf-8>
<title>qkv grading anomalies: {html.escape(lesson)}</title>
<style>body{{font-family:sans-serif}} td{{vertical-align:top;padding:4px 8px}} tr.flag{{background:#fff3cd}}
table.pair td{{border:1px solid #ccc}} table.pair pre{{margin:0;font-size:85%}}</style>
<main><h1>{html.escape(lesson)}: {len(table)} submissions, {flagged} with anomalies</h1>
<p>Read every highlighted row before releasing grades: a timeout, a dead kernel, a refused folder or an edited
locked cell means the score may not be what the student earned.</p>
<p>Notes from an earlier collection say which: [round, when, export]. The score is the latest grade.</p>
<p>{html.escape(waiting_for_hand_grading(table))}</p>
<table><tr><th scope=col>student</th><th scope=col>name</th><th scope=col>notebook</th><th scope=col>score</th>
<th scope=col>max</th><th scope=col>anomalies</th><th scope=col>collected</th><th scope=col>waits for hand grading</th>
</tr>{body}
</table></main>""")
    return table
