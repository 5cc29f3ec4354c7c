"""From what an instructor downloads from the LMS to nbgrader's `submitted/<student>/<lesson>/<notebook>.ipynb`.

`collect(source, course_root, lesson)` takes a zip as Canvas, Moodle, Blackboard or Gradescope export it (zips
inside it, folders inside it), or a folder, and runs nbgrader's own `zip_collect` in-process with two plugins:

- `SafeExtractor` (an nbgrader ExtractorPlugin) unpacks archives without ever writing outside the course: an entry
  named with `../`, an absolute path, a drive letter or a symlink is refused; zips inside the zip are unpacked
  into a folder named after them (nbgrader's own layout), three levels deep at most, with a cap on bytes.
- `SubmissionCollector` (an nbgrader FileNameCollectorPlugin) reads whose notebook each file is from its path
  relative to the unpacked folder, with the first of `SubmissionCollector.named_regexps` that matches
  (nbgrader's `named_regexp`, when set, is tried first). `{lesson}` in a pattern stands for the lesson's name.

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

A student id is 1 to 64 characters from `STUDENT_ID_CHARACTERS`: letters, digits and `. _ - @ +`, starting with a
letter or digit (what every LMS id above is; an email address fits). Anything else (a space, a comma, a newline,
a leading `=`, a folder named `.hidden`) is refused with a `refused student id` note and never rewritten into
some other id.

Lateness: Blackboard's time becomes nbgrader's timestamp.txt (nbgrader reads it as UTC: Blackboard writes the
server's local time), Canvas's LATE flag (Canvas gives no time) is kept; both are written with the name to
`.lms.json` next to the notebook, and staging reports `late` (by how long, when the gradebook has a due date).

A notebook saved under another name (`01-lookup-1.ipynb`, Canvas's mark of a resubmission, `-Copy1`, ` (1)`) is
collected under the released name. Several notebooks of one student for one released notebook: the newest wins,
by the timestamp in the name when every copy has one, else by the zip entry's date (then the later name), and
the others are listed. Hidden files, `__MACOSX/` and `.ipynb_checkpoints/` are ignored; other non-notebook files
are skipped. Everything unusual becomes a report entry {"student", "name", "detail"}; bad input never raises.

History: every collection is a round of `history-<lesson>.jsonl` (history.py): per submission when, from which
export (name and sha256), the LMS's time, the notebook's sha256 and what happened; per student the notes. A copy
that differs from the notebook already in submitted/ replaces it ("collected again") only when the LMS says it was
handed in later (Blackboard's and Gradescope's time, Canvas's attachment ids, which number uploads in order);
an older copy, or one no LMS time orders (Moodle, folders), is refused (`older submission refused`) and the one
there kept, unless `collect(..., allow_older=True)` (--allow-older).

Work folders (nbgrader's layout): <course_root>/downloaded/<lesson>/extracted/ (what the export unpacked to,
rebuilt on every collection) and .../archive/ (a folder given as the source is copied there without its links;
nbgrader's own workflow, exports dropped into archive/, works too: pass that folder as the source).
"""
import datetime
import logging
import os
import re
import shutil
import stat
import sys
import zipfile

from nbgrader.plugins import ExtractorPlugin, FileNameCollectorPlugin
from traitlets import Integer, List, Unicode
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from . import history

# One name at the top of an export (a file, or a folder: Moodle's, or a student's zip unpacked) -> whose it is
CANVAS = (r"(?P<name>[^/_]+)_(?P<late>[Ll][Aa][Tt][Ee]_)?(?P<student_id>\d+)_(?P<submission_id>\d+)_"
          r"(?P<upload>[^/]+)")
MOODLE = r"(?P<name>[^/_]+?)_(?P<student_id>\d+)_assignsubmission_(?P<plugin>[a-z]+)_(?P<upload>[^/]*)"
BLACKBOARD = (r"(?P<assignment>[^/]*?)_(?P<student_id>[^/_]+)_attempt_"
              r"(?P<timestamp>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)(?:_(?P<upload>[^/]+)|(?P<receipt>\.txt))")
