"""grader/atomic_write.py: a reader, or a grader killed half-way, never sees half a file."""
import json
import stat

import pytest

from grader.atomic_write import write_atomically, write_json


def test_a_file_is_replaced_whole_and_its_folder_made(tmp_path):
    target = tmp_path / "out" / "student" / "result.json"
    write_json(target, {"score": 1})
    write_json(target, {"score": 2}, mode=0o640)
    assert json.loads(target.read_text()) == {"score": 2}
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert [p.name for p in target.parent.iterdir()] == ["result.json"]   # no temporary file left


def test_what_cannot_be_written_leaves_the_old_file_as_it_was(tmp_path):
    target = tmp_path / "result.json"
    write_json(target, {"score": 1})
    with pytest.raises(ValueError):   # NaN is not JSON: refused before anything is written
        write_json(target, {"score": float("nan")})
    assert json.loads(target.read_text()) == {"score": 1}
    with pytest.raises(UnicodeEncodeError):   # a lone surrogate cannot be encoded: the temporary file fails
        write_atomically(target, "\ud800")
    assert json.loads(target.read_text()) == {"score": 1}
