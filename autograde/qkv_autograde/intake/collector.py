"""nbgrader's FileNameCollectorPlugin for LMS exports, `zip_collect`'s second step: whose notebook each unpacked
file is (lms_export.py drives it).

Whose a file is comes from the LMS only, never from the student: the student id (and the submission's time)
is read from the name of an entry at the TOP of the export (the zip as downloaded, or a zip of such exports,
e.g. nbgrader's archive/ folder holding several), and everything below that entry (the folder Moodle makes, a
zip the student uploaded, unpacked into a folder named after it) belongs to that student whatever its names say:
a file named `victim_9_99999999_01-lookup.ipynb` inside Mallory's upload is Mallory's (noted as named like
another student's). The student id is the LMS's own user id, so that two "smithjohn" are two students and grades
go back to the right row; the name the LMS shows is kept for display (the report, nbgrader's Student first/last
name, the LMS grade files). The top-level names, in the order tried (real shapes of the downloads):

    Canvas      <sortablename>_[LATE_|late_]<user id>_<attachment id>_<file name>     (Submissions > Download)
                e.g. smithjohn_LATE_20999_555002_01-lookup.ipynb -> submitted/20999/01-lookup/01-lookup.ipynb,
                marked late by Canvas; an uploaded zip smithjohn_10000_555003_work.zip is unpacked into its folder
    Moodle      <Full Name>_<participant id>_assignsubmission_file_/<file name>   ("download submissions in
                folders"), or <Full Name>_<participant id>_assignsubmission_file_<file name> (without folders);
                the participant id (what Moodle's grading worksheet calls "Participant 123456") is the id
    Blackboard  <assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<file name>  (Grade Centre > Assignment
                File Download); the username is the id, the time in the name is the submission's time; the
                receipt <assignment>_<username>_attempt_<time>.txt is read for the student's name and skipped
    Gradescope  <export>/submission_<id>/.../<notebook>.ipynb, the student named in the export's
                submission_metadata.yml (`:sid:`, else `:email:`, else `:name:`; each member of a group gets a copy)
    Folder      .../<student>/<lesson>/<sub>/.../<notebook>.ipynb   (noted as a nested folder), else
                .../<student>/<notebook>.ipynb  or  .../<student>/<lesson>/<notebook>.ipynb
                (nbgrader's submitted/ shape, zipped whole or not, for trees the instructor made: the student is
                the folder that holds the notebook or its <lesson>/ folder, so whoever writes into such a tree can
                name any student; an LMS-shaped name inside it is refused, give the LMS's download as it is)

A notebook saved under another name (`01-lookup-1.ipynb`, Canvas's mark of a resubmission, `-Copy1`, ` (1)`) is
collected under the released name, noted as an unexpected file name unless the name is Canvas's own (a Canvas
entry `..._01-lookup-<n>.ipynb`: Canvas names the n-th upload again under one name so). Several notebooks of one
student for one released notebook: the newest wins, by the timestamp in the name when every copy has one, else by
the zip entry's date (then Canvas's higher resubmission number, then the later name), and the others are listed.
Hidden files, `__MACOSX/` and `.ipynb_checkpoints/` are ignored; other non-notebook files are skipped. Everything
unusual becomes a report entry {"student", "name", "detail"}; bad input never raises.

The copy kept for a student is weighed before nbgrader copies it into submitted/: one over the course's
`NotebookLimits` (submissions.py: bytes and JSON items) is refused, `oversized notebook` with its size and the limit,
and whatever an earlier collection put in submitted/ stays there.
"""
import datetime
import os
import re

from nbgrader.plugins import FileNameCollectorPlugin
from traitlets import List, Unicode

from qkv_autograde.intake.extractor import is_ignored
from qkv_autograde.intake.lms_names import display_name, lms_entry, named_time, note, shown, valid_student_id
from qkv_autograde.intake.submissions import NotebookLimits

