"""The compile plumbing of the world kernels: numba's decorators with the cache where it belongs, the first-call
notice, numba's inliner copying a callee's IR with one memo during a kernel's first call (`sharing_inline_copies`), the
packed-buffer view intrinsic, and the call variant (a second copy of a kernel whose `jit_inline` helpers are real
calls). What a kernel computes lives in `sim.rules`; how it is compiled lives here.

Kernels compile on first use, once per machine (30-100 s on 2 cores; `compile_notice` says so), and are cached in
`kernel_cache_dir()`: the user cache (`rlaif_gym.sim.paths.user_cache_dir`, moved with ``$RLAIF_GYM_CACHE``) under a
digest of every source a kernel freezes at compile time (this package's `sim` modules, `encoding/action.py`,
`fast.py` and `mask.py`, `envs/fused.py`) and of the numba and Python versions. numba's own cache checks only the
timestamp of the file that defines a function, so a kernel that inlines helpers from another module (the fused step
inlines `sim.rules`'s) would otherwise keep running stale code after that module changes. ``$NUMBA_CACHE_DIR``, when
set, is numba's and wins.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import hashlib
import os
import platform
import sys
import threading
import time
import types
from pathlib import Path

from .paths import user_cache_dir

try:  # a core dependency, but where numba cannot be installed the rules run as Python
    import numba
except ImportError:  # pragma: no cover - exercised only where numba is absent
    numba = None

__all__ = ["available", "call_variant", "compile_notice", "jit", "jit_call", "jit_flat", "jit_inline", "jit_phase",
           "jit_view", "kernel_cache_dir", "kernel_sources", "python_twin", "sharing_inline_copies", "view"]

COMPILE_NOTICE_AFTER_S = 2.0
"""Where numba's cache cannot be inspected: a first call still running after this many seconds is compiling."""
_noticed = False
_KERNEL_NAMES = {"rlaif_gym.sim.rules.kernel_calls": "world step",
                 "rlaif_gym.sim.rules._open_first_markets_calls": "world reset",
                 "rlaif_gym.sim.rules._equities_calls": "equity kernel",
                 "rlaif_gym.sim.rules._act_all_calls": "multi-agent action stage",
                 "rlaif_gym.sim.rules._tick_stage_calls": "multi-agent tick stages",
                 "rlaif_gym.envs.fused._fused": "fused step (world, reward, observation)",
                 "rlaif_gym.encoding.fast.kernel": "observation encoder"}


def available() -> bool:
    """True when numba is installed, so `step` runs compiled."""
    return numba is not None


class _InlinerCopies(threading.local):
    """What numba's IR inliner calls its `copy` module, once `sharing_inline_copies` has installed it: within that
    context (per thread), the copies of one callee's blocks share one memo, so they share one copy of the callee's
    variable scope as the callee's own blocks share one scope; elsewhere, numba's own copies.

    Why: numba's `InlineWorker.inline_ir` deep-copies each block of the callee on its own (twice per call site),
    and every block reaches the callee's whole scope, so each inlined call copied blocks x variables objects (and
    compared the copied scopes with each other). For the world step's phases, whose scopes hold every variable of
    the helpers inlined into them, that was most of numba's inlining time (docs/benchmarks.md, "Cold compile").
    The IR it builds is the same: numba keeps the first block's scope and renames every variable into the
    caller's."""

    sharing = False
    memos: dict | None = None  # id(an IR's scope) -> the memo of that IR's copy, during one inlined call
    block_type = None

    def deepcopy(self, x, memo=None):
        if memo is None and self.memos is not None and isinstance(x, self.block_type):
            memo = self.memos.setdefault(id(x.scope), {})
        return copy.deepcopy(x, memo)

    def __getattr__(self, name):
        return getattr(copy, name)


_inliner_copies = _InlinerCopies()
_install_lock = threading.Lock()
_installed: bool | None = None


def _install_inliner_copies() -> bool:
    """Give numba's inliner `_inliner_copies` for its `copy` module and wrap `inline_ir` to open one set of memos
    per inlined call (once per process). False, leaving numba as it is, where its inliner has moved."""
    global _installed
    with _install_lock:
        if _installed is None:
            _installed = False
            try:
                from numba.core import inline_closurecall as inliner
                from numba.core import ir
                original = inliner.InlineWorker.inline_ir
            except (ImportError, AttributeError):  # pragma: no cover - a numba that moved its inliner
                return False
            if getattr(inliner, "copy", None) is not copy:  # pragma: no cover - as above
                return False

            @functools.wraps(original)
            def inline_ir(self, *args, **kwargs):
                outer = _inliner_copies.memos
                _inliner_copies.memos = {} if _inliner_copies.sharing else None
                try:
                    return original(self, *args, **kwargs)
                finally:
                    _inliner_copies.memos = outer

            _InlinerCopies.block_type = ir.Block
            inliner.InlineWorker.inline_ir = inline_ir
            inliner.copy = _inliner_copies
            _installed = True
        return _installed


