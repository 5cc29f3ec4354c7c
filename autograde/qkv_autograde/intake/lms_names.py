"""How an LMS names a student's entry in its export, and what a report may print of it: shared by the plugins
(extractor.py, collector.py), the app that drives them (lms_export.py), staging (submissions.py) and the export.

A student id is 1 to 64 characters from `STUDENT_ID_CHARACTERS`: letters, digits and `. _ - @ +`, starting with a
letter or digit (what every LMS id above is; an email address fits). Anything else (a space, a comma, a newline,
a leading `=`, a folder named `.hidden`) is refused with a `refused student id` note and never rewritten into
some other id.
"""
import datetime
import re

# One name at the top of an export (a file, or a folder: Moodle's, or a student's zip unpacked) -> whose it is
CANVAS = (r"(?P<name>[^/_]+)_(?P<late>[Ll][Aa][Tt][Ee]_)?(?P<student_id>\d+)_(?P<submission_id>\d+)_"
          r"(?P<upload>[^/]+)")
MOODLE = r"(?P<name>[^/_]+?)_(?P<student_id>\d+)_assignsubmission_(?P<plugin>[a-z]+)_(?P<upload>[^/]*)"
BLACKBOARD = (r"(?P<assignment>[^/]*?)_(?P<student_id>[^/_]+)_attempt_"
              r"(?P<timestamp>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)(?:_(?P<upload>[^/]+)|(?P<receipt>\.txt))")
LMS_NAMES = {"canvas": CANVAS, "moodle": MOODLE, "blackboard": BLACKBOARD}
STUDENT_ID_CHARACTERS = r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}"
STUDENT_ID = re.compile(STUDENT_ID_CHARACTERS + r"\Z")
# next to the collected notebook: {"lms", "user_id", "name", "late", "timestamp", "attachment_id" (Canvas's)}
LMS_RECORD = ".lms.json"
MAX_NAME = 100               # a display name, as the LMS shows it


def note(student, name, detail):
    return {"student": student or "", "name": name, "detail": detail}


def lms_entry(name):
    """(lms, fields) when `name` (one file or folder name) is how an LMS names a student's entry, else (None, None).
    An uploaded zip keeps its LMS name (without `.zip`) as the folder it is unpacked into."""
    for lms, pattern in LMS_NAMES.items():
        match = re.fullmatch(pattern, name)
        if match:
            return lms, match.groupdict()
    return None, None


def valid_student_id(student):
    return isinstance(student, str) and STUDENT_ID.match(student) is not None


def shown(text, limit=200):
    """A student-chosen name as a report may print it: control characters escaped, bounded."""
    text = text if text.isprintable() else ascii(text)[1:-1]
    return text if len(text) <= limit else text[:limit] + "..."


def display_name(text):
    return " ".join(str(text).split())[:MAX_NAME] if text else ""


def named_time(text):
    if not text:
        return None
    digits = re.findall(r"\d+", text)
    try:
        return datetime.datetime(*map(int, digits[:6]))
    except (TypeError, ValueError):
        return None
