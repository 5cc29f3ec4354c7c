"""What happened to every submission, round after round: `history-<lesson>.jsonl` next to the gradebook.

An append-only file of JSON lines (class data, like the gradebook: never committed). Each collection is a round,
numbered from 1, and appends per submission a `collected` record, per student with notes a `noted` record:

    {"event": "collected", "round": 3, "at": "2026-12-02 01:55:00 UTC", "export": "canvas.zip",
     "export_sha256": "...", "student": "20999", "notebook": "01-lookup", "lms_time": null, "lms_order": 555002,
     "sha256": "<the notebook's>", "outcome": "older refused"}
    {"event": "noted", "round": 3, ..., "student": "20999", "notes": [{"name", "detail"}]}

Outcomes: `new`, `same` (the very notebook already in submitted/), `replaced older`, `older refused`, `undated
refused` (neither copy has a time from the LMS, so the one collected before is kept), `replaced (allowed)` (told
to, with --allow-older). Every grading appends `{"event": "graded", "at", "student", "notebook", "sha256",
"score", "max_score", "anomalies": [names], "autograded": <the graded file's time>}`, once per graded file.

Hand scores follow their answer (hand_scores.py): every grading of a notebook appends `{"event": "answers", "at",
"student", "notebook", "answers": {cell: sha256 of the answer}}` for its cells graded by hand, and a hand score seen
for the first time (or changed, or saved again in formgrader) appends `{"event": "hand score", "at", "student",
"notebook", "cell", "score", "sha256": <the answer it was given for, null when not known>}`.

The LMS's time of a copy is `lms_time` (Blackboard's time in the name, Gradescope's `:created_at:`); Canvas gives
no time but numbers every upload in order (`lms_order`, the attachment id). Moodle and plain folders give neither.
"""
import datetime
import hashlib
import json
import os

ACCEPTED = ("new", "same", "replaced older", "replaced (allowed)")  # outcomes after which the copy is in submitted/


def path(course_root, lesson):
    return os.path.join(course_root, f"history-{lesson}.jsonl")


def sha256_of(file_path):
    digest = hashlib.sha256()
    with open(file_path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_of_export(source):
    """A zip's own sha256; a folder's: of every file's relative path and sha256, in order."""
    if os.path.isfile(source):
        return sha256_of(source)
    digest = hashlib.sha256()
    for root, folders, files in os.walk(source):
        folders.sort()
        for name in sorted(files):
            file_path = os.path.join(root, name)
            if os.path.isfile(file_path) and not os.path.islink(file_path):
                digest.update(f"{os.path.relpath(file_path, source)}\0{sha256_of(file_path)}\n".encode())
    return digest.hexdigest()


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def read(course_root, lesson):
    """Every record, oldest first; a line that is not a JSON object (a write cut short) is skipped."""
    records = []
    try:
        with open(path(course_root, lesson), encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    records.append(record)
    except FileNotFoundError:
        pass
    return records


def append(course_root, lesson, records):
    if not records:
        return
    with open(path(course_root, lesson), "a", encoding="utf-8") as f:
        f.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def new_round(records, source):
    """The fields every record of the next collection carries: its number, when, and which export."""
    number = 1 + max((r.get("round", 0) for r in records if isinstance(r.get("round"), int)), default=0)
    return {"round": number, "at": now(), "export": os.path.basename(os.path.normpath(source)),
            "export_sha256": sha256_of_export(source) if os.path.exists(source) else ""}


def label(record):
    return f"round {record.get('round')}, {record.get('at')}, {record.get('export')}"


def kept_copy(records, student, notebook, sha256):
    """The latest `collected` record that put this very notebook (by sha256) into submitted/, or None."""
    for record in reversed(records):
        if (record.get("event") == "collected" and record.get("student") == student
                and record.get("notebook") == notebook and record.get("sha256") == sha256
                and record.get("outcome") in ACCEPTED):
            return record
    return None


def newer(incoming, existing):
    """True / False when the LMS says whether `incoming` was handed in after `existing` ({"lms_time",
    "lms_order"} each); None when it cannot say (no time on one side, or the same time for different files)."""
    for key in ("lms_time", "lms_order"):
        a, b = incoming.get(key), (existing or {}).get(key)
        if a is not None and b is not None and type(a) is type(b) and a != b:
            return a > b
    return None


def notes_by_student(records):
    """{student: [{"name", "detail", "rounds": [label, ...]}]}: every round's notes, each note once with the rounds
    that made it, in the order first seen."""
    found = {}
    for record in records:
        if record.get("event") != "noted" or not isinstance(record.get("notes"), list):
            continue
        mine = found.setdefault(str(record.get("student", "")), {})
        for entry in record["notes"]:
            if isinstance(entry, dict) and {"name", "detail"} <= set(entry):
                key = (str(entry["name"]), str(entry["detail"]))
                mine.setdefault(key, []).append(label(record))
    return {student: [{"name": n, "detail": d, "rounds": rounds} for (n, d), rounds in notes.items()]
            for student, notes in found.items()}


def collections_of(records, student, notebook):
    """["round 1, ..., canvas.zip: new", ...] for one submission."""
    return [f"{label(r)}: {r.get('outcome')}" for r in records
            if r.get("event") == "collected" and r.get("student") == student and r.get("notebook") == notebook]


def graded_record(student, notebook, sha256, score, max_score, anomalies, autograded_time):
    return {"event": "graded", "at": now(), "student": student, "notebook": notebook, "sha256": sha256,
            "score": score, "max_score": max_score, "anomalies": anomalies, "autograded": autograded_time}


def already_graded(records, student, notebook, autograded_time):
    return any(r.get("event") == "graded" and r.get("student") == student and r.get("notebook") == notebook
               and r.get("autograded") == autograded_time for r in records)


def answers_record(student, notebook, answers):
    return {"event": "answers", "at": now(), "student": student, "notebook": notebook, "answers": answers}


def hand_score_record(student, notebook, cell, score, sha256):
    return {"event": "hand score", "at": now(), "student": student, "notebook": notebook, "cell": cell,
            "score": score, "sha256": sha256}


def latest_answers(records, student, notebook):
    """{cell: sha256} of the latest grading of this notebook (what formgrader shows), or None before any."""
    for record in reversed(records):
        if (record.get("event") == "answers" and record.get("student") == student
                and record.get("notebook") == notebook and isinstance(record.get("answers"), dict)):
            return record["answers"]
    return None


def hand_scores_given(records, student, notebook):
    """{cell: the latest `hand score` record of that cell}."""
    return {r.get("cell"): r for r in records if r.get("event") == "hand score" and r.get("student") == student
            and r.get("notebook") == notebook}
