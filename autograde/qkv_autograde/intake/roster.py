"""Who each submission really is, for the self-check variants (issue 43): the LMS id -> the key the course asks
students to type (their login or email), read from the LMS's own export.

- Canvas: the gradebook export (`Student, ID, SIS User ID, SIS Login ID, Section, ...`): ID -> SIS Login ID.
- Moodle: the grading worksheet (`Identifier` "Participant N", `Full name`, `Email address`): N -> email. Moodle's
  participant id is per assignment, so its rows belong to the lesson they were given with.
- Blackboard, Gradescope and nbgrader's exchange name students by a login already: the id is the key.

`make grade LESSON=... ROSTER=<export>` stores the rows in autograde/roster.csv (class data, git-ignored); every
submission's task carries only its own student's key. Everything read here is class data from the LMS: bounded,
never resolved into a name or a call.
"""
import csv
import os
import re
import sys

from qkv.your_numbers import normalise_key

ROSTER_FILE = "roster.csv"
COLUMNS = ["lms", "lesson", "id", "key", "name"]
LIMIT = 200  # characters of one field


def _field(row, name):
    return " ".join(str(row.get(name) or "").split())[:LIMIT]


def read_export(path, lesson):
    """[{lms, lesson, id, key, name}] of a Canvas gradebook export or a Moodle grading worksheet."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        table = list(csv.DictReader(f))
    header = set(table[0]) if table else set()
    rows = []
    if {"ID", "SIS Login ID"} <= header:
        for row in table:
            if re.fullmatch(r"\d{1,20}", _field(row, "ID")) and _field(row, "SIS Login ID"):
                rows.append({"lms": "canvas", "lesson": "", "id": _field(row, "ID"),
                             "key": normalise_key(_field(row, "SIS Login ID")), "name": _field(row, "Student")})
    elif {"Identifier", "Email address"} <= header:
        for row in table:
            number = re.fullmatch(r"Participant (\d{1,20})", _field(row, "Identifier"))
            if number and _field(row, "Email address"):
                rows.append({"lms": "moodle", "lesson": lesson, "id": number.group(1),
                             "key": normalise_key(_field(row, "Email address")), "name": _field(row, "Full name")})
    else:
        raise ValueError(f"{os.path.basename(path)} is neither Canvas's gradebook export (columns ID and SIS Login "
                         f"ID) nor Moodle's grading worksheet (columns Identifier and Email address).")
    if not rows:
        raise ValueError(f"{os.path.basename(path)} names no student with a login or email.")
    return rows


def load(course_root):
    """{(lms, lesson, id): (key, name)} from autograde/roster.csv (empty when there is none)."""
    path = os.path.join(course_root, ROSTER_FILE)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8", newline="") as f:
        return {(r["lms"], r["lesson"], r["id"]): (r["key"], r["name"]) for r in csv.DictReader(f)}


def store(course_root, export_path, lesson):
    """Merge an export's rows into autograde/roster.csv (a newer export's row replaces an older one); their count."""
    rows = read_export(export_path, lesson)
    merged = {key: {"lms": key[0], "lesson": key[1], "id": key[2], "key": value[0], "name": value[1]}
              for key, value in load(course_root).items()}
    merged.update({(r["lms"], r["lesson"], r["id"]): r for r in rows})
    path = os.path.join(course_root, ROSTER_FILE)
    with open(path + ".part", "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        writer.writerows(merged[k] for k in sorted(merged))
    os.chmod(path + ".part", 0o600)  # class data: the instructor's alone
    os.replace(path + ".part", path)
    return len(rows)


def key_of(roster, record, student, lesson):
    """(true key, name) of `student` (nbgrader's id) in `lesson`, whose intake record (.lms.json) is `record`;
    None for a Canvas or Moodle student the roster does not name."""
    lms = (record or {}).get("lms")
    if lms == "canvas":
        return roster.get(("canvas", "", student))
    if lms == "moodle":
        return roster.get(("moodle", lesson, student))
    return normalise_key(student), _field(record or {}, "name")


def key_of_id(roster, student, lesson):
    """(true key, name) of the roster's row for the LMS id `student` when no intake record says which LMS it came
    from (a submission graded again from .staged/ after its submitted/ folder went): its Canvas row or its Moodle
    row of `lesson`; None when no row, or both, name it."""
    rows = [row for row in (roster.get(("canvas", "", student)), roster.get(("moodle", lesson, student))) if row]
    return rows[0] if len(rows) == 1 else None


def main(argv=None):
    lesson, export = (argv or sys.argv[1:])[:2]
    try:
        count = store(os.getcwd(), export, lesson)
    except (OSError, ValueError, csv.Error) as error:
        sys.exit(f"qkv grader: the roster {export} could not be read: {error}")
    print(f"roster: {count} students from {os.path.basename(export)} in {ROSTER_FILE}")


if __name__ == "__main__":
    main()