@contextlib.contextmanager
def sharing_inline_copies():
    """Within this context, numba's inliner copies each callee's IR with one memo (`_InlinerCopies`): the world
    kernels compile in about three quarters of the time, to the same machine code. `compile_notice` enters it around
    every kernel's first call. Where numba is missing or its inliner has moved, it does nothing."""
    if numba is None or not _install_inliner_copies():
        yield
        return
    outer, _inliner_copies.sharing = _inliner_copies.sharing, True
    try:
        yield
    finally:
        _inliner_copies.sharing = outer


def _has_cache(dispatcher) -> bool | None:
    """Whether numba's on-disk cache holds an index for `dispatcher` (its first call then loads machine code
    rather than compiling: the cache directory is keyed by the kernels' sources, and numba checks their
    contents); None where that cannot be read (not a numba dispatcher, or numba's internals moved)."""
    try:
        return os.path.exists(dispatcher._cache._cache_file._index_path)
    except (AttributeError, TypeError):
        return None


@contextlib.contextmanager
def compile_notice(dispatcher):
    """Around a compiled function's first call in this process: say on stderr when it compiles, and how long.

    numba compiles on the first call and caches the machine code on disk, so only a machine's first run
    (or the first after an upgrade) waits, for minutes on 2 cores; that wait should not look like a hang,
    and a cache hit (well under a second) should not claim to compile. So the line before the call prints
    only when the cache has nothing for this kernel, and a line after it gives the measured compile time
    (numba's own count of cache misses says a compile ran). Where the cache cannot be inspected, a timer
    prints the first line if the call is still running after `COMPILE_NOTICE_AFTER_S`. The call runs inside
    `sharing_inline_copies`, so a compile it starts inlines with shared copies.
    """
    global _noticed
    if getattr(dispatcher, "signatures", True):
        yield
        return
    name = _KERNEL_NAMES.get(f"{getattr(dispatcher, '__module__', '')}.{getattr(dispatcher, '__name__', '')}",
                             "world kernels")
    cached = _has_cache(dispatcher)

    spoke = []

    def say() -> None:
        global _noticed
        spoke.append(True)
        if not _noticed:
            _noticed = True
            folder = kernel_cache_dir()
            print(f"rlaif-gym: compiling the world kernels for this machine (once: about 30 s for the text face, "
                  f"about a minute for the numeric one, on 2 cores; cached "
                  f"afterwards{f' in {folder}' if folder else ''}; backend='numpy' skips it)", file=sys.stderr,
                  flush=True)

    timer = None
    if cached is False:
        say()
    elif cached is None and not _noticed:
        timer = threading.Timer(COMPILE_NOTICE_AFTER_S, say)
        timer.daemon = True
        timer.start()
    started = time.perf_counter()
    try:
        with sharing_inline_copies():
            yield
    finally:
        if timer is not None:
            timer.cancel()
        misses = getattr(dispatcher, "_cache_misses", None)
        if (misses is not None and sum(misses.values()) > 0) or (misses is None and spoke):
            print(f"rlaif-gym: compiled the {name} in {time.perf_counter() - started:.0f} s", file=sys.stderr,
                  flush=True)


_PACKAGE = Path(__file__).resolve().parents[1]


def kernel_sources() -> list[Path]:
    """Every file whose code or constants a compiled kernel freezes: the sim package, the numeric decoder, the
    compiled encoder and action mask, and the fused step (they inline the rules' helpers and read their constants)."""
    return sorted([*(_PACKAGE / "sim").glob("*.py"),
                   *(_PACKAGE / "encoding" / name for name in ("action.py", "fast.py", "mask.py")),
                   _PACKAGE / "envs" / "fused.py"])


@functools.lru_cache(maxsize=1)
def kernel_cache_dir() -> Path | None:
    """Where the compiled kernels are cached (see the module docstring), created on first use; None when
    ``$NUMBA_CACHE_DIR`` is set (numba's choice wins) or the directory cannot be written (numba's default,
    next to the sources)."""
    if numba is None or os.environ.get("NUMBA_CACHE_DIR"):
        return None
    digest = hashlib.sha256()
    for path in kernel_sources():
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    digest.update(f"{numba.__version__}|{sys.version_info[:2]}|{platform.machine()}".encode())
    folder = user_cache_dir() / "kernels" / digest.hexdigest()[:16]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder if os.access(folder, os.W_OK) else None