# nbgrader's submitted/ shape, on the whole relative path, for a path with no LMS name at its top
NESTED_FOLDER = r"(?:.*/)?(?!{lesson}/)(?P<student_id>[^/]+)/{lesson}/(?P<nested>.+)/(?P<file_id>[^/]+)$"
FOLDER = r"(?:.*/)?(?!{lesson}/)(?P<student_id>[^/]+)/(?:{lesson}/)?(?P<file_id>[^/]+)$"
PATTERNS = [NESTED_FOLDER, FOLDER]
RECEIPT_BYTES = 64 << 10     # a Blackboard receipt is a few hundred bytes
GRADESCOPE_METADATA = "submission_metadata.yml"
# Canvas resubmission, Jupyter's copy, a browser's second download
RENAMED = re.compile(r"(?:-\d+|-Copy\d*| ?\(\d+\))$")
CANVAS_RESUBMISSION = re.compile(r"(?P<notebook>.+)-(?P<number>[1-9]\d{0,5})")  # Canvas's `01-lookup-1`


class SubmissionCollector(FileNameCollectorPlugin):
    """Whose notebook each unpacked file is, from the documented names; decides duplicates before nbgrader does.

    nbgrader calls `collect(path)` once per unpacked file; the first call plans the whole folder, so that a copy
    that loses to a newer one is never handed to nbgrader (which stops on duplicates without timestamps).
    Unlike stock nbgrader, the patterns (`named_regexp` too) see the path relative to extracted/, with `/`, and
    only for a path whose top-level entry has no LMS name.

    `collect()` below passes what it knows; the stock command (`nbgrader zip_collect LESSON
    --extractor=qkv_autograde.intake.extractor.SafeExtractor
    --collector=qkv_autograde.intake.collector.SubmissionCollector --force`)
    builds the plugin with only its parent app, and the rest is read from the app's course directory and
    extractor; its notes then go to nbgrader's log (and a Gradescope group's further members get no copy, nor
    does `.lms.json` get written: use `collect()`).
    """

    named_regexps = List(Unicode(), default_value=PATTERNS,
                         help="Patterns tried in order after named_regexp; `{lesson}` is the lesson's name."
                         ).tag(config=True)

    def __init__(self, extracted_root=None, lesson=None, released=None, dates=None, gradescope=None, archives=None,
                 **kw):
        super().__init__(**kw)
        app = self.parent
        self.standalone = extracted_root is None
        if self.standalone and app is not None:
            extracted_root = app._format_collect_path(app.extracted_directory)
            lesson = app.coursedir.assignment_id
            released = released_notebooks(app.coursedir, lesson)
            # built before the extractor runs: what it finds is read when the plan is made
            self._extractor = getattr(app, "extractor_plugin_inst", None)
        self.extracted_root, self.lesson = extracted_root, lesson or ""
        self.released, self.dates = set(released or ()), dates or {}
        # folders (absolute) whose entries are top-level names; extracted/ always is
        self.archives = set(archives or ()) | ({os.path.realpath(extracted_root)} if extracted_root else set())
        self.gradescope = gradescope  # folder (relative, with /) -> {"students": [...], "created": datetime}
        self.notes = []
        self.extra = []
        self.records = {}  # student -> what the LMS said: {"lms", "user_id", "name", "late", "attachment_id" (Canvas)}
        self.handed_in = {}  # (student, file_id) -> the kept copy's {"lms_time", "lms_order"} (history.newer)
        self.plan = None
        self._compiled = None
        self.limits = NotebookLimits(parent=self)  # c.NotebookLimits in the course's nbgrader_config.py

    _extractor = None

    def patterns(self):
        if self._compiled is None:
            found = ([self.named_regexp] if self.named_regexp else []) + list(self.named_regexps)
            self._compiled = [re.compile(p.replace("{lesson}", re.escape(self.lesson))) for p in found]
        return self._compiled

    def read(self, rel):
        """(fields, index) for a relative path: index is "canvas"/"moodle"/"blackboard" when its top-level entry
        (as `collect()` lays out a zip: the first name) has an LMS name, else that of the first folder pattern
        that matches; (None, None) when nothing does."""
        parts = rel.split("/")
        lms, fields = lms_entry(parts[0])
        if lms:
            return self._lms_file(lms, fields, parts, 0), lms
        for index, pattern in enumerate(self.patterns()):
            match = pattern.match(rel)
            if match and match.groupdict().get("student_id") and match.groupdict().get("file_id"):
                return match.groupdict(), index
        return None, None

    def _lms_file(self, lms, fields, parts, depth):
        """The file at `parts`, below (or being) the student's top-level entry parts[depth]."""
        info = dict(fields, lms=lms, name=display_name(fields.get("name")))
        inside = parts[depth + 1:]
        if not inside:  # the entry is the file itself: its name after the LMS's prefix is the student's file name
            info.update(file_id=fields.get("upload") or "", nested=None)
        else:  # in Moodle's folder, or in the folder a zip the student uploaded was unpacked into
            info.update(file_id=inside[-1], nested="/".join(inside[:-1]) or None)
        return info

    def collect(self, submitted_file):
        if self.plan is None:
            self.plan = self.make_plan()
            if self.standalone:
                for entry in self.notes:
                    self.log.warning("%s%s: %s", f"{entry['student']}: " if entry["student"] else "", entry["name"],
                                     entry["detail"])
        return self.plan.get(os.path.realpath(submitted_file))

    def whose(self, rel):
        """[{student_id, file_id, ...}] for one unpacked file, from the first name from the top that says whose:
        a Gradescope folder's submitters, or an LMS name at an export's top level. Below that entry, no name
        counts. Else the folder patterns on the whole path. None for a file to skip silently (a Gradescope folder
        that names no submitter, already noted with the metadata; a Blackboard receipt)."""
        parts = rel.split("/")
        for depth in range(len(parts)):
            folder = "/".join(parts[:depth + 1])
            if depth < len(parts) - 1 and folder in (self.gradescope or {}):
                meta = self.gradescope[folder]
                if not meta["students"]:
                    return None
                nested = "/".join(parts[depth + 1:-1])
                return [{"student_id": student, "file_id": parts[-1], "nested": nested or None, "lms": "gradescope",
                         "created": meta["created"], "group": meta["students"], "name": name}
                        for student, name in zip(meta["students"], meta["names"])]
            parent = os.path.realpath(os.path.join(self.extracted_root, *parts[:depth]))
            lms, fields = lms_entry(parts[depth])
            if lms and parent in self.archives:
                if fields.get("receipt"):
                    if depth == len(parts) - 1:
                        self._read_receipt(os.path.join(self.extracted_root, *parts), fields)
                        return None
                    continue
                return [self._lms_file(lms, fields, parts, depth)]
            if parent not in self.archives:
                break  # below an ordinary folder: only the folder patterns say whose
        for part in parts:
            if lms_entry(part)[0]:
                self.notes.append(note("", "unexpected file name",
                                       f"{shown(rel)}: named as an LMS names a student's submission, but not at the "
                                       f"top of the export, so it names nobody; skipped (give the LMS's download as "
                                       f"it is)"))
                return None
        for pattern in self.patterns():
            match = pattern.match(rel)
            if match and match.groupdict().get("student_id") and match.groupdict().get("file_id"):
                return [dict(match.groupdict(), lms=None, name="")]
        return []

    def _read_receipt(self, path, fields):
        """Blackboard's receipt: the student's name ("Name: Ann Lee (alee)"); the file itself is not graded."""
        try:
            with open(path, "rb") as f:
                text = f.read(RECEIPT_BYTES).decode("utf-8", "replace")
        except OSError:
            return
        match = re.search(r"^Name:\s*(.*?)\s*\(([^()\n]*)\)\s*$", text, re.MULTILINE)
        if match and match.group(2).strip() == fields["student_id"]:
            self.records.setdefault(fields["student_id"], {})["receipt_name"] = display_name(match.group(1))

    def make_plan(self):
        if self._extractor is not None:
            self.dates = getattr(self._extractor, "dates", None) or self.dates
            self.archives |= getattr(self._extractor, "archives", set())
        if self.gradescope is None:
            self.gradescope, found = gradescope_submitters(self.extracted_root)
            self.notes += found
        chosen, candidates = {}, {}
        self.extra = []  # (path, collected) of a Gradescope group's further members: copied after nbgrader's run
        for root, folders, files in os.walk(self.extracted_root):
            folders.sort()
            for name in sorted(files):
                path = os.path.join(root, name)
                rel = os.path.relpath(path, self.extracted_root).replace(os.sep, "/")
                parts = rel.split("/")
                if is_ignored(parts) or name == GRADESCOPE_METADATA:
                    continue
                if os.path.islink(path):
                    self.notes.append(note("", "unsafe path", f"{shown(rel)} is a symbolic link; skipped"))
                    continue
                infos = self.whose(rel)
                if infos is None:
                    continue
                if os.path.splitext(infos[0]["file_id"] if infos else name)[1] not in self.valid_ext:
                    owner = infos[0]["student_id"] if infos and valid_student_id(infos[0]["student_id"]) else ""
                    self.notes.append(note(owner, "not a notebook", f"{shown(rel)}; skipped"))
                    continue
                if not infos:
                    self.notes.append(note("", "unexpected file name",
                                           f"{shown(rel)}: matches none of the file name patterns, so whose it is is "
                                           f"unknown; skipped (see qkv_autograde/intake/collector.py)"))
                    continue
                infos = [info for info in infos if self._accepted(rel, info)]
                for info in infos:
                    self._candidate(candidates, path, rel, info)
        for (student, notebook), found in sorted(candidates.items()):
            by_name = all(named for (named, _, _), _, _, _ in found)
            found.sort(key=lambda c: (c[0][0] if by_name else c[0][1], c[0][2], c[1]))
            (named, dated, _), rel, path, info = found[-1]
            if len(found) > 1:
                said = (lambda c: f"named {c[0][0]}") if by_name else (lambda c: f"dated {c[0][1]}")
                others = "; ".join(f"{shown(c[1])} ({said(c)})" for c in found[:-1])
                self.notes.append(note(student, "duplicate submission",
                                       f"{len(found)} copies of {notebook}.ipynb: kept the newest, {shown(rel)} "
                                       f"({said(found[-1])}); skipped {others}"))
            refusal = self.limits.refusal(path, shown(rel))
            if refusal:  # weighed, never parsed; not handed to nbgrader, so never copied into submitted/
                self.notes.append(note(student, refusal["name"], refusal["detail"]))
                continue
            collected = {"student_id": student, "file_id": f"{notebook}.ipynb"}
            if named:
                collected["timestamp"] = named.isoformat(" ")
            record = self.records.setdefault(student, {})
            record.update(lms=info.get("lms"), user_id=student, name=info.get("name") or record.get("name", ""))
            if info.get("lms") == "canvas":  # Canvas takes feedback back under the kept copy's ids (lms_feedback.py)
                record["attachment_id"] = info.get("submission_id")
            if info.get("late"):  # the copy kept, not an older one, says whether the submission is late
                record["late"] = "marked late by Canvas (its download gives no time)"
            if named:
                record["timestamp"] = named.isoformat(" ")
            self.handed_in[(student, collected["file_id"])] = _lms_time(named, info)
            if os.path.realpath(path) in chosen:
                self.extra.append((path, collected))
            else:
                chosen[os.path.realpath(path)] = collected
        for record in self.records.values():
            if record.get("receipt_name") and not record.get("name"):
                record["name"] = record["receipt_name"]
        self.records = {s: r for s, r in self.records.items() if "user_id" in r}
        return chosen

    def _accepted(self, rel, info):
        """False (and a note) for a student id outside the documented character set."""
        student = info["student_id"]
        if not valid_student_id(student):
            self.notes.append(note("", "refused student id",
                                   f"{shown(rel)}: {shown(repr(student), 80)} is not a student id (expected 1 to 64 "
                                   f"letters, digits, '.', '_', '-', '@' or '+', starting with a letter or digit); "
                                   f"skipped"))
            return False
        return True

    def _candidate(self, candidates, path, rel, info):
        student = info["student_id"]
        notebook = self._notebook_name(info["file_id"])
        lms, fields = lms_entry(info["file_id"])
        if lms and fields.get("student_id") != student:
            self.notes.append(note(student, "unexpected file name",
                                   f"{shown(rel)}: named like the submission of another student "
                                   f"({shown(fields['student_id'], 64)}), but handed in by {student}: kept as "
                                   f"{student}'s"))
        elif notebook != os.path.splitext(info["file_id"])[0] and not canvas_resubmission(info, notebook):
            self.notes.append(note(student, "unexpected file name", f"{shown(rel)} collected as {notebook}.ipynb"))
        elif self.released and notebook not in self.released:
            self.notes.append(note(student, "unexpected file name",
                                   f"{shown(rel)}: {self.lesson} has no notebook of that name "
                                   f"(expected {', '.join(f'{n}.ipynb' for n in sorted(self.released))})"))
        if info.get("nested"):
            self.notes.append(note(student, "nested folder", f"{shown(rel)}: found inside {shown(info['nested'])}/"))
        if len(info.get("group") or ()) > 1:
            self.notes.append(note(student, "group submission",
                                   f"{shown(rel)}: handed in together by {', '.join(info['group'])}; each gets a copy"))
        candidates.setdefault((student, notebook), []).append((self._age(path, info, notebook), rel, path, info))

    def _notebook_name(self, file_id):
        stem = os.path.splitext(file_id)[0]
        if stem in self.released or not self.released:
            return stem
        plain = RENAMED.sub("", stem)
        return plain if plain in self.released else stem

    def _age(self, path, info, notebook):
        """(time in the name or None, the zip entry's date or the file's, (Canvas's resubmission number, Canvas
        attachment id)): between copies of the same date, Canvas's later upload."""
        named = named_time(info.get("timestamp"))
        dated = (info.get("created") or self.dates.get(path)
                 or datetime.datetime.fromtimestamp(os.path.getmtime(path)).replace(microsecond=0))
        return named, dated, (canvas_resubmission(info, notebook), int(info.get("submission_id") or 0))


