"""Writing generated reports that end in hand-written notes."""
import os


def write_keeping_notes(path, lines, mark):
    """Write `lines` (the last of which is `mark`) to `path`, keeping whatever
    followed `mark` in the file already there: the hand-written analysis."""
    assert lines and lines[-1] == mark, "the generated part ends with the notes marker"
    notes = "\n"
    if os.path.exists(path):
        old = open(path).read()
        if mark in old:
            notes = old.split(mark, 1)[1]
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + notes)
