"""What a resumed run keeps of its verdicts.jsonl, on hand-written files: complete cases only, their
lines where they lie, nothing of a torn or half-written case. Pure and fast (no benchmark, no
model): the tests bench/mutation.py runs against the resume functions of tracebench/run/_harness.py."""

from __future__ import annotations

import pytest

from tracebench.errors import TraceError
from tracebench.jsonfiles import record_line
from tracebench.records import Verdict, Vote
from tracebench.run._harness import _existing, _id_hash, _keep_only, _question_digest
from tracebench.run._schedule import Lines


def digest(question_ids) -> tuple[int, int]:
    """What a case's verdicts of one sample must match: its questions' count and digest."""
    return _question_digest((q, 0) for q in question_ids)

ANSWERED = {"verdict": "pass", "value": 1.0}


def verdict(case_id: str, question_id: str, status: str = "pass") -> Verdict:
    value = {"pass": 1.0, "fail": 0.0, "abstain": None}[status]
    vote = Vote(judge="oracle", verdict=status, value=value, answer=None if status == "abstain" else "yes",
                reason="no reply" if status == "abstain" else "as drawn")
    return Verdict(case_id=case_id, question_id=question_id, op="anchor", verdict=status, value=value, judge="oracle",
                   votes=(vote,))


def lines(*verdicts: Verdict) -> list[bytes]:
    return [record_line(v).encode() for v in verdicts]


def write(folder, chunks: list[bytes], tail: bytes = b"") -> bytes:
    data = b"".join(chunks) + tail
    (folder / "verdicts.jsonl").write_bytes(data)
    return data


CHECKLISTS = {"a": digest(["a1", "a2"]), "b": digest(["b1", "b2", "b3"]),
              "c": digest(["c1", "c2"])}


def test_the_question_digest_counts_and_ignores_order():
    assert _question_digest([("x", 1), ("x", 0)]) != _question_digest([("x", 0), ("x", 0)])  # samples told apart
    assert digest(["x", "y", "z"]) == digest(["z", "x", "y"])
    assert digest(["x", "y"])[0] == 2 and digest([]) == (0, 0)
    assert digest(["x", "y"]) != digest(["x", "z"])
    assert digest(["x", "y"])[1] != digest(["x"])[1]


def test_lines_merge_touching_spans_and_count():
    kept = Lines()
    kept.add(0, 10, _id_hash(("q1", 0)), True)
    kept.add(10, 25, _id_hash(("q2", 0)), False)
    kept.add(30, 40, _id_hash(("q3", 0)), True)
    assert kept.spans == [(0, 25), (30, 40)] and kept.verdicts == 3 and kept.abstained == 1
    assert (kept.verdicts, kept.digest) == digest(["q3", "q1", "q2"])


def test_complete_cases_are_kept_where_they_lie_and_a_half_written_one_is_not(tmp_path):
    chunks = lines(verdict("a", "a1"), verdict("a", "a2"), verdict("b", "b1"), verdict("b", "b2", "abstain"),
                   verdict("b", "b3"), verdict("c", "c1"))  # c: killed after its first line
    write(tmp_path, chunks)
    found = _existing(tmp_path, CHECKLISTS, retry_abstained=False)
    ends = [sum(map(len, chunks[:k])) for k in range(len(chunks) + 1)]
    assert list(found) == ["a", "b"]
    assert found["a"].spans == [(ends[0], ends[2])] and found["b"].spans == [(ends[2], ends[5])]
    assert (found["b"].verdicts, found["b"].abstained) == (3, 1)
    # --retry-abstained: a case with an abstention is asked again
    assert list(_existing(tmp_path, CHECKLISTS, retry_abstained=True)) == ["a"]