def canvas_resubmission(info, notebook):
    """n when the file is a Canvas entry's own upload named `<notebook>-<n>.ipynb`, the name Canvas gives a file
    uploaded again under the same name (n = 1, 2, ...: the highest is the newest), else 0. A name the student chose
    (`-Copy1`, ` (1)`, a file inside an uploaded zip) is not Canvas's, and is still noted as renamed."""
    if info.get("lms") != "canvas" or info.get("file_id") != info.get("upload"):
        return 0
    match = CANVAS_RESUBMISSION.fullmatch(os.path.splitext(info["file_id"])[0])
    return int(match.group("number")) if match and match.group("notebook") == notebook else 0


def _lms_time(named, info):
    """When the LMS says this copy was handed in: Blackboard's time in the name or Gradescope's `:created_at:`;
    Canvas gives no time but numbers every upload in order (the attachment id)."""
    when = named or info.get("created")
    when = when.replace(tzinfo=None, microsecond=0).isoformat(" ") if isinstance(when, datetime.datetime) else None
    order = info.get("submission_id") if info.get("lms") == "canvas" else None
    return {"lms_time": when, "lms_order": int(order) if order and order.isdigit() else None}


def gradescope_submitters(extracted):
    """{folder relative to `extracted`: {"students", "created"}} from Gradescope's submission_metadata.yml files.

    Gradescope exports submission_<id>/ folders and a YAML file naming who handed each in (`:submitters:` with
    `:sid:`, `:email:`, `:name:`); the student id is the submitter's `:sid:`, else `:email:`, else `:name:`.
    """
    import yaml
    from nbgrader.utils import parse_utc

    found, notes = {}, []
    for root, _folders, files in os.walk(extracted):
        if GRADESCOPE_METADATA not in files:
            continue
        where = os.path.relpath(root, extracted).replace(os.sep, "/")
        try:
            with open(os.path.join(root, GRADESCOPE_METADATA), encoding="utf-8") as f:
                metadata = yaml.safe_load(f)
            if not isinstance(metadata, dict):
                raise ValueError("not a mapping of submission folders")
        except (OSError, ValueError, yaml.YAMLError) as error:
            notes.append(note("", "unreadable metadata", f"{where}/{GRADESCOPE_METADATA}: {error}"))
            continue
        for folder, entry in metadata.items():
            entry = entry if isinstance(entry, dict) else {}
            students, names = [], []
            for person in entry.get(":submitters") or []:
                person = person if isinstance(person, dict) else {}
                student = next((str(person[k]).strip() for k in (":sid", ":email", ":name") if person.get(k)), "")
                if student:
                    students.append(student)
                    names.append(display_name(person.get(":name")))
            try:
                created = entry.get(":created_at")
                created = parse_utc(created if isinstance(created, datetime.datetime)
                                    else dateutil_parse(str(created))) if created else None
            except (ValueError, OverflowError, TypeError):
                created = None
            found[str(folder) if where == "." else f"{where}/{folder}"] = {"students": students, "names": names,
                                                                          "created": created}
            if not students:
                notes.append(note("", "unexpected file name",
                                  f"{where}/{folder}: no submitter in {GRADESCOPE_METADATA}; its files are skipped"))
    return found, notes


def dateutil_parse(text):
    import dateutil.parser

    return dateutil.parser.parse(text)


def released_notebooks(coursedir, lesson):
    folder = coursedir.format_path(coursedir.release_directory, ".", lesson)
    if not os.path.isdir(folder):
        return set()
    return {os.path.splitext(f)[0] for f in os.listdir(folder) if f.endswith(".ipynb")}