def njit(fn, **options):
    """numba.njit(cache=True, ...) with the cache in `kernel_cache_dir()` (numba reads its cache directory when a
    function is decorated, so it is set around the decoration only)."""
    folder = kernel_cache_dir()
    previous = numba.config.CACHE_DIR
    if folder is not None:
        numba.config.CACHE_DIR = str(folder)
    try:
        return numba.njit(cache=True, nogil=True, error_model="numpy", **options)(fn)
    finally:
        numba.config.CACHE_DIR = previous


def jit(fn):
    """A compiled function with numba's runtime (it may allocate), cached; `fn` itself where numba is missing."""
    return njit(fn) if numba is not None else fn


def jit_flat(fn):
    """A kernel without numba's runtime: it allocates nothing (its caller hands it scratch), so no array
    passed to an inlined helper inside its world loop pays an atomic reference-count pair (those pairs
    were about 30 % of a world-tick)."""
    return njit(fn, _nrt=False) if numba is not None else fn


def jit_call(fn):
    """A small helper compiled once and called: LLVM inlines the call into each caller's machine code, so it runs as
    an inlined helper does, while numba types it once instead of copying it into every call site of its caller's IR
    and typing each copy again. Those copies were most of the world kernel's compile time (docs/benchmarks.md,
    "Cold compile"). Compiled as a `jit_flat` kernel is. A helper LLVM leaves as a call inside the world kernel (the
    sum, the accounting, the single draw) is a `jit_inline` instead; tests/sim/test_compiled_calls.py names any."""
    return jit_flat(fn)


INLINED: dict[str, list[str]] = collections.defaultdict(list)
"""Names of the `jit_inline` helpers by module (real calls in the text face's copy, `call_variant`)."""
PHASES: dict[str, list[str]] = collections.defaultdict(list)
"""Names of the `jit_phase` helpers by module (the step's phases and action handlers: inlined in both copies)."""


def jit_inline(fn):
    """A helper inlined into its caller at the numba IR level (no call, no reference counting): for the helpers with
    a loop, which LLVM's inliner may leave as calls inside the world kernel (a sum, the equity); straight-line
    arithmetic is a `jit_call`, which compiles faster and runs the same."""
    INLINED[fn.__module__].append(fn.__name__)
    return njit(fn, inline="always") if numba is not None else fn


def jit_phase(fn):
    """A phase of the world step, or an action's handler: inlined into the kernel (called once per world)."""
    PHASES[fn.__module__].append(fn.__name__)
    return njit(fn, inline="always") if numba is not None else fn


def jit_view(fn):
    """A view of a packed buffer: always inlined, so building it needs no runtime (see `jit_flat`)."""
    return njit(fn, inline="always") if numba is not None else fn


def _slice_view(buf, offset, shape):
    """A C-contiguous `shape` view of buf[offset:] (numba's slice and reshape; `view`'s fallback)."""
    n = 1
    for d in shape:
        n *= d
    return buf[offset:offset + n].reshape(shape)


def _view_intrinsic():
    """`view` as a numba intrinsic: the array struct written directly (data pointer, shape, C strides).

    Building the state's 73 views with slicing and `reshape` was most of the compile time of every kernel that
    builds them (the intrinsic's codegen is a few instructions). It uses
    numba's array-model helpers, which have kept their names since numba 0.49; where they have moved, the
    fallback is `_slice_view`, the same views compiled more slowly."""
    try:
        from numba.core import cgutils
        from numba.core import types as nb_types
        from numba.core.imputils import impl_ret_borrowed
        from numba.extending import intrinsic
        from numba.np.arrayobj import make_array, populate_array
    except ImportError:  # pragma: no cover - a numba that moved its internals
        return None

    @intrinsic
    def view(typingctx, buf, offset, shape):
        result = nb_types.Array(buf.dtype, len(shape), "C")

        def codegen(context, builder, signature, args):
            buf_value, offset_value, shape_value = args
            source = make_array(signature.args[0])(context, builder, buf_value)
            out = make_array(result)(context, builder)
            itemsize = context.get_constant(nb_types.intp,
                                            context.get_abi_sizeof(context.get_data_type(result.dtype)))
            dims = cgutils.unpack_tuple(builder, shape_value, len(shape))
            strides, step = [], itemsize
            for d in reversed(dims):
                strides.insert(0, step)
                step = builder.mul(step, d)
            populate_array(out, data=builder.gep(source.data, [offset_value]), shape=dims, strides=strides,
                           itemsize=itemsize, meminfo=source.meminfo, parent=source.parent)
            return impl_ret_borrowed(context, builder, result, out._getvalue())

        return result(buf, offset, shape), codegen

    return view