LMS_NAMES = {"canvas": CANVAS, "moodle": MOODLE, "blackboard": BLACKBOARD}
# nbgrader's submitted/ shape, on the whole relative path, for a path with no LMS name at its top
NESTED_FOLDER = r"(?:.*/)?(?!{lesson}/)(?P<student_id>[^/]+)/{lesson}/(?P<nested>.+)/(?P<file_id>[^/]+)$"
FOLDER = r"(?:.*/)?(?!{lesson}/)(?P<student_id>[^/]+)/(?:{lesson}/)?(?P<file_id>[^/]+)$"
PATTERNS = [NESTED_FOLDER, FOLDER]
STUDENT_ID_CHARACTERS = r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}"
STUDENT_ID = re.compile(STUDENT_ID_CHARACTERS + r"\Z")
LMS_RECORD = ".lms.json"     # next to the collected notebook: {"lms", "user_id", "name", "late"}
MAX_NAME = 100               # a display name, as the LMS shows it
RECEIPT_BYTES = 64 << 10     # a Blackboard receipt is a few hundred bytes

ARCHIVES = (".zip",)
GRADESCOPE_METADATA = "submission_metadata.yml"
# what operating systems and Jupyter add to a folder; a student folder starting with a dot is NOT ignored here
# (the grader refuses it with a reason, see submissions.py)
IGNORED_PARTS = ("__MACOSX", ".ipynb_checkpoints", "__pycache__", ".DS_Store", ".git", "Thumbs.db", "desktop.ini")
RENAMED = re.compile(r"(?:-\d+|-Copy\d*| ?\(\d+\))$")  # Canvas resubmission, Jupyter's copy, a browser's second download
MAX_DEPTH = 3                # a zip in a zip in a zip
MAX_BYTES = 2 << 30          # everything one export may unpack to
MAX_ENTRY_BYTES = 256 << 20  # one notebook with outputs is a few MB


def note(student, name, detail):
    return {"student": student or "", "name": name, "detail": detail}


def _safe_name(name):
    """The entry's path parts when it stays inside the folder it is unpacked into, else None."""
    name = name.replace("\\", "/")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name) or "\x00" in name:
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return None
    return parts


def _inside(path, root):
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top + os.sep)


def _ignored(parts):
    return any(p in IGNORED_PARTS or p.startswith("._") for p in parts)  # ._name: macOS's AppleDouble shadow


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


