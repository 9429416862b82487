"""Adapters to the libraries RLAIF envs plug into. Each submodule imports its library
itself and raises `DependencyNotInstalled` naming the extra when it is missing:

* `rlaif_gym.integrations.sb3`: Stable-Baselines3 VecEnv, metrics callback, evaluation (`[sb3]`).
* `rlaif_gym.integrations.rllib`: RLlib env creators registered with Ray Tune (`[rllib]`).
* `rlaif_gym.integrations.pettingzoo`: the multi-agent world as a PettingZoo ParallelEnv (`[pettingzoo]`).
* `rlaif_gym.integrations.verifiers`: the text env as a verifiers v1 Taskset, Env, Harness and Judge
  (`vf-eval rlaif-gym-verifiers`), and trace <-> trajectory converters (`[verifiers]`).
* `rlaif_gym.integrations.openenv`: the text env as an OpenEnv server (`rlaif-gym serve`, with snapshot/restore)
  and its client (`[openenv]`).
* `rlaif_gym.integrations.trl`: TRL's `GRPOTrainer` on the text env: an `environment_factory` class, a token-exact
  `rollout_func` and a dataset builder of seeds and fork points (`[trl]`).
* `rlaif_gym.integrations.local_llm`: a llama.cpp server with a registry-shipped model (`[local-llm]`).

Nothing is imported here, so `import rlaif_gym.integrations` never pulls in an optional library.
"""