view = (_view_intrinsic() or jit_view(_slice_view)) if numba is not None else _slice_view
"""view(buf, offset, shape): a C-contiguous `shape` view of buf[offset:] inside compiled code, no copy."""


def call_variant(namespace: dict, flat: tuple[str, ...], helpers: tuple[dict, ...] = ()) -> dict:
    """A second compiled copy of the world step's kernels, whose small helpers are real calls.

    Why: numba inlines a `jit_inline` helper by copying it into every call site of its caller's IR, and
    types the copy again: that costs compile time at every site, and it keeps the numeric face's hot loops free of
    the calls LLVM would leave (`jit_call` helpers need no copy: they are calls in both, inlined by LLVM). The text
    face steps one world per LLM call, where a real call costs nothing measurable, so it runs a copy of the kernel
    whose `jit_inline` helpers are real calls:
    the same code, the same arithmetic in the same order (so the same bits: tests/envs/test_fused.py compares
    the two paths step by step), compiled in about half the time (docs/benchmarks.md ("Time to first step")).
    The phases (`jit_phase`) stay inlined, once each, and are copied too so that their helpers are the calls.
    Every copy shares one globals dict, which numba reads when it compiles (at the first call).

    `namespace` is the globals of the module that defines the kernel and its phases; `helpers` the globals of the
    modules whose `jit_inline` helpers it imports under their own names (`sim._scalars`); `flat` names the
    functions copied as standalone kernels; returns their copies by name.
    """
    if numba is None:
        return {name: namespace[name] for name in flat}
    names = dict(namespace)

    def copy(fn, suffix: str, globals_: dict):
        dup = types.FunctionType(fn.__code__, globals_, fn.__name__ + suffix, fn.__defaults__, fn.__closure__)
        dup.__qualname__, dup.__doc__ = dup.__name__, fn.__doc__  # numba keys its on-disk cache by the qualified name
        return dup

    for home in (namespace, *helpers):  # a standalone copy of each helper, its own helpers still inlined into it
        for name in INLINED[home["__name__"]]:
            if home is namespace or namespace.get(name) is home[name]:
                names[name] = njit(copy(home[name].py_func, "_call", home), _nrt=False)
    for name in PHASES[namespace["__name__"]]:
        names[name] = njit(copy(namespace[name].py_func, "_calls", names), inline="always")
    for name in flat:
        fn = namespace[name]
        names[name] = njit(copy(getattr(fn, "py_func", fn), "_calls", names), _nrt=False)
    return {name: names[name] for name in flat}




def python_twin(fn):
    """The Python function a compiled function is made of, calling the Python functions of the compiled functions
    it reaches: the same source run by the interpreter (what ``backend="numpy"`` runs; where numba is missing, the
    decorators above return their functions unchanged and every call is this already).

    Each module the twin reaches gets a copy of its globals in which every compiled function is its Python twin and
    `view` is `_slice_view`, so nothing compiles. Returns `fn` itself where numba is missing."""
    if numba is None or not isinstance(fn, numba.core.dispatcher.Dispatcher):
        return fn
    copies: dict[int, types.FunctionType] = {}
    namespaces: dict[int, dict] = {}
    unfilled: list[dict] = []

    def twin(dispatcher) -> types.FunctionType:
        if id(dispatcher) not in copies:
            py = dispatcher.py_func
            home = py.__globals__
            if id(home) not in namespaces:
                namespaces[id(home)] = dict(home)
                unfilled.append(home)
            dup = types.FunctionType(py.__code__, namespaces[id(home)], py.__name__, py.__defaults__, py.__closure__)
            dup.__doc__, dup.__qualname__ = py.__doc__, py.__qualname__
            copies[id(dispatcher)] = dup
        return copies[id(dispatcher)]

    entry = twin(fn)
    while unfilled:
        home = unfilled.pop()
        names = namespaces[id(home)]
        for name, value in home.items():
            if value is view:
                names[name] = _slice_view
            elif isinstance(value, numba.core.dispatcher.Dispatcher):
                names[name] = twin(value)
    return entry