class SafeExtractor(ExtractorPlugin):
    """nbgrader's extractor, refusing every entry that would land outside the folder it is unpacked into.

    A zip given as the source is unpacked into `extracted/` directly (so a notebook at its top has no folder that
    could be mistaken for a student); a zip inside it, or in a folder given as the source, into a folder named
    after that zip, as nbgrader does (a student's uploaded `alice_1_2_work.zip` keeps the name that says whose).

    `archives`: the folders whose entries are an export's top-level names: extracted/ itself, and the folders made
    from zips there that are exports themselves (no LMS name: `section2.zip`, the zips of nbgrader's archive/). `dates`: each file's date as the LMS
    wrote it: inside a student's upload, the date of the upload's own entry, never the dates the student's zip
    claims.
    """

    max_depth = Integer(MAX_DEPTH, help="How many zips deep to unpack.").tag(config=True)
    max_bytes = Integer(MAX_BYTES, help="Most bytes one collection may unpack.").tag(config=True)

    def __init__(self, **kw):
        super().__init__(**kw)
        self.notes = []
        self.dates = {}  # absolute path of an unpacked file -> the zip entry's date
        self.archives = set()  # absolute paths of the folders that hold an export's top-level entries
        self.unpacked = 0

    def extract(self, archive_path, extracted_path):
        self.archives.add(os.path.realpath(extracted_path))
        for root, folders, files in os.walk(archive_path):
            folders.sort()
            for name in sorted(files):
                path = os.path.join(root, name)
                rel = os.path.relpath(path, archive_path)
                target = os.path.normpath(os.path.join(extracted_path, os.path.dirname(rel)))
                if name.lower().endswith(ARCHIVES):  # into a folder named after it, as nbgrader does
                    folder = os.path.join(target, os.path.splitext(name)[0])
                    owned = lms_entry(name)[0] is not None  # a student's upload, still zipped, in an unzipped export
                    if not owned and root == archive_path:
                        self.archives.add(os.path.realpath(folder))
                    stamp = datetime.datetime.fromtimestamp(os.path.getmtime(path)).replace(microsecond=0)
                    self._unzip(path, folder, rel, depth=1, inherited=stamp if owned else None)
                elif not os.path.islink(path) and os.path.isfile(path):
                    os.makedirs(target, exist_ok=True)
                    shutil.copy2(path, os.path.join(target, name))
        for entry in self.notes:  # collect() reports these by name; the stock command only has its log
            self.log.warning("%s: %s", entry["name"], entry["detail"])

    def _unzip(self, path, target, shown, depth, inherited=None):
        """`inherited`: the date of the student's upload this zip is part of (None: an export, dated by its entries)."""
        try:
            with zipfile.ZipFile(path) as archive:
                entries = archive.infolist()
                for info in entries:
                    self._entry(archive, info, target, shown, depth, inherited)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError, EOFError, OSError,
                ValueError) as error:
            self.notes.append(note("", "corrupt archive", f"{shown}: {type(error).__name__}: {error}"))

    def _entry(self, archive, info, target, shown, depth, inherited=None):
        where = f"{shown}: {info.filename}"
        parts = _safe_name(info.filename)
        if parts is None:
            self.notes.append(note("", "unsafe path", f"{where} points outside the folder it is unpacked into; skipped"))
            return
        if stat.S_ISLNK(info.external_attr >> 16):
            self.notes.append(note("", "unsafe path", f"{where} is a symbolic link; skipped"))
            return
        if info.is_dir() or not parts or _ignored(parts):
            return
        if info.file_size > MAX_ENTRY_BYTES or self.unpacked + info.file_size > self.max_bytes:
            self.notes.append(note("", "too large", f"{where}: {info.file_size} bytes; skipped"))
            return
        dest = os.path.join(target, *parts)
        if not _inside(os.path.dirname(dest), target) and os.path.exists(os.path.dirname(dest)):
            self.notes.append(note("", "unsafe path", f"{where} would be written through a link; skipped"))
            return
        try:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if not _inside(dest, target) or os.path.islink(dest):
                self.notes.append(note("", "unsafe path", f"{where} would be written outside the course; skipped"))
                return
            date = datetime.datetime(*info.date_time)
            if inherited is None and os.path.realpath(target) in self.archives and lms_entry(parts[0])[0]:
                inherited = date  # this entry is a student's: whatever lies below it is dated by it
            date = inherited or date
            if os.path.exists(dest):  # the same name twice in one zip: keep the newer entry
                if date <= self.dates.get(dest, datetime.datetime.min):
                    self.notes.append(note("", "duplicate entry", f"{where}: an older copy of a name already unpacked; skipped"))
                    return
                self.notes.append(note("", "duplicate entry", f"{where}: a newer copy replaced the one unpacked before"))
            with archive.open(info) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out)
            self.unpacked += info.file_size
            stamp = date.timestamp()
            os.utime(dest, (stamp, stamp))
            self.dates[dest] = date
        except (OSError, zipfile.BadZipFile, RuntimeError, EOFError, ValueError, NotImplementedError) as error:
            self.notes.append(note("", "unreadable entry", f"{where}: {type(error).__name__}: {error}"))
            return
        if parts[-1].lower().endswith(ARCHIVES):
            inner = os.path.splitext(dest)[0]
            if depth >= self.max_depth:
                self.notes.append(note("", "nested folder", f"{where}: a zip {depth + 1} levels deep; not unpacked"))
            else:
                if inherited is None and len(parts) == 1 and os.path.realpath(target) in self.archives:
                    self.archives.add(os.path.realpath(inner))  # an export inside the export: its names are top-level
                self._unzip(dest, inner, where, depth + 1, inherited)
            os.remove(dest)


class SubmissionCollector(FileNameCollectorPlugin):
    """Whose notebook each unpacked file is, from the documented names; decides duplicates before nbgrader does.

    nbgrader calls `collect(path)` once per unpacked file; the first call plans the whole folder, so that a copy
    that loses to a newer one is never handed to nbgrader (which stops on duplicates without timestamps).
    Unlike stock nbgrader, the patterns (`named_regexp` too) see the path relative to extracted/, with `/`, and
    only for a path whose top-level entry has no LMS name.

    `collect()` below passes what it knows; the stock command (`nbgrader zip_collect LESSON
    --extractor=qkv_autograde.intake.SafeExtractor --collector=qkv_autograde.intake.SubmissionCollector --force`)
    builds the plugin with only its parent app, and the rest is read from the app's course directory and
    extractor; its notes then go to nbgrader's log (and a Gradescope group's further members get no copy, nor
    does `.lms.json` get written: use `collect()`).
    """

    named_regexps = List(Unicode(), default_value=PATTERNS,
                         help="Patterns tried in order after named_regexp; `{lesson}` is the lesson's name.").tag(config=True)

    def __init__(self, extracted_root=None, lesson=None, released=None, dates=None, gradescope=None, archives=None,
                 **kw):
        super().__init__(**kw)
        app = self.parent
        self.standalone = extracted_root is None
        if self.standalone and app is not None:
            extracted_root = app._format_collect_path(app.extracted_directory)
            lesson = app.coursedir.assignment_id
            released = _released(app.coursedir, lesson)
            # built before the extractor runs: what it finds is read when the plan is made
            self._extractor = getattr(app, "extractor_plugin_inst", None)
        self.extracted_root, self.lesson = extracted_root, lesson or ""
        self.released, self.dates = set(released or ()), dates or {}
        # folders (absolute) whose entries are top-level names; extracted/ always is
        self.archives = set(archives or ()) | ({os.path.realpath(extracted_root)} if extracted_root else set())
        self.gradescope = gradescope  # folder (relative, with /) -> {"students": [...], "created": datetime}
        self.notes = []
        self.extra = []
        self.records = {}  # student -> what the LMS said: {"lms", "user_id", "name", "late"}
        self.handed_in = {}  # (student, file_id) -> the kept copy's {"lms_time", "lms_order"} (history.newer)
        self.plan = None
        self._compiled = None

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
            self.plan = self._make_plan()
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

    def _make_plan(self):
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
                if _ignored(parts) or name == GRADESCOPE_METADATA:
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
                                           f"unknown; skipped (see qkv_autograde/intake.py)"))
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
            collected = {"student_id": student, "file_id": f"{notebook}.ipynb"}
            if named:
                collected["timestamp"] = named.isoformat(" ")
            record = self.records.setdefault(student, {})
            record.update(lms=info.get("lms"), user_id=student, name=info.get("name") or record.get("name", ""))
            if info.get("late"):  # the copy kept, not an older one, says whether the submission is late
                record["late"] = "marked late by Canvas (its download gives no time)"
            if named:
                record["timestamp"] = named.isoformat(" ")
            self.handed_in[(student, collected["file_id"])] = _lms_time(named, info)
            if os.path.realpath(path) in chosen:
                self.extra.append((path, collected))
            else:
                chosen[os.path.realpath(path)] = collected
        for student, record in self.records.items():
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
        elif notebook != os.path.splitext(info["file_id"])[0]:
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
        candidates.setdefault((student, notebook), []).append((self._age(path, info), rel, path, info))

    def _notebook_name(self, file_id):
        stem = os.path.splitext(file_id)[0]
        if stem in self.released or not self.released:
            return stem
        plain = RENAMED.sub("", stem)
        return plain if plain in self.released else stem

    def _age(self, path, info):
        """(time in the name or None, the zip entry's date or the file's, Canvas attachment id)."""
        named = _named_time(info.get("timestamp"))
        dated = info.get("created") or self.dates.get(path) or datetime.datetime.fromtimestamp(os.path.getmtime(path)).replace(microsecond=0)
        return named, dated, int(info.get("submission_id") or 0)


def _lms_time(named, info):
    """When the LMS says this copy was handed in: Blackboard's time in the name or Gradescope's `:created_at:`;
    Canvas gives no time but numbers every upload in order (the attachment id)."""
    when = named or info.get("created")
    when = when.replace(tzinfo=None, microsecond=0).isoformat(" ") if isinstance(when, datetime.datetime) else None
    order = info.get("submission_id") if info.get("lms") == "canvas" else None
    return {"lms_time": when, "lms_order": int(order) if order and order.isdigit() else None}


def _named_time(text):
    if not text:
        return None
    digits = re.findall(r"\d+", text)
    try:
        return datetime.datetime(*map(int, digits[:6]))
    except (TypeError, ValueError):
        return None


