"""numba's IR inliner, inside the kernels' compile, copies each callee's IR with one memo: the copies of its blocks
share one copy of its variable scope (far fewer objects copied), and the compiled code is the same.

Each test compiles fresh functions (no cache), so what it counts is an inlining that ran."""

from __future__ import annotations

import copy

import pytest

from rlaif_gym.sim import _jit

pytestmark = pytest.mark.skipif(not _jit.available(), reason="numba is not installed")


def _branchy(x):
    """A helper with many blocks and variables, as a phase of the world step is (on a smaller scale)."""
    a = x + 1.0
    b = a * 2.0 if a > 1.0 else a - 2.0
    c = b * a if b > 3.0 else b + a
    d = c - b if c > 5.0 else c + b
    e = d * 0.5 if d > 7.0 else d * 1.5
    f = e - a if e > 9.0 else e + a
    g = f * b if f > 11.0 else f - b
    h = g + c if g > 13.0 else g - c
    return a + b + c + d + e + f + g + h


def _caller(x):
    return _inlined(x) + _inlined(x + 1.0) * 2.0  # noqa: F821 - `_fresh_caller` binds _inlined


def _fresh_caller():
    """A caller and its inlined helper, compiled on their first call (no cache)."""
    import numba

    namespace = {"_inlined": numba.njit(inline="always")(_branchy)}
    caller = type(_caller)(_caller.__code__, namespace, "_caller")
    return numba.njit(caller)


def _count_copies(monkeypatch, compile_call):
    """Objects visited by copy.deepcopy while `compile_call` runs (each visit is one recursive call)."""
    count = [0]
    real = copy.deepcopy

    def counting(x, memo=None, _nil=[]):  # noqa: B006 - copy.deepcopy's own signature
        count[0] += 1
        return real(x, memo, _nil)

    with monkeypatch.context() as patched:
        patched.setattr(copy, "deepcopy", counting)
        value = compile_call()
    return count[0], value


def test_inlining_in_the_kernels_compile_copies_each_scope_once(monkeypatch):
    """Inside `sharing_inline_copies` the inliner copies a fraction of what numba's own copies do, and the function
    computes the same."""
    numba_own = _fresh_caller()
    shared = _fresh_caller()
    own_count, own_value = _count_copies(monkeypatch, lambda: numba_own(2.0))

    def compile_shared():
        with _jit.sharing_inline_copies():
            return shared(2.0)

    shared_count, shared_value = _count_copies(monkeypatch, compile_shared)
    assert shared_value == own_value == _branchy(2.0) + _branchy(3.0) * 2.0
    assert shared_count * 3 < own_count, (shared_count, own_count)


def test_the_first_call_of_a_kernel_compiles_with_shared_copies(monkeypatch, capsys):
    """`compile_notice`, which every kernel's first call runs under, is where the sharing is on."""
    plain, noticed = _fresh_caller(), _fresh_caller()
    plain_count, _ = _count_copies(monkeypatch, lambda: plain(1.0))

    def compile_noticed():
        with _jit.compile_notice(noticed):
            return noticed(1.0)

    noticed_count, _ = _count_copies(monkeypatch, compile_noticed)
    assert noticed_count * 3 < plain_count, (noticed_count, plain_count)


def test_the_same_machine_code_with_and_without_shared_copies():
    """The IR the inliner builds is the same, so LLVM emits the same instructions (the function's own symbol aside,
    which numba makes unique per dispatcher)."""
    import re

    numba_own, shared = _fresh_caller(), _fresh_caller()
    numba_own(1.0)
    with _jit.sharing_inline_copies():
        shared(1.0)

    def instructions(dispatcher):
        asm = dispatcher.inspect_asm(dispatcher.signatures[0])
        return [re.sub(r"_ZN\S+", "SYMBOL", line.split("#")[0].strip()) for line in asm.splitlines()
                if line.strip() and not line.lstrip().startswith((".", "#"))]

    assert instructions(shared) == instructions(numba_own)
