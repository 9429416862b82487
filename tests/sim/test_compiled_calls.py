"""The numeric face's compiled step calls none of the world's small helpers: each is inlined, either by numba
(`jit_inline`) or by LLVM (`jit_call`, compiled once and called). A `jit_call` helper that LLVM leaves as a call
inside the world kernel costs the native vector env its speed; this reads the machine code of a fresh compile
(numba cannot show the code of a cached kernel) and names any package function the step still calls."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rlaif_gym.sim import _jit

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not _jit.available(), reason="numba is not installed")]

PROBE = r"""
import json, re, sys
import gymnasium as gym
import rlaif_gym
from rlaif_gym.envs import fused
from rlaif_gym.sim import rules

env = gym.make("RLAIF-v0")
env.reset(seed=0)
env.step(env.action_space.sample())


def path_of(symbol):
    # numba's mangled names: _ZN <len><part>... then B<abi tags>; the parts are module path and function name
    rest, parts = symbol[len("_ZN"):], []
    while (m := re.match(r"(\d+)", rest)):
        n = int(m.group(1))
        parts.append(rest[len(m.group(1)):len(m.group(1)) + n])
        rest = rest[len(m.group(1)) + n:]
    return ".".join(parts)


called = {}
for name, dispatcher in (("fused step", fused._fused), ("world kernel", rules.kernel)):
    asm = dispatcher.inspect_asm(dispatcher.signatures[0])
    loaded, targets = {}, set()
    for line in asm.splitlines():
        line = line.split("#")[0].strip()
        if (m := re.match(r"movabsq\s+\$(\S+), %(\w+)$", line)):
            loaded[m.group(2)] = m.group(1)
        elif (m := re.match(r"callq\s+\*%(\w+)$", line)) and loaded.get(m.group(1), "").startswith("_ZN"):
            targets.add(path_of(loaded[m.group(1)]))
        elif (m := re.match(r"callq\s+(_ZN\S+)$", line)):
            targets.add(path_of(m.group(1)))
    called[name] = sorted(t for t in targets if t.startswith("rlaif_gym."))
print(json.dumps(called))
"""

KERNELS = {"rlaif_gym.envs.fused._fused", "rlaif_gym.sim.rules.kernel", "rlaif_gym.sim.rules._pay_due",
           "rlaif_gym.sim.rules._settle_due", "rlaif_gym.encoding.fast.kernel"}
"""The compiled functions the step calls on purpose: the kernels themselves (each its own real call) and the two
that run only on ticks where a market is due."""


def test_the_numeric_step_calls_no_small_helper(tmp_path):
    env = {**os.environ, "RLAIF_GYM_CACHE": str(tmp_path / "cache")}
    env.pop("NUMBA_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    called = json.loads(out.stdout.strip().splitlines()[-1])
    assert called["world kernel"], "the probe read no call at all: the assembly's format changed, fix the parser"
    helpers = {name: sorted(set(paths) - KERNELS) for name, paths in called.items()}
    assert helpers == {"fused step": [], "world kernel": []}, (
        f"the compiled step calls these helpers instead of inlining them: {helpers}; make each a `jit_inline` "
        "(sim._jit) instead of a `jit_call`")