# ------------------------------------------------------------------------------------------------ the entry point

def _course_config(course_root):
    """The course's nbgrader_config.py (its folders), read without growing this process's sys.path or PYTHONPATH."""
    path = os.path.join(course_root, "nbgrader_config.py")
    if not os.path.isfile(path):
        return Config()
    saved_path, saved_env = list(sys.path), os.environ.get("PYTHONPATH")
    try:
        return PyFileConfigLoader("nbgrader_config.py", path=course_root).load_config()
    finally:
        sys.path[:] = saved_path
        if saved_env is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved_env


def collect(source, course_root, lesson, log=None, allow_older=False):
    """Fill <course_root>/submitted/<student>/<lesson>/ from an LMS export; returns report entries.

    `source`: a .zip (zips and folders inside it allowed) or a folder (copied, then read the same way); the
    course's own submitted/ folder is only checked. Entries: {"student": id or "", "name", "detail"}.

    Every collection is a round of the lesson's history (history.py): per submission what came from which export
    and what happened, per student the notes. A copy that differs from the notebook already in submitted/ replaces
    it only when the LMS says it was handed in later; an older one (or one the LMS gives no time for, like the
    one before it) is refused with an `older submission refused` note, unless `allow_older` (--allow-older).
    """
    log = log or logging.getLogger("qkv_autograde.intake")
    course_root = os.path.abspath(course_root)
    source = os.path.abspath(str(source))
    collected = []
    try:
        notes, collected = _collect(source, course_root, lesson, allow_older)
    except (Exception, SystemExit) as error:  # the report, not a traceback, is how an instructor learns of it
        log.error("qkv intake: collecting %s failed: %s: %s", source, type(error).__name__, error)
        log.debug("qkv intake: the failure in full", exc_info=True)
        notes = [note("", "collection failed", f"{type(error).__name__}: {error}")]
    for entry in notes:
        log.warning("qkv intake: %s%s: %s", f"{entry['student']}: " if entry["student"] else "", entry["name"],
                    entry["detail"])
    if collected is not None:  # None: submitted/ itself was only checked, no collection took place
        try:
            _record_round(course_root, lesson, source, collected, notes)
        except OSError as error:
            log.error("qkv intake: the history of %s could not be written (%s): this round is not in it", lesson,
                      error)
    return notes


def _record_round(course_root, lesson, source, collected, notes):
    """This collection, appended to the lesson's history: a `collected` record per submission, a `noted` one per
    student with notes ("" for the export as a whole)."""
    this = history.new_round(history.read(course_root, lesson), source)
    by_student = {}
    for entry in notes:
        by_student.setdefault(entry["student"], []).append({"name": entry["name"], "detail": entry["detail"]})
    history.append(course_root, lesson, [dict(this, event="collected", **c) for c in collected]
                   + [dict(this, event="noted", student=s, notes=n) for s, n in sorted(by_student.items())])


