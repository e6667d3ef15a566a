"""The result journal (journal=PATH): fingerprints, the files on disk, the command, two runs."""

from __future__ import annotations

import functools
import pickle
import subprocess
import sys
import threading
import typing

import pytest
from helpers import JOBS, hpcfutures_run, run_job

import hpcfutures
from hpcfutures._cli import main as cli_main
from hpcfutures._facade.resuming.fingerprints import function_digest
from hpcfutures._facade.resuming.journal import Journal, open_journal
from hpcfutures._support.journal_files import JournalReader, journal_stats


def now(callback):
    callback()


def key(fn, *args, **kwargs):
    return Journal._key_with(_keyer, function_digest(fn), args, kwargs)


class _Keyer:
    """Just enough of a Journal to compute keys, without a directory."""

    def _stand_in(self, future):
        raise AssertionError("no futures here")


_keyer = _Keyer()


# ------------------------------------------------------------- fingerprints
def _compile(source: str, name: str = "f", **module_globals):
    namespace = {"__name__": "jobs", **module_globals}
    exec(compile(source, "<job>", "exec"), namespace)
    return namespace[name]


def test_same_code_same_key_and_each_change_a_new_key():
    plain = "def f(x, y=2):\n    return x * y + 1\n"
    same = _compile("# a comment moves it down a line\n\n" + plain)
    assert key(_compile(plain), 3) == key(same, 3)
    assert key(_compile(plain), 3) != key(_compile(plain), 4)  # argument
    assert key(_compile(plain), 3) != key(_compile(plain), 3, y=5)  # keyword argument
    assert key(_compile(plain), 3) != key(_compile(plain.replace("+ 1", "+ 2")), 3)  # body
    assert key(_compile(plain), 3) != key(_compile(plain.replace("y=2", "y=3")), 3)  # default
    assert key(_compile(plain), 3) != key(_compile(plain.replace("def f", "def g"), "g"), 3)


def test_closure_values_helpers_and_partials_are_covered():
    def make(scale):
        def scaled(x):
            return x * scale
        return scaled

    assert key(make(2), 1) == key(make(2), 1)
    assert key(make(2), 1) != key(make(3), 1)  # closure value
    helper = "def helper(x):\n    return x + {n}\n\ndef f(x):\n    return helper(x)\n"
    assert key(_compile(helper.format(n=1)), 1) != key(_compile(helper.format(n=2)), 1)
    constant = "def f(x):\n    return x * SCALE\n"
    assert key(_compile(constant, SCALE=2), 1) != key(_compile(constant, SCALE=3), 1)
    assert (key(functools.partial(pow, 2), 3) != key(functools.partial(pow, 3), 3)
            != key(pow, 2, 3))
    assert key({1: 2}.get, 1) != key({1: 3}.get, 1)  # a built-in method's object