def test_a_torn_last_line_is_dropped_and_a_broken_line_elsewhere_is_an_error(tmp_path):
    chunks = lines(verdict("a", "a1"), verdict("a", "a2"), verdict("c", "c1"), verdict("c", "c2"))
    torn = chunks[-1][: len(chunks[-1]) // 2]
    write(tmp_path, chunks[:-1], torn)
    assert list(_existing(tmp_path, CHECKLISTS, retry_abstained=False)) == ["a"]
    write(tmp_path, [chunks[0], b'{"case_id": "a", "broken\n', *chunks[1:]])
    with pytest.raises(TraceError, match=r"verdicts\.jsonl:2"):
        _existing(tmp_path, CHECKLISTS, retry_abstained=False)


def test_a_question_twice_in_a_case_is_an_error_and_another_checklist_is_not_kept(tmp_path):
    write(tmp_path, lines(verdict("a", "a1"), verdict("a", "a1")))
    with pytest.raises(TraceError, match=r"verdicts\.jsonl:2: question_id: case 'a' question 'a1' appears twice "
                                         r"\(first on line 1\)"):
        _existing(tmp_path, CHECKLISTS, retry_abstained=False)
    write(tmp_path, lines(verdict("a", "a1"), verdict("a", "a3"), verdict("d", "d1")))  # other ids; a case not asked
    assert _existing(tmp_path, CHECKLISTS, retry_abstained=False) == {}
    assert _existing(tmp_path / "nowhere", CHECKLISTS, retry_abstained=False) == {}


def test_keep_only_rewrites_the_kept_lines_in_order_and_points_at_them(tmp_path):
    chunks = lines(verdict("c", "c1"), verdict("a", "a1"), verdict("a", "a2"), verdict("b", "b1"),
                   verdict("b", "b2"), verdict("b", "b3"))
    write(tmp_path, chunks)
    found = _existing(tmp_path, CHECKLISTS, retry_abstained=False)
    assert list(found) == ["a", "b"]
    _keep_only(tmp_path / "verdicts.jsonl", found)
    kept = b"".join(chunks[1:])
    assert (tmp_path / "verdicts.jsonl").read_bytes() == kept
    a = len(chunks[1]) + len(chunks[2])
    assert found["a"].spans == [(0, a)] and found["b"].spans == [(a, len(kept))]
    reordered = {"b": found["b"], "a": found["a"]}
    _keep_only(tmp_path / "verdicts.jsonl", reordered)
    assert (tmp_path / "verdicts.jsonl").read_bytes() == b"".join(chunks[3:]) + b"".join(chunks[1:3])
    assert found["b"].spans == [(0, len(kept) - a)] and found["a"].spans == [(len(kept) - a, len(kept))]
    _keep_only(tmp_path / "new.jsonl", {})
    assert (tmp_path / "new.jsonl").read_bytes() == b""


def test_cases_share_question_ids_and_a_case_split_in_two_is_redone(tmp_path):
    """Question ids repeat across cases ("f1:existence" in each); a case whose lines are not together
    and repeat a question (a file edited by hand) is not complete: it is run again, no error."""
    checklists = {c: digest(["f1:existence", "f1:identity"]) for c in ("a", "b", "c")}
    chunks = lines(verdict("a", "f1:existence"), verdict("a", "f1:identity"), verdict("b", "f1:existence"),
                   verdict("c", "f1:existence"), verdict("c", "f1:identity"), verdict("b", "f1:existence"))
    write(tmp_path, chunks)
    found = _existing(tmp_path, checklists, retry_abstained=False)
    assert list(found) == ["a", "c"]
    # three kept cases: each points at its own new place
    write(tmp_path, lines(verdict("a", "f1:existence"), verdict("a", "f1:identity"), verdict("x", "f1:existence"),
                          verdict("b", "f1:existence"), verdict("b", "f1:identity"),
                          verdict("c", "f1:existence"), verdict("c", "f1:identity")))
    found = _existing(tmp_path, checklists, retry_abstained=False)
    _keep_only(tmp_path / "verdicts.jsonl", found)
    data = (tmp_path / "verdicts.jsonl").read_bytes()
    for case_id, kept in found.items():
        (start, end), = kept.spans
        assert [Verdict.model_validate_json(line).case_id for line in data[start:end].splitlines()] == [case_id] * 2
    assert found["c"].spans[0][1] == len(data)


def test_an_ensemble_member_s_silent_vote_is_kept_on_resume_and_asked_again_on_retry(tmp_path):
    def two_votes(case_id: str, question_id: str, second: str) -> Verdict:
        one = verdict(case_id, question_id)
        silent = Vote(judge="python:terse", verdict=second, value=None if second == "abstain" else 1.0,
                      answer=None if second == "abstain" else "yes", reason="no answer for this question")
        return one.model_copy(update={"judge": "oracle+python:terse", "votes": (*one.votes, silent)})

    write(tmp_path, lines(two_votes("a", "a1", "pass"), two_votes("a", "a2", "abstain"),
                          two_votes("c", "c1", "pass"), two_votes("c", "c2", "pass")))
    kept = _existing(tmp_path, CHECKLISTS, retry_abstained=False)
    assert list(kept) == ["a", "c"] and kept["a"].abstained == 0
    assert kept["a"].votes_abstained == {"python:terse": 1} and kept["c"].votes_abstained is None
    assert list(_existing(tmp_path, CHECKLISTS, retry_abstained=True)) == ["c"]