def _collect(source, course_root, lesson, allow_older=False):
    """(notes, [what happened to each submission, for the history]); None instead of the list when `source` is
    the course's submitted/ folder, which is only checked."""
    from nbgrader.apps.zipcollectapp import ZipCollectApp
    from nbgrader.coursedir import CourseDirectory

    config = _course_config(course_root)
    config.CourseDirectory.root = course_root
    config.CourseDirectory.assignment_id = lesson
    coursedir = CourseDirectory(config=config)
    submitted = os.path.realpath(coursedir.format_path(coursedir.submitted_directory, ".", "."))
    if not os.path.exists(source):
        return [note("", "no submissions", f"{source} does not exist")], []
    if os.path.isdir(source) and os.path.realpath(source) == submitted:
        return check_submitted(submitted, lesson, _released(coursedir, lesson)), None
    if os.path.isfile(source) and not source.lower().endswith(ARCHIVES):
        return [note("", "not a notebook", f"{source}: give a .zip export or a folder")], []

    app = ZipCollectApp(config=config, log=_quiet_logger())
    app.coursedir = coursedir
    app.force = True  # the work folders are ours, rebuilt from this export every time
    work = os.path.join(course_root, app.downloaded_directory, lesson)
    archive, extracted = (app._format_collect_path(app.archive_directory),
                          app._format_collect_path(app.extracted_directory))
    if not all(_inside(p, course_root) for p in (work, archive, extracted, submitted)):
        return [note("", "unsafe path", "the course's download or submitted folder lies outside the course")], []
    # nbgrader's own workflow drops the exports into archive/: then that folder is the source, used in place
    in_place = os.path.isdir(source) and os.path.realpath(source) == os.path.realpath(archive)
    if _inside(source, extracted) or (_inside(source, archive) and not in_place and os.path.isdir(source)):
        return [note("", "collection failed", f"{source} lies in the folder a collection rebuilds; give the export "
                                              f"itself, or the folder {archive}")], []
    shutil.rmtree(extracted, ignore_errors=True)
    os.makedirs(extracted)
    notes = []
    extractor = SafeExtractor(parent=app)
    app.extractor_plugin_inst = extractor
    if os.path.isfile(source):
        # the export's own zip is unpacked straight into extracted/, not into a folder named after the download,
        # so that a notebook at its top is not read as belonging to a student named like the zip
        extractor.archives.add(os.path.realpath(extracted))
        extractor._unzip(source, extracted, os.path.basename(source), depth=1)
    else:
        if not in_place:
            shutil.rmtree(archive, ignore_errors=True)
            os.makedirs(archive)
            notes += _copy_folder(source, archive)
        extractor.extract(archive, extracted)
    released = _released(coursedir, lesson)
    gradescope, metadata_notes = gradescope_submitters(extracted)
    collector = SubmissionCollector(extracted, lesson, released, extractor.dates, gradescope, extractor.archives,
                                    parent=app)
    app.collector_plugin_inst = collector
    collector.plan = collector._make_plan()
    notes += extractor.notes + metadata_notes + collector.notes
    everything = list(collector.plan.items()) + collector.extra
    replaced, collected, refused = _against_submitted(everything, collector.handed_in, coursedir, lesson,
                                                      history.read(course_root, lesson), allow_older)
    kept = lambda info: (info["student_id"], info["file_id"]) not in refused  # noqa: E731
    collector.plan = {path: info for path, info in collector.plan.items() if kept(info)}
    collector.extra = [(path, info) for path, info in collector.extra if kept(info)]
    students = {info["student_id"] for _, info in list(collector.plan.items()) + collector.extra}
    if collector.plan or collector.extra:
        # nbgrader empties a collected student's folder: a refused notebook of a student collected otherwise stays
        saved = _read_refused(refused, students, coursedir, lesson)
        app.process_extracted_files()
        _copy_group_members(collector, coursedir, lesson, course_root)
        for dest, data in saved.items():
            with open(dest, "wb") as f:
                f.write(data)
        notes += _record_lms({s: r for s, r in collector.records.items() if s in students}, coursedir, lesson,
                             course_root)
    elif not everything:
        notes.append(note("", "no submissions", f"no notebook in {os.path.basename(source)} could be collected"))
    notes += replaced
    return notes, collected


def _record_lms(records, coursedir, lesson, course_root):
    """What the LMS said of each collected student: `.lms.json` next to the notebook (read by staging and by the
    export), lateness against the gradebook's due date, and the name into nbgrader's Student. A course without a
    gradebook yet gets none made here (the export at the end of `make grade` fills the names in)."""
    import contextlib
    import json

    from nbgrader.api import Gradebook, MissingEntry

    notes = []
    url = coursedir.db_url
    exists = not url.startswith("sqlite:///") or os.path.isfile(url[len("sqlite:///"):])
    with (Gradebook(url) if exists else contextlib.nullcontext()) as gb:
        try:
            duedate = gb.find_assignment(lesson).duedate if gb else None
        except MissingEntry:
            duedate = None
        for student, record in sorted(records.items()):
            folder = coursedir.format_path(coursedir.submitted_directory, student, lesson)
            if not os.path.isdir(folder) or not _inside(folder, course_root):
                continue
            stamp = _named_time(record.get("timestamp"))
            if stamp and duedate and stamp > duedate:
                record["late"] = f"submitted {_duration((stamp - duedate).total_seconds())} after the due date ({duedate})"
            kept = {k: record[k] for k in ("lms", "user_id", "name", "late", "timestamp") if record.get(k)}
            with open(os.path.join(folder, LMS_RECORD), "w", encoding="utf-8") as f:
                json.dump(kept, f)
            if record.get("late"):
                notes.append(note(student, "late", record["late"]))
            if record.get("name") and gb is not None:
                first, _, last = record["name"].rpartition(" ")
                gb.update_or_create_student(student, first_name=first or None, last_name=last)
    return notes


