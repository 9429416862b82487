"""One writer per run folder (issue 57 rows W1, W2): real `rlaif-gym rollout` and `rlaif-gym eval` processes on one
folder. The first is frozen (SIGSTOP) once it has started writing, so the second meets it mid-run every time; the
second must be refused at once (exit 2, one line naming the first's pid, command line and the fix) and change
nothing, the first then finishes as if alone, and a SIGKILLed writer leaves no lock behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX signals (SIGSTOP, SIGKILL)")


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "rlaif_gym", *args]


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(_cli(*args), cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return None


def _start_and_freeze(args: list[str], written: Path) -> subprocess.Popen:
    """Start `rlaif-gym *args` and stop it (SIGSTOP) as soon as it has (re)written `written`, the run's settings
    (run.json, eval.json; both replaced atomically, so a new inode): it is then a writer in the middle of its run."""
    before = _inode(written)
    proc = subprocess.Popen(_cli(*args), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while _inode(written) in (None, before):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            err = proc.communicate()[1]
            pytest.fail(f"the first writer never wrote {written.name} (exit {proc.returncode}):\n{err[-2000:]}")
        time.sleep(0.005)
    proc.send_signal(signal.SIGSTOP)
    return proc


def _finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[str, str]:
    proc.send_signal(signal.SIGCONT)
    return proc.communicate(timeout=timeout)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".rlaif-gym.lock"}


def _assert_refused(second: subprocess.CompletedProcess, first: subprocess.Popen, command: str) -> None:
    err = second.stderr.strip()
    assert second.returncode == 2, f"the second writer was not refused (exit {second.returncode}):\n{err[-2000:]}"
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert "Traceback" not in err
    for part in (f"process {first.pid}", command, f"kill {first.pid}", "one writer at a time", "another run folder"):
        assert part in err, f"{part!r} not in: {err}"


def _ids(folder: Path) -> list[str]:
    return [json.loads(line)["trajectoryId"] for p in sorted(folder.glob("trajectories-*.jsonl"))
            for line in p.read_text().splitlines()]


ROLLOUT = ("rollout", "--agent", "scripted", "--num-envs", "2", "--set", "num_ticks=4", "--no-progress")


def test_two_resumes_of_one_killed_rollout_one_writes_the_other_is_refused_and_sigkill_leaves_no_lock(tmp_path):
    """W1: two `rollout --resume` of one interrupted run at once stored every missing episode twice (and `report`
    then refused the run). Now the second is refused at once while the first holds the folder; the first stores
    each episode once; and after the holder is SIGKILLed, the next `--resume` runs (no stale lock)."""
    out = tmp_path / "run"
    args = (*ROLLOUT, "--out", str(out))
    done = _run(*args, "--episodes", "2")  # a run cut short: 2 of the 8 episodes the resumes plan are stored
    assert done.returncode == 0, done.stderr[-2000:]
    first = _start_and_freeze([*args, "--episodes", "8", "--resume"], out / "run.json")
    try:
        before = _files(out)
        for flag in ("--resume", "--overwrite", "--retry-failed"):  # the same resume, a restart, a fresh run
            extra = ("--resume", flag) if flag == "--retry-failed" else (flag,)
            second = _run(*args, "--episodes", "8", *extra, timeout=180)  # the first is frozen: a wait would hang
            assert _files(out) == before, f"the refused rollout {flag} changed the run folder"
            _assert_refused(second, first, "rollout --agent scripted")
        fresh = _run(*ROLLOUT, "--out", str(out), "--episodes", "8", "--seed", "5", timeout=180)
        _assert_refused(fresh, first, "rollout --agent scripted")
        assert _files(out) == before
    finally:
        _, first_err = _finish(first)
    assert first.returncode == 0, first_err[-2000:]
    ids = _ids(out)
    assert len(ids) == len(set(ids)) == 8, f"{len(ids)} records, {len(set(ids))} distinct ids"

    killed = _start_and_freeze([*args, "--episodes", "12", "--resume"], out / "run.json")
    killed.send_signal(signal.SIGKILL)  # killed while holding the folder (and frozen: nothing runs to clean up)
    killed.communicate(timeout=60)
    assert (out / ".rlaif-gym.lock").exists(), "the lock file stays; only a live flock on it counts"
    resumed = _run(*args, "--episodes", "12", "--resume")
    assert resumed.returncode == 0, f"a killed writer left a stale lock:\n{resumed.stderr[-2000:]}"
    ids = _ids(out)
    assert len(ids) == len(set(ids)) == 12


def test_the_python_collector_is_refused_while_a_rollout_writes_the_folder(tmp_path):
    """`RolloutCollector` with a `JsonlStore` sink (the Python API, no command line) takes the same lock."""
    from rlaif_gym.agents import ScriptedLLMAgent
    from rlaif_gym.errors import RLAIFError
    from rlaif_gym.rollout import RolloutCollector
    from rlaif_gym.storage import JsonlStore

    out = tmp_path / "run"
    args = (*ROLLOUT, "--out", str(out))
    assert _run(*args, "--episodes", "2").returncode == 0
    first = _start_and_freeze([*args, "--episodes", "6", "--resume"], out / "run.json")
    try:
        before = _files(out)
        collector = RolloutCollector(ScriptedLLMAgent(), sink=JsonlStore(out), env_config={"num_ticks": 4},
                                     num_envs=2, run_name="run")
        with pytest.raises(RLAIFError, match=f"being written by a rollout in process {first.pid}"):
            collector.collect(6, resume=True)
        assert _files(out) == before
    finally:
        _, first_err = _finish(first)
    assert first.returncode == 0, first_err[-2000:]
    assert sorted(_ids(out)) == sorted(set(_ids(out))) and len(_ids(out)) == 6


def test_two_evals_into_one_out_the_second_is_refused_and_the_scorecard_is_the_firsts(tmp_path):
    """W2: two `eval` into one --out both exited 0, with model A's replies beside model B's scorecard. Now the
    second (another temperature: another model's settings) is refused at once and changes nothing; the first
    writes a scorecard of its own replies only."""
    out = tmp_path / "eval"
    common = ("eval", "--agent", "scripted", "--points", "6", "--out", str(out))
    first = _start_and_freeze([*common, "--temperature", "0"], out / "eval.json")
    try:
        before = _files(out)
        for extra in (("--temperature", "0.7", "--samples", "2"), ("--temperature", "0.7", "--overwrite"),
                      ("--temperature", "0", "--resume")):  # another model's eval, its restart, the same eval
            second = _run(*common, *extra, timeout=180)
            assert _files(out) == before, f"the refused eval {extra} changed the run folder"
            _assert_refused(second, first, "eval --agent scripted")
    finally:
        _, first_err = _finish(first)
    assert first.returncode == 0, first_err[-2000:]
    card = json.loads((out / "scorecard.json").read_text())
    rows = [json.loads(line) for line in (out / "replies.jsonl").read_text().splitlines()]
    assert card["samples"] == 1 and card["sampling"]["temperature"] == 0.0, card["sampling"]
    assert sorted((r["point"], r["sample"]) for r in rows) == [(p, 0) for p in range(6)]
    assert {r["call"]["temperature"] for r in rows} == {0.0}


def test_another_thread_is_refused_and_the_same_thread_nests(tmp_path):
    """In one process: the holding thread may take its folder again (the command line holds it around the
    collector, which takes it too); another thread is refused, naming this process."""
    from rlaif_gym.storage import RunFolderBusyError, hold_run_folder

    seen: list[str] = []

    def other() -> None:
        try:
            with hold_run_folder(tmp_path, "a rollout"):
                seen.append("held")
        except RunFolderBusyError as exc:
            seen.append(str(exc))

    with hold_run_folder(tmp_path, "a rollout") as lock:
        holder = json.loads(lock.read_text())
        assert holder["pid"] == os.getpid() and holder["what"] == "a rollout"
        with hold_run_folder(tmp_path / ".", "a rollout"):
            thread = threading.Thread(target=other)
            thread.start()
            thread.join()
    assert len(seen) == 1 and f"another thread of this process (pid {os.getpid()})" in seen[0], seen
    assert lock.read_text() == "", "a released lock file names no holder"
    with hold_run_folder(tmp_path):  # released: anyone may take it now
        pass


def test_the_lock_file_keeps_no_url_credentials(tmp_path):
    """The holder's command line is written into the run folder: a URL's user:password and query are left out."""
    script = ("import sys; from rlaif_gym.storage import hold_run_folder\n"
              "with hold_run_folder(sys.argv[1], 'an eval') as lock: print(lock.read_text())")
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path), "--base-url",
                           "http://user:s3cret@127.0.0.1:8000/v1?key=s3cret", "--judge-base-url=http://u:s3cret@h/v1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "s3cret" not in proc.stdout and "http://127.0.0.1:8000/v1" in proc.stdout, proc.stdout
    assert "--judge-base-url=http://h/v1" in proc.stdout, proc.stdout


def test_without_fcntl_the_folder_is_used_unlocked_with_a_warning(tmp_path):
    """Where `fcntl` does not exist (Windows), the run goes on unlocked and says so (docs/cli.md); simulated here by
    a process in which `import fcntl` fails."""
    script = ("import sys, warnings; sys.modules['fcntl'] = None\n"
              "from rlaif_gym.storage import RunFolderLockWarning, hold_run_folder\n"
              "with warnings.catch_warnings(record=True) as caught:\n"
              "    warnings.simplefilter('always')\n"
              "    with hold_run_folder(sys.argv[1]): pass\n"
              "print([str(w.message) for w in caught if w.category is RunFolderLockWarning])")
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "no fcntl.flock" in proc.stdout and "One writer per run folder" in proc.stdout, proc.stdout
