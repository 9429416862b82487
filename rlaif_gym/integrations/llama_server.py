"""llama-cpp-python's OpenAI-compatible server, with the grammar asked about the sampled token first.

    python rlaif_gym/integrations/llama_server.py --model M.gguf ...   (llama_cpp.server's arguments)

Why: llama-cpp-python (0.3.36) puts a request's grammar first in its sampler chain, so for every
generated token the grammar judges all 49,152 tokens of SmolLM2's vocabulary, a large share of a constrained
call's generation time (docs/benchmarks.md, the local model's table). llama.cpp's own sampler
(`common_sampler_sample`, `grammar_first = false`) does it the other way round, and so does this module:

1. sample from the chain without the grammar (penalties, top-k, top-p, min-p, temperature, draw);
2. ask the grammar about that one token; if it accepts it, that is the token;
3. otherwise apply the grammar to the whole vocabulary and sample again from the chain with it.

Every token is still one the grammar accepts (step 3 is exactly llama-cpp-python's own path), and
a request without a grammar samples exactly as before. With a grammar, a token the model itself
prefers and the grammar allows is kept without renormalising over the allowed tokens, as llama.cpp's
server does. Both chains see every accepted token (penalties and the grammar's state), and each has
its own seeded random source, so a seeded request still gives the same reply every time.

`LocalLLMServer` runs this file (by its path, so that it needs only numpy and llama-cpp-python, not
this package) instead of `python -m llama_cpp.server`; the counts of tokens decided each way are
written to the server log at the end of each reply (`grammar checks: ...`). Where llama-cpp-python
lacks the internals this relies on (another version than the pinned one), the log says so and the
server runs unchanged.
"""

from __future__ import annotations

import ctypes
import runpy
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["VerifyFirstSampler", "install", "main"]


class VerifyFirstSampler:
    """A sampler for one generation: the free chain first, the grammar's chain when the grammar refuses.

    Args:
        free: llama-cpp-python's `LlamaSampler` built without the grammar.
        strict: the same chain with the grammar, used for the check and the fallback.
        grammar_index: the grammar sampler's position in `strict` (asked alone about one token).
        n_vocab: the model's vocabulary size.
    """

    def __init__(self, free: Any, strict: Any, grammar_index: int, n_vocab: int) -> None:
        import llama_cpp

        self._llama_cpp = llama_cpp
        self.free, self.strict = free, strict
        self._grammar = llama_cpp.llama_sampler_chain_get(strict.sampler, grammar_index)
        token_data = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
        if token_data.itemsize != ctypes.sizeof(llama_cpp.llama_token_data):
            raise RuntimeError("llama_token_data is not (int32, float, float) in this llama-cpp-python")
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self._cur = np.zeros(n_vocab, dtype=token_data)
        self._one = np.zeros(1, dtype=token_data)
        self.n_vocab = n_vocab
        self.checked = 0  # tokens the grammar accepted at the first ask
        self.resampled = 0  # tokens drawn again with the grammar over the whole vocabulary

    def _array(self, data: np.ndarray) -> Any:
        lib = self._llama_cpp
        return lib.llama_token_data_array(data=data.ctypes.data_as(lib.llama_token_data_p), size=len(data),
                                          selected=-1, sorted=False)

    def sample(self, ctx: Any, idx: int = -1) -> int:
        """The next token from the logits at `idx` (as `LlamaSampler.sample`); accepted on both chains."""
        llama_cpp = self._llama_cpp
        logits = llama_cpp.llama_get_logits_ith(ctx.ctx, idx)
        cur = self._cur
        cur["id"] = self._ids
        cur["logit"] = np.ctypeslib.as_array(logits, shape=(self.n_vocab,))
        cur["p"] = 0.0
        array = self._array(cur)
        llama_cpp.llama_sampler_apply(self.free.sampler, ctypes.byref(array))
        token = array.data[array.selected].id if 0 <= array.selected < array.size else -1
        if token >= 0:
            one = self._one
            one[0] = (token, 0.0, 0.0)
            check = self._array(one)
            llama_cpp.llama_sampler_apply(self._grammar, ctypes.byref(check))
            if np.isfinite(one[0]["logit"]):
                self.checked += 1
                self.strict.accept(token)
                self.free.accept(token)
                return token
        self.resampled += 1
        token = self.strict.sample(ctx, idx)  # grammar over the whole vocabulary, then the chain; accepts on it
        self.free.accept(token)
        return token

    def accept(self, token: int) -> None:
        self.strict.accept(token)
        self.free.accept(token)

    def reset(self) -> None:
        self.strict.reset()
        self.free.reset()


def install() -> None:
    """Make `llama_cpp.Llama` build a `VerifyFirstSampler` whenever a generation has a grammar.

    Raises `RuntimeError` (naming what is missing) when llama-cpp-python lacks the internals it uses."""
    try:
        import llama_cpp
        from llama_cpp import llama as _llama
    except ImportError as exc:
        raise RuntimeError(f"llama_cpp.llama cannot be imported ({exc})") from exc
    missing = [name for name in ("_init_sampler", "generate") if not hasattr(_llama.Llama, name)]
    missing += [name for name in ("llama_sampler_apply", "llama_sampler_chain_get", "llama_get_logits_ith",
                                  "llama_token_data_array") if not hasattr(llama_cpp, name)]
    if missing:
        raise RuntimeError(f"llama-cpp-python {getattr(llama_cpp, '__version__', '?')} lacks {', '.join(missing)}")
    original = _llama.Llama._init_sampler
    if getattr(original, "_rlaif_verify_first", False):
        return

    def _init_sampler(self: Any, *args: Any, **kwargs: Any) -> Any:
        grammar = kwargs.get("grammar")
        if grammar is None:
            return original(self, *args, **kwargs)
        strict = original(self, *args, **kwargs)
        free = original(self, *args, **{**kwargs, "grammar": None})
        # llama-cpp-python adds the logits processor (if any), then penalties, then the grammar.
        grammar_index = 1 + (kwargs.get("logits_processor") is not None)
        return VerifyFirstSampler(free, strict, grammar_index, self._n_vocab)

    generate = _llama.Llama.generate

    def _generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return (yield from generate(self, *args, **kwargs))
        finally:
            sampler = getattr(self, "_sampler", None)
            if isinstance(sampler, VerifyFirstSampler):
                print(f"grammar checks: {sampler.checked} tokens accepted at the first ask, {sampler.resampled} "
                      "drawn again with the grammar", file=sys.stderr, flush=True)

    _init_sampler._rlaif_verify_first = True  # type: ignore[attr-defined]
    _llama.Llama._init_sampler = _init_sampler
    _llama.Llama.generate = _generate


def main() -> None:
    """Run llama_cpp.server's command line (this process's arguments) with `install()` in effect."""
    try:
        install()
    except RuntimeError as exc:
        print(f"grammar checks: llama-cpp-python's own sampling ({exc})", file=sys.stderr, flush=True)
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    # Run by its path, this file's folder is first on sys.path, where its neighbours (the trl and openenv packages, ...)
    # would shadow the packages of those names.
    if sys.path and sys.path[0] and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        sys.path.pop(0)
    main()
