"""nbgrader's ExtractorPlugin for LMS exports, `zip_collect`'s first step (lms_export.py drives it; nbgrader keeps its
plugins apart from its apps the same way).

`SafeExtractor` (an nbgrader ExtractorPlugin) unpacks archives without ever writing outside the course: an entry
named with `../`, an absolute path, a drive letter or a symlink is refused; zips inside the zip are unpacked
into a folder named after them (nbgrader's own layout), three levels deep at most, with a cap on bytes.
"""
import datetime
import os
import re
import shutil
import stat
import zipfile

from nbgrader.plugins import ExtractorPlugin
from traitlets import Integer

from qkv_autograde.intake.lms_names import lms_entry, note

ARCHIVES = (".zip",)
# what operating systems and Jupyter add to a folder; a student folder starting with a dot is NOT ignored here
# (the grader refuses it with a reason, see submissions.py)
IGNORED_PARTS = ("__MACOSX", ".ipynb_checkpoints", "__pycache__", ".DS_Store", ".git", "Thumbs.db", "desktop.ini")
MAX_DEPTH = 3                # a zip in a zip in a zip
MAX_BYTES = 2 << 30          # everything one export may unpack to
MAX_ENTRY_BYTES = 256 << 20  # one notebook with outputs is a few MB


def _safe_name(name):
    """The entry's path parts when it stays inside the folder it is unpacked into, else None."""
    name = name.replace("\\", "/")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name) or "\x00" in name:
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return None
    return parts


def is_inside(path, root):
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top + os.sep)


def is_ignored(parts):
    return any(p in IGNORED_PARTS or p.startswith("._") for p in parts)  # ._name: macOS's AppleDouble shadow


class SafeExtractor(ExtractorPlugin):
    """nbgrader's extractor, refusing every entry that would land outside the folder it is unpacked into.

    A zip given as the source is unpacked into `extracted/` directly (so a notebook at its top has no folder that
    could be mistaken for a student); a zip inside it, or in a folder given as the source, into a folder named
    after that zip, as nbgrader does (a student's uploaded `alice_1_2_work.zip` keeps the name that says whose).

    `archives`: the folders whose entries are an export's top-level names: extracted/ itself, and the folders made
    from zips there that are exports themselves (no LMS name: `section2.zip`, the zips of nbgrader's archive/).
    `dates`: each file's date as the LMS wrote it: inside a student's upload, the date of the upload's own entry,
    never the dates the student's zip claims.
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
                    self.unzip(path, folder, rel, depth=1, inherited=stamp if owned else None)
                elif not os.path.islink(path) and os.path.isfile(path):
                    os.makedirs(target, exist_ok=True)
                    shutil.copy2(path, os.path.join(target, name))
        for entry in self.notes:  # collect() reports these by name; the stock command only has its log
            self.log.warning("%s: %s", entry["name"], entry["detail"])

    def unzip(self, path, target, shown, depth, inherited=None):
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
            self.notes.append(note("", "unsafe path",
                                   f"{where} points outside the folder it is unpacked into; skipped"))
            return
        if stat.S_ISLNK(info.external_attr >> 16):
            self.notes.append(note("", "unsafe path", f"{where} is a symbolic link; skipped"))
            return
        if info.is_dir() or not parts or is_ignored(parts):
            return
        if info.file_size > MAX_ENTRY_BYTES or self.unpacked + info.file_size > self.max_bytes:
            self.notes.append(note("", "too large", f"{where}: {info.file_size} bytes; skipped"))
            return
        dest = os.path.join(target, *parts)
        if not is_inside(os.path.dirname(dest), target) and os.path.exists(os.path.dirname(dest)):
            self.notes.append(note("", "unsafe path", f"{where} would be written through a link; skipped"))
            return
        try:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if not is_inside(dest, target) or os.path.islink(dest):
                self.notes.append(note("", "unsafe path", f"{where} would be written outside the course; skipped"))
                return
            date = datetime.datetime(*info.date_time)
            if inherited is None and os.path.realpath(target) in self.archives and lms_entry(parts[0])[0]:
                inherited = date  # this entry is a student's: whatever lies below it is dated by it
            date = inherited or date
            if os.path.exists(dest):  # the same name twice in one zip: keep the newer entry
                if date <= self.dates.get(dest, datetime.datetime.min):
                    self.notes.append(note("", "duplicate entry",
                                           f"{where}: an older copy of a name already unpacked; skipped"))
                    return
                self.notes.append(note("", "duplicate entry",
                                       f"{where}: a newer copy replaced the one unpacked before"))
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
                self.unzip(dest, inner, where, depth + 1, inherited)
            os.remove(dest)
