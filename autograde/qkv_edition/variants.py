"""The term's self-check variants in the student edition (issue 43): `make student-edition` copies the salt, the
lessons and the key's label and pattern from c.Variants (autograde/nbgrader_config.py) into the edition's
qkv/your_numbers/config.json, and locks the pools the students will see in autograde/variants.lock.json, which
`make grade` checks. With variants off (no salt) the edition's config.json names no lesson, and no lock is
written."""
import json

from traitlets.config.loader import PyFileConfigLoader

from qkv import your_numbers


def term_variants(root):
    """{salt, lessons, key_label, key_pattern} of c.Variants in the course's nbgrader_config.py ({} when off)."""
    config = PyFileConfigLoader("nbgrader_config.py", path=str(root / "autograde")).load_config()
    section = config.get("Variants", {})
    salt = str(section.get("salt", "")).strip()
    if not salt:
        return {}
    return {"salt": salt, "lessons": list(section.get("lessons", [])),
            "key_label": str(section.get("key_label", "your university login")),
            "key_pattern": str(section.get("key_pattern", ""))}


def carry(stage, root):
    """The edition's config.json (with variants off: no lesson varies, so every key shows the canonical numbers the
    lessons are graded on), and the course's lock of the pools."""
    settings = term_variants(root)
    (stage / "source_lib" / "qkv" / "your_numbers" / "config.json").write_text(
        json.dumps(settings or {"salt": "", "lessons": []}, indent=1) + "\n")
    if not settings:
        return
    lock = your_numbers.pools_lock(settings["salt"])
    (root / "autograde" / "variants.lock.json").write_text(json.dumps(lock, indent=1, sort_keys=True) + "\n")