def _duration(seconds):
    minutes = int(seconds // 60)
    days, hours, minutes = minutes // 1440, minutes // 60 % 24, minutes % 60
    return " ".join(f"{n} {unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "min")) if n) or \
        f"{int(seconds)} s"


def _copy_group_members(collector, coursedir, lesson, course_root):
    """A group's notebook for its members after the first (nbgrader gives each file to one student)."""
    by_nbgrader = {info["student_id"] for info in collector.plan.values()}
    cleared = set()
    for path, info in collector.extra:
        folder = coursedir.format_path(coursedir.submitted_directory, info["student_id"], lesson)
        if not _inside(folder, course_root):
            continue
        if info["student_id"] not in by_nbgrader and info["student_id"] not in cleared:
            shutil.rmtree(folder, ignore_errors=True)  # as nbgrader's --force does for the students it collects
            cleared.add(info["student_id"])
        os.makedirs(folder, exist_ok=True)
        shutil.copy(path, os.path.join(folder, info["file_id"]))


def gradescope_submitters(extracted):
    """{folder relative to `extracted`: {"students", "created"}} from Gradescope's submission_metadata.yml files.

    Gradescope exports submission_<id>/ folders and a YAML file naming who handed each in (`:submitters:` with
    `:sid:`, `:email:`, `:name:`); the student id is the submitter's `:sid:`, else `:email:`, else `:name:`.
    """
    import yaml
    from nbgrader.utils import parse_utc

    found, notes = {}, []
    for root, folders, files in os.walk(extracted):
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
                notes.append(note("", "unexpected file name", f"{where}/{folder}: no submitter in {GRADESCOPE_METADATA}; "
                                                     f"its files are skipped"))
    return found, notes


def dateutil_parse(text):
    import dateutil.parser

    return dateutil.parser.parse(text)


def _quiet_logger():
    """nbgrader's zip_collect logs every file; its warnings repeat what the report says by name."""
    quiet = logging.getLogger("qkv_autograde.intake.nbgrader")
    quiet.setLevel(logging.ERROR)
    return quiet


def _released(coursedir, lesson):
    folder = coursedir.format_path(coursedir.release_directory, ".", lesson)
    if not os.path.isdir(folder):
        return set()
    return {os.path.splitext(f)[0] for f in os.listdir(folder) if f.endswith(".ipynb")}


def _copy_folder(source, archive):
    """An unzipped export or a submitted/-shaped folder elsewhere, copied into the work folder without links."""
    notes = []
    for root, folders, files in os.walk(source):
        for name in list(folders):
            if os.path.islink(os.path.join(root, name)):
                notes.append(note("", "unsafe path", f"{os.path.relpath(os.path.join(root, name), source)} is a "
                                                     f"symbolic link; skipped"))
                folders.remove(name)
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, source)
            if os.path.islink(path):
                notes.append(note("", "unsafe path", f"{rel} is a symbolic link; skipped"))
                continue
            if not os.path.isfile(path):
                continue
            dest = os.path.join(archive, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copy2(path, dest)
    return notes


def _against_submitted(planned, handed_in, coursedir, lesson, past, allow_older):
    """Each copy about to be collected against the notebook already in submitted/: (notes, [for the history:
    {"student", "notebook", "sha256", "outcome", "lms_time", "lms_order"}], {(student, file_id) refused}).

    A different copy replaces the one there ("collected again") only when the LMS says it was handed in later
    (history.newer; the earlier copy's time is the history's, else its `.lms.json`); an older one, or one whose
    order the LMS does not give, is refused unless `allow_older`."""
    notes, collected, refused = [], [], set()
    for path, info in planned:
        student, file_id = info["student_id"], info["file_id"]
        notebook = os.path.splitext(file_id)[0]
        dest = os.path.join(coursedir.format_path(coursedir.submitted_directory, student, lesson), file_id)
        incoming = handed_in.get((student, file_id)) or {"lms_time": None, "lms_order": None}
        sha256 = history.sha256_of(path)
        outcome = "new"
        if os.path.isfile(dest):
            earlier = history.sha256_of(dest)
            existing = history.kept_copy(past, student, notebook, earlier) or _recorded_time(os.path.dirname(dest))
            later = history.newer(incoming, existing)
            if earlier == sha256:
                outcome = "same"
            elif later:
                outcome = "replaced older"
                notes.append(note(student, "collected again",
                                  f"{file_id} replaced what an earlier collection put in submitted/ (handed in "
                                  f"{_when(existing)}; this one {_when(incoming)})"))
            elif allow_older:
                outcome = "replaced (allowed)"
                notes.append(note(student, "collected again",
                                  f"{file_id} replaced what an earlier collection put in submitted/ (handed in "
                                  f"{_when(existing)}), with a copy handed in {_when(incoming)}, as told "
                                  f"(--allow-older)"))
            else:
                outcome = "older refused" if later is False else "undated refused"
                refused.add((student, file_id))
                why = ("the LMS says it was handed in earlier" if later is False else
                       "the LMS gives no time that tells which was handed in later")
                notes.append(note(student, "older submission refused",
                                  f"{file_id} (handed in {_when(incoming)}) differs from the copy already in "
                                  f"submitted/ (handed in {_when(existing)}) and {why}: kept the one already "
                                  f"there; collect with --allow-older (make grade ALLOW_OLDER=1) to replace it"))
        collected.append(dict(incoming, student=student, notebook=notebook, sha256=sha256, outcome=outcome))
    return notes, collected, refused


def _recorded_time(folder):
    """The time `.lms.json` records for the notebook in `folder` (a course collected before it had a history)."""
    import json

    try:
        with open(os.path.join(folder, LMS_RECORD), encoding="utf-8") as f:
            when = json.load(f).get("timestamp")
    except (OSError, ValueError, AttributeError):
        when = None
    return {"lms_time": when if isinstance(when, str) else None, "lms_order": None}


def _when(handed_in):
    if (handed_in or {}).get("lms_time"):
        return f"at {handed_in['lms_time']}"
    if (handed_in or {}).get("lms_order") is not None:
        return f"as Canvas upload {handed_in['lms_order']}"
    return "at a time the LMS does not give"


def _read_refused(refused, students, coursedir, lesson):
    """{path: bytes} of the refused notebooks of students whose other notebooks are collected now."""
    saved = {}
    for student, file_id in refused:
        dest = os.path.join(coursedir.format_path(coursedir.submitted_directory, student, lesson), file_id)
        if student in students and os.path.isfile(dest):
            with open(dest, "rb") as f:
                saved[dest] = f.read()
    return saved


def check_submitted(submitted, lesson, released):
    """Notes on an already collected submitted/<student>/<lesson>/ tree; nothing is changed."""
    notes = []
    for student in sorted(os.listdir(submitted)):
        home = os.path.join(submitted, student)
        if os.path.islink(home):
            notes.append(note(student, "unsafe path", f"submitted/{student} is a symbolic link"))
            continue
        if not os.path.isdir(home):
            notes.append(note("", "unexpected file name", f"submitted/{student} is a file, not a student's folder"))
            continue
        folder = os.path.join(home, lesson)
        if not os.path.isdir(folder):
            continue  # this student has not handed in this lesson
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            rel = f"submitted/{student}/{lesson}/{name}"
            if os.path.islink(path):
                notes.append(note(student, "unsafe path", f"{rel} is a symbolic link: move the real file there"))
            elif os.path.isdir(path):
                if not _ignored([name]):
                    notes.append(note(student, "nested folder", f"{rel}/ is a folder; only notebooks directly in "
                                                                f"{lesson}/ are graded"))
            elif name == "timestamp.txt" or name.startswith("."):
                continue
            elif not name.endswith(".ipynb"):
                notes.append(note(student, "not a notebook", f"{rel}; not graded"))
            elif released and os.path.splitext(name)[0] not in released:
                notes.append(note(student, "unexpected file name",
                                  f"{rel}: {lesson} has no notebook of that name "
                                  f"(expected {', '.join(f'{n}.ipynb' for n in sorted(released))})"))
    return notes