def test_keys_do_not_depend_on_string_hashing():
    """A frozenset constant (``x in {"a", "b"}``) iterates in a per-process order."""
    script = ("import sys; sys.path[:0] = sys.argv[1:]\n"
              "from hpcfutures._facade.resuming.fingerprints import function_digest\n"
              "def f(x):\n    return x in {'alpha', 'beta', 'gamma', 'delta'}\n"
              "print(function_digest(f).hex())\n")
    digests = {subprocess.run([sys.executable, "-c", script, *sys.path], check=True,
                              capture_output=True, text=True,
                              env={"PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(digests) == 1


# --------------------------------------------------------------- the files
def _journal(tmp_path, values=range(10), fn=abs, journal=None, chunk=3):
    """Record ``fn`` over ``values`` as a map would: a record per chunk of results."""
    journal = journal or Journal(tmp_path, now)
    _, missing, keys = journal.split_map(fn, [(v,) for v in values])
    for start in range(0, len(missing), chunk):
        journal.record_values(keys, start, [fn(*item) for item in missing[start:start + chunk]],
                              "abs")
    assert journal.close().startswith(f"hpcfutures: resumed 0 of {len(values)} calls")
    return journal


def _resumed(tmp_path, values=range(10), fn=abs):
    journal = Journal(tmp_path, now)
    found, missing, _ = journal.split_map(fn, [(v,) for v in values])
    recorded = [v for v, entry in zip(values, found, strict=True) if entry is not None]
    journal.close()  # results are still there after the executor's end (map's lazy iterator)
    assert [pickle.loads(journal.payload(*e)) for e in found if e is not None] == [
        fn(v) for v in recorded]
    return recorded, [m[0] for m in missing]


def test_a_rerun_finds_every_result_and_a_torn_write_is_recomputed(tmp_path):
    _journal(tmp_path, range(-5, 5))  # records of 3, 3, 3 and 1 results
    assert _resumed(tmp_path, range(-5, 5)) == (list(range(-5, 5)), [])
    segment, = tmp_path.iterdir()
    data = segment.read_bytes()
    segment.write_bytes(data[:-3])  # killed in the middle of the last record
    assert _resumed(tmp_path, range(-5, 5)) == (list(range(-5, 4)), [4])
    segment.write_bytes(data[:-100])  # ... or of the last two
    assert _resumed(tmp_path, range(-5, 5)) == (list(range(-5, 1)), [1, 2, 3, 4])
    garbled = bytearray(data)
    garbled[len(data) // 2] ^= 0xFF  # a flipped byte: its record and those after it
    segment.write_bytes(bytes(garbled))
    recorded, missing = _resumed(tmp_path, range(-5, 5))
    assert recorded == list(range(-5, -5 + len(recorded))) and len(missing) >= 1
    assert journal_stats(tmp_path).damaged


def test_concurrent_writers_each_keep_their_own_segment(tmp_path):
    journals = [Journal(tmp_path, now) for _ in range(2)]  # both open before either writes
    threads = [threading.Thread(target=_journal, args=(tmp_path, range(start, start + 500)),
                                kwargs={"journal": journal, "chunk": 7})
               for start, journal in zip((0, 250), journals, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(list(tmp_path.iterdir())) == 2
    assert journal_stats(tmp_path).calls == 750
    assert _resumed(tmp_path, range(750))[1] == []


def test_unpicklable_results_and_exceptions_are_not_recorded(tmp_path, caplog):
    journal = Journal(tmp_path, now)
    lock = threading.Lock()
    journal.record(b"k" * 32, "make_lock", lock)
    journal.record(b"l" * 32, "make_lock", lock)
    assert [r.getMessage().count("cannot be pickled") for r in caplog.records] == [1]
    assert journal.recorded_count() == 0
    method = threading.Lock().acquire  # bound to an object that cannot be pickled
    assert journal.key(method, (), {}) is None and "cannot be fingerprinted" in caplog.text
    assert "2 not journaled" in journal.close()
    assert list(tmp_path.iterdir()) == []  # an empty segment is removed


def test_an_unusable_path_names_itself_and_the_fix(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(hpcfutures.ConfigurationError, match="HPCFUTURES_JOURNAL") as caught:
        open_journal(str(blocker / "{user}"), {"user": "me"}, now)
    assert str(blocker / "me") in str(caught.value)
    with pytest.raises(hpcfutures.ConfigurationError, match="unknown field"):
        open_journal(str(tmp_path / "{nope}"), {"user": "me"}, now)


def test_the_journal_command_lists_and_clears(tmp_path, capsys):
    _journal(tmp_path, range(7), abs)
    assert cli_main(["journal", str(tmp_path)]) == 0
    listing = capsys.readouterr().out
    assert "7 recorded" in listing and "abs" in listing and "size:" in listing
    assert cli_main(["journal", "--clear", str(tmp_path)]) == 0
    assert "cleared" in capsys.readouterr().out
    assert journal_stats(tmp_path).calls == 0
    assert cli_main(["journal", str(tmp_path / "none")]) == 1


# ------------------------------------------------------------ two real runs
@pytest.mark.timeout(240)
def test_a_second_run_resumes_from_the_first(tmp_path):
    """The laptop default records; a run under hpcfutures run resumes all but the failure."""
    journal, markers = tmp_path / "journal", tmp_path / "markers"
    markers.mkdir()
    first = run_job([sys.executable, JOBS / "journal_job.py", journal, markers, "first"],
                    timeout=120)
    assert first.returncode == 0
    assert "UNWRITABLE refused True" in first.stdout
    assert "resumed 0 of 36 calls from the journal" in first.stderr
    names = {path.name for path in markers.glob("*-*-*")}
    ran = {name.rsplit("-", 1)[0] for name in names}
    assert ran == {f"square-{x}" for x in [*range(30), 100]} | {"fails-1"}
    second = hpcfutures_run(3, JOBS / "journal_job.py", journal, markers, "second",
                            timeout=120)
    assert second.returncode == 0
    assert "AS_COMPLETED [0, 1, 4] rank 1" in second.stdout  # the client rank of the launch
    for line in ("AT ONCE", "MAP True", "DEPENDENT 10001", "FAILS ValueError",
                 "AS_COMPLETED [0, 1, 4]"):
        assert line in first.stdout and line in second.stdout
    assert "AT ONCE True" in second.stdout  # a recorded call's future is done at once
    assert "resumed 35 of 36 calls from the journal" in second.stderr
    ran_again = [path.name.rsplit("-", 1)[0] for path in markers.glob("*-*-*")
                 if path.name not in names]
    assert ran_again == ["fails-1"]  # exceptions are never recorded: only it ran again


def _mark_and_negate(x, folder):
    import pathlib
    import uuid

    pathlib.Path(folder, f"{x}-{uuid.uuid4().hex}").touch()
    return -x


@pytest.mark.timeout(120)
def test_a_lazy_map_records_and_resumes_window_by_window(tmp_path):
    """``map(..., buffersize=)`` with a journal reads its input a window at a time,
    and a second run finds every result the first recorded."""
    markers = tmp_path / "markers"
    markers.mkdir()
    for run in range(2):
        with hpcfutures.LocalExecutor(1, journal=str(tmp_path / "journal")) as ex:
            results = ex.map(_mark_and_negate, iter(range(12)), [str(markers)] * 12,
                             buffersize=5)
            assert list(results) == [-x for x in range(12)], run
    ran = sorted(int(path.name.split("-")[0]) for path in markers.iterdir())
    assert ran == list(range(12))  # each call once: the second run resumed them all


def test_a_lazy_map_whose_input_breaks_runs_every_item_read_first_as_without_a_journal(
        tmp_path):
    """The input raises after 12 items, read 5 at a time: the 12 results come, then
    the error, with a journal as without one (the journal's windows lost the two
    items read before the error)."""
    def broken():
        yield from range(12)
        raise LookupError("the input broke")

    for journal in (None, str(tmp_path / "journal")):
        seen = []
        with hpcfutures.LocalExecutor(1, journal=journal) as ex:
            with pytest.raises(LookupError, match="the input broke"):
                for value in ex.map(abs, broken(), buffersize=5):
                    seen.append(value)
        assert seen == list(range(12)), (journal, seen)


# ------------------------------------------------------- at 10^7 entries (issue 26)
class _Noted:
    """A result that notes the thread pickling it, and whether its gate was open then."""

    threads: typing.ClassVar[list] = []
    handed = threading.Event()

    def __init__(self, value, gates=None):
        self.value, self.gates = value, gates

    def __reduce__(self):
        gate = None
        if self.gates is not None:
            assert _Noted.handed.wait(30)  # the test holds the gate now
            gate = self.gates[0]
        _Noted.threads.append((threading.current_thread().name,
                               None if gate is None else gate.is_set()))
        return _Noted, (self.value,)


def test_map_results_are_pickled_and_written_by_the_writer_thread(tmp_path):
    """Pickling, writing and fsyncing a map chunk happen on the journal's own thread,
    not on the caller's (the client's event loop, in a run); the chunk's gate opens
    once its results are pickled, and the map yields them only after."""
    journal = Journal(tmp_path, now)
    _, _, keys = journal.split_map(abs, [(v,) for v in range(4)])
    gates: list = []
    _Noted.threads = []
    gates.append(journal.record_values(keys, 0, [_Noted(v, gates) for v in range(4)], "abs"))
    _Noted.handed.set()
    assert gates[0].wait(30)
    journal.close()
    assert _Noted.threads == [("hpcfutures-journal", False)] * 4
    rerun = Journal(tmp_path, now)
    found, missing, _ = rerun.split_map(abs, [(v,) for v in range(4)])
    assert not missing and [pickle.loads(rerun.payload(*e)).value for e in found] == [0, 1, 2, 3]
    rerun.close()


def _keys_of(tmp_path, fn, values):
    """The keys a map of ``fn`` over ``values`` looks up."""
    journal = Journal(tmp_path, now)
    keys = journal.map_keys(fn)([(v,) for v in values])
    journal.close()  # nothing recorded: its segment is removed
    return keys


def _entries(tmp_path, count, per_record):
    """A journal of ``count`` results of ``abs`` over range(count), written directly."""
    from hpcfutures._support.journal_files import encode_record

    keys = _keys_of(tmp_path, abs, range(count))
    segment = tmp_path / "direct.hpj"
    with open(segment, "wb") as file:
        for start in range(0, count, per_record):
            file.write(encode_record("abs", [(key, pickle.dumps(start + n)) for n, key in
                                             enumerate(keys[start:start + per_record])]))
    return keys


def test_the_index_holds_little_per_call(tmp_path):
    """A rerun of the same map finds every call without an object per call (the cursor);
    the full index, built after a few keys the records do not lead to, stays under 150
    bytes a call (the dict of key bytes to tuples it replaces held 253)."""
    import tracemalloc

    count = 100_000
    keys = _entries(tmp_path, count, per_record=1000)
    reader = JournalReader(tmp_path)
    tracemalloc.start()
    try:
        starts, stops = reader.index.locate(keys)
        in_order = tracemalloc.get_traced_memory()[1]
        assert starts.count(-1) == 0 and reader.index._full is None
        assert [pickle.loads(reader.payload(starts[n], stops[n])) for n in (0, 999, 99_999)] \
            == [0, 999, 99_999]
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        reader.index.build()  # as after a few keys that are not recorded
        full = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert in_order < 24 * count, in_order  # the two arrays of places, and nothing per call
    assert reader.index._full is not None and full < 150 * count, full / count  # 120 here
    shuffled = keys[::-1]
    starts, _ = reader.index.locate(shuffled)
    assert starts.count(-1) == 0
    reader.close()


def test_calls_recorded_twice_do_not_need_the_full_index(tmp_path):
    """A run that computed calls again recorded them twice (here 0-9 alone, then 0-99
    in one chunk): after 9 the cursor is on the wrong copy, and 10 is inside a record;
    one search of the segment's bytes finds it, and the cursor follows from there."""
    from hpcfutures._support.journal_files import encode_record
    from hpcfutures._support.journal_index import SEARCHES

    keys = _keys_of(tmp_path, abs, range(100))
    (tmp_path / "twice.hpj").write_bytes(
        b"".join(encode_record("abs", [(key, pickle.dumps(v))]) for v, key in
                 enumerate(keys[:10]))
        + encode_record("abs", [(key, pickle.dumps(v)) for v, key in enumerate(keys)]))
    reader = JournalReader(tmp_path)
    starts, stops = reader.index.locate(keys)
    assert [pickle.loads(reader.payload(a, b)) for a, b in zip(starts, stops, strict=True)] \
        == list(range(100))
    assert reader.index._full is None and reader.index._searches == 1
    assert reader.find(b"\2" * 32) is None and reader.index._searches == 2  # searched: absent
    for _ in range(SEARCHES):  # many keys not recorded: the full index answers them
        assert reader.find(b"\3" * 32) is None
    assert reader.index._full is not None and reader.index._searches == SEARCHES
    reader.close()


def test_each_map_keeps_its_own_cursor(tmp_path):
    """Lookups of a submit (or another map) between two windows of a map do not move
    the map's cursor: its next window needs no search."""
    from hpcfutures._support.journal_files import encode_record
    from hpcfutures._support.journal_index import Cursor

    keys = _keys_of(tmp_path, abs, range(100))
    (tmp_path / "one.hpj").write_bytes(
        encode_record("abs", [(key, pickle.dumps(v)) for v, key in enumerate(keys)]))
    index, mine = JournalReader(tmp_path).index, Cursor()
    assert index.locate(keys[:50], mine)[0].count(-1) == 0
    assert index.locate(keys[80:90])[0].count(-1) == 0  # the index's own: one search
    searched = index._searches
    assert index.locate(keys[50:], mine)[0].count(-1) == 0
    assert index._searches == searched == 1 and index._full is None


def test_keys_that_share_their_first_bits_are_told_apart(tmp_path):
    from hpcfutures._support.journal_files import encode_record

    twins = [b"same8bit" + bytes([n]) * 24 for n in range(3)]
    (tmp_path / "twins.hpj").write_bytes(b"".join(
        encode_record("f", [(key, pickle.dumps(n))]) for n, key in enumerate(twins[:2])))
    reader = JournalReader(tmp_path)
    reader.index.build()
    assert reader.find(twins[2]) is None
    assert [pickle.loads(reader.payload(*reader.find(key))) for key in twins[:2]] == [0, 1]
    assert journal_stats(tmp_path).calls == 2
    reader.close()


class _Held:
    """A map item whose fingerprint (its pickling) waits until ``release`` is set."""

    release = threading.Event()

    def __init__(self, value):
        self.value = value

    def __reduce__(self):
        _Held.release.wait(60)
        return _Held, (self.value,)


def _value_of(item):
    return item.value if isinstance(item, _Held) else item


def test_a_rerun_yields_its_first_result_before_the_whole_map_is_looked_up(tmp_path):
    """The items are looked up a window at a time on a thread of their own: the first
    result comes while a later window's fingerprint cannot be computed yet."""
    from hpcfutures._facade.resuming.journal_maps import WINDOW, MapLookup

    values = [*range(WINDOW), _Held(WINDOW)]
    items = [(v,) for v in values]
    _Held.release.set()
    _journal(tmp_path, values, fn=_value_of, chunk=4096)
    _Held.release.clear()
    journal = Journal(tmp_path, now)
    lookup = MapLookup(journal, _value_of, items)
    fed: list = []
    lookup.start(lambda items, places: fed.append(places), lambda: fed.append("end"))
    results = lookup.results((value for value in ()), None)
    try:
        assert next(results) == 0 and "end" not in fed  # the last window still waits
    finally:
        _Held.release.set()
    assert list(results) == list(range(1, WINDOW + 1)) and fed == ["end"]
    journal.close()


def test_items_fed_after_a_drain_count_as_refused():
    """A journaled map feeds its run as its windows are looked up; what comes after a
    time-limit drain is never sent, and counts for the requeue's decision."""
    from array import array

    from hpcfutures._facade.core.batching import Batcher
    from hpcfutures._facade.core.mapping import MapRun

    class Bridge:
        refused = 0

        def __init__(self):
            self.batcher = Batcher(lambda: 1)

        def wake(self):
            pass

    bridge = Bridge()
    run = MapRun(bridge, abs, [], 1, positions=array("q"), fed=True).start()
    assert not run.finished.is_set()  # items may still come
    bridge.batcher.drain()  # the engine drained; the run is told next
    run.feed([(1,), (2,)], [0, 1])
    error = hpcfutures.TimeLimitError("drained")
    run.drained([], error)
    run.feed([(3,)], [2])
    run.end_feed()
    assert bridge.refused == 3 and run.finished.is_set()
    with pytest.raises(hpcfutures.TimeLimitError):
        next(run.results(None))


def test_a_map_reads_results_from_every_segment_and_runs_the_rest(tmp_path):
    from hpcfutures._facade.resuming.journal_maps import MapLookup

    _journal(tmp_path, range(0, 40))
    _journal(tmp_path, range(60, 100))  # a second segment
    journal = Journal(tmp_path, now)
    lookup = MapLookup(journal, abs, [(v,) for v in range(-20, 100)])
    fed: list = []
    lookup.start(lambda items, places: fed.append((items, list(places))), lambda: None)
    run = (abs(item[0]) * 1000 for items, _ in fed for item in items)  # the 'workers'
    results = list(lookup.results(run, None))
    assert [(len(items), places[0]) for items, places in fed] == [(40, 0)]  # one window
    assert results == ([v * 1000 for v in range(20, 0, -1)] + list(range(40))
                       + [v * 1000 for v in range(40, 60)] + list(range(60, 100)))
    assert lookup.keys[:32] == journal.key(abs, (-20,), {})
    assert "resumed 80 of 120 calls" in journal.close()


def _mull(seconds, marker):
    import pathlib
    import time

    time.sleep(seconds)
    pathlib.Path(marker).touch()
    return seconds


@pytest.mark.timeout(120)
def test_a_journaled_maps_items_behind_a_slow_one_run_elsewhere_and_are_recorded(tmp_path):
    """A journal takes no results ahead of a chunk's end, but the word that its worker
    gave the items behind a slow one back still comes at once: they run on the free
    worker while the slow one runs, and every result is recorded (a rerun runs none)."""
    import os
    import time

    from pace import scaled
    from waiting import wait_until

    journal = tmp_path / "journal"
    markers = [str(tmp_path / str(index)) for index in range(21)]
    seconds = [scaled(2)] + [0] * 20
    with hpcfutures.Executor(2, journal=journal) as ex:
        wait_until(lambda: len(ex.worker_memory_limits()) == 2, 30, "the second worker")
        list(ex.map(_mull, [0] * 200, [str(tmp_path / "warm-up")] * 200))  # measured short
        started = time.time()
        assert list(ex.map(_mull, seconds, markers)) == seconds
    late = {index: round(os.path.getmtime(marker) - started, 2)
            for index, marker in enumerate(markers)
            if index and os.path.getmtime(marker) - started > scaled(1.2)}
    assert not late, f"items behind the slow one, by index, done after (s): {late}"
    for marker in markers:
        os.remove(marker)
    with hpcfutures.Executor(2, journal=journal) as ex:
        assert list(ex.map(_mull, seconds, markers)) == seconds
    assert not any(os.path.exists(marker) for marker in markers), "a recorded call ran again"
