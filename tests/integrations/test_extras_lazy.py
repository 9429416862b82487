"""Optional libraries are imported lazily, and a missing one raises DependencyNotInstalled with the command that
installs its extra from the clone (the constraints file for the extras that pull torch)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from rlaif_gym.errors import install_hint

# Each snippet hides one library (a None entry in sys.modules makes its import fail) and imports our module.
CASES = {
    "pettingzoo": ("pettingzoo", "import rlaif_gym.integrations.pettingzoo", install_hint("pettingzoo")),
    "rllib": ("ray", "import rlaif_gym.integrations.rllib", install_hint("rllib")),
    "sb3": ("stable_baselines3", "import rlaif_gym.integrations.sb3", install_hint("sb3")),
    "trl": ("trl", "import rlaif_gym.integrations.trl", install_hint("trl")),
    "openenv": ("openenv", "import rlaif_gym.integrations.openenv", install_hint("openenv")),
    "verifiers": ("verifiers", "import rlaif_gym.integrations.verifiers", install_hint("verifiers")),
    "verifiers-plugin": ("verifiers", "import rlaif_gym_verifiers", install_hint("verifiers")),
    "ray-backend": ("ray", "from rlaif_gym.rollout.ray_backend import RayBackend\nimport asyncio\n"
                    "from rlaif_gym.rollout import RolloutCollector\nfrom rlaif_gym.agents import ScriptedLLMAgent\n"
                    "RolloutCollector(ScriptedLLMAgent(), backend=RayBackend(2)).collect(1, 0)", install_hint("ray")),
    # The OpenAI-compatible client: constructing it needs nothing; its first call needs h11 and orjson.
    **{f"openai-client-without-{hidden}": (hidden, "import asyncio\nfrom rlaif_gym.llm import OpenAIChatClient, "
                                           "SamplingParams\nclient = OpenAIChatClient('m', 'http://127.0.0.1:9/v1')\n"
                                           "asyncio.run(client.complete([{'role': 'user', 'content': 'hi'}], "
                                           "SamplingParams()))", install_hint("openai"))
       for hidden in ("h11", "orjson")},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_missing_extra_names_the_extra(case):
    hidden, code, extra = CASES[case]
    script = f"import sys\nsys.modules[{hidden!r}] = None\n" + textwrap.dedent(code)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0, f"{case}: importing without {hidden} did not fail"
    assert "DependencyNotInstalled" in proc.stderr and extra in proc.stderr, proc.stderr[-1500:]


def test_import_rlaif_gym_pulls_in_no_optional_library():
    script = ("import sys, rlaif_gym, rlaif_gym.envs, rlaif_gym.rollout, rlaif_gym.integrations\n"
              "import rlaif_gym.rollout.ray_backend\n"
              "from rlaif_gym.llm import OpenAIChatClient\nOpenAIChatClient('m', 'http://127.0.0.1:9/v1')\n"
              "print(sorted(m for m in ('ray', 'pettingzoo', 'stable_baselines3', 'torch', 'h11', 'orjson',"
              " 'openai', 'openenv', 'fastapi', 'uvicorn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout
