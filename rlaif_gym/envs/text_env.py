"""`RLAIFTextEnv`: the text face of the same world (`RLAIF-Text-v0`), for LLM policies."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from .. import sim
from ..config import RLAIFEnvConfig
from ..encoding import feature_layout
from ..encoding.prompt import PROMPT_CHARSET, render_prompt, shown_view, system_prompt
from ..encoding.reply import ParsedReply
from ..encoding.view import TickView, build_view
from ..errors import ResetNeeded
from ..judge.rules import RuleJudge
from .core import world_params
from .glue import check_reply, decode_reply, step_feedback
from .rlaif_env import RLAIFEnv
from .snapshot import EnvSnapshot, SnapshotReader, register_snapshot_class

__all__ = ["MAX_PROMPT_CHARS", "MAX_REPLY_SAMPLE_CHARS", "RLAIFTextEnv", "describe_outcome", "warm_up"]

MAX_PROMPT_CHARS = 16_384
"""Upper bound of a rendered prompt (the Text observation space's max_length)."""
MAX_REPLY_SAMPLE_CHARS = 4_096
"""max_length of the Text action space (what `action_space.sample()` draws). `step` accepts longer
replies too; the parser reads the first `MAX_REPLY_CHARS` and reports the cut."""


def describe_outcome(action: sim.Action | None, parsed: ParsedReply, out: sim.StepOutcome, b: int = 0) -> str:
    """One line for the next prompt: what the last action did (or why it did nothing)."""
    extra = ""
    if out.payout[b] > 0:
        extra += f" Resolved markets paid you ${out.payout[b]:,.2f}."
    if out.liquidated[b] > 0:
        extra += f" {int(out.liquidated[b])} perp position(s) were liquidated."
    if action is None:
        return "No action was executed: " + "; ".join(parsed.errors) + extra
    what = " ".join(f"{k}={v}" for k, v in action.to_dict().items() if k not in ("type", "content"))
    head = f"{action.type} {what}".strip()
    if not out.success[b]:
        return f"{head}: FAILED: {sim.error_message(out.error[b], out.error_a[b], out.error_b[b])}.{extra}"
    fill = ""
    if action.type == "buy_prediction":
        fill = f", bought {out.filled_shares[b]:,.2f} shares for ${out.filled_usd[b]:,.2f}"
    elif action.type == "sell_prediction":
        fill = f", sold {out.filled_shares[b]:,.2f} shares for ${out.filled_usd[b]:,.2f} after fees"
    elif action.type == "open_perp":
        fill = f", posted ${out.filled_usd[b]:,.2f} margin"
    elif action.type == "close_perp":
        fill = f", ${out.filled_usd[b]:,.2f} returned to cash"
    return f"{head}: ok{fill} (fee ${out.fee[b]:,.2f}).{extra}"


@register_snapshot_class
class RLAIFTextEnv(RLAIFEnv):
    """The Babylon world with a prompt as observation and an LLM reply as action.

    Same world, config, rendering and episode end as `RLAIFEnv` (see its manual); only the faces
    differ.

    ## Observation Space
    `Text(max_length=16384, charset=PROMPT_CHARSET)`: one prompt per tick with sections for
    prediction markets (prices as cents), perps, portfolio, news, social feed, group chats and the
    last action's result. `env.unwrapped.system_prompt` (also `info["system_prompt"]` at reset)
    states the reply format with one example. `prompt_style="compact"` renders only what a decision
    needs (open markets, short perp lines, cash and equity, feed items about open markets and the
    perps) under a system prompt of at most 80 tokens; same headers and line grammar (docs/world.md).

    ## Action Space
    `Text(max_length=4096, min_length=0, charset=PROMPT_CHARSET)`: free reasoning in
    `<think>...</think>` followed by one JSON action, e.g.
    `{"type": "buy_prediction", "market": "market-3", "outcome": "YES", "amount": 250}`. Legacy
    layouts (`<thinking>`, `<decisions>` XML) and vocabularies (`buy_yes`, `marketId`, ...) parse
    too. `step` accepts any string, including ones outside the charset or longer than max_length:
    a reply without one executable action is a no-op with `format = -1`; it never raises.

    ## Rewards
    The numeric face's `pnl` and `risk`, plus the rule judge's scores of the reply against the prompt
    it answered (no model or network runs inside `step`):

    | component | range | coefficient (default) |
    |---|---|---|
    | `pnl` | pnl_delta / starting_cash (-1 more on bankruptcy) | 1 |
    | `risk` | <= 0, proportional to exposure added above 80% of equity | 1 |
    | `format` | [-1, 0]: 0 for a clean canonical reply, -1 without an executable action | 0.125 / num_ticks |
    | `reasoning` | [0, 1]: grounded, consistent, not gamed | 0.075 / num_ticks |

    An episode's return is therefore its PnL / starting cash, less risk, plus at most 0.075 for
    reasoning and minus at most 0.125 for format: form separates replies of equal trading value but
    cannot out-earn trading well. `form_scale` sets that budget; `reward_scheme="original"` gives
    Babylon's composite (+1 format income per clean reply, clipped PnL), whose return does not rank
    skill.

    ## Info
    The numeric face's keys, plus `parsed_action` (the canonical action dict or None),
    `format_errors` (list of str), `reasoning` (the reply's reasoning text), `judge` (the rule judge's
    score breakdown) and `layout`.

    ## Version History
    * v0: initial release.
    """

    _SNAPSHOT_FIELDS = (*RLAIFEnv._SNAPSHOT_FIELDS, "_view", "_prompt", "_numeric")
    _SNAPSHOT_ARRAYS = (*RLAIFEnv._SNAPSHOT_ARRAYS, "numeric")

    @classmethod
    def _encode_snapshot_fields(cls, snapshot: EnvSnapshot) -> tuple[dict[str, Any], list[tuple[str, np.ndarray]]]:
        """The numeric face's bookkeeping plus the prompt and the numeric observation (the view is not stored: it
        is a function of the world, rebuilt on decode)."""
        header, arrays = super()._encode_snapshot_fields(snapshot)
        header["prompt"] = snapshot.fields["_prompt"]
        arrays.append(("numeric", np.asarray(snapshot.fields["_numeric"], dtype=np.float32)))
        return header, arrays

    @classmethod
    def _decode_snapshot_fields(cls, reader: SnapshotReader) -> dict[str, Any]:
        """The numeric face's fields, the prompt (text any UTF-8 reader can hold), the numeric observation (within
        the observation space) and the view, rebuilt from the world."""
        out = super()._decode_snapshot_fields(reader)
        # No length bound but the snapshot's: a reply's quoted field can make a real prompt longer than the
        # observation space's max_length.
        prompt = reader.text(reader.fields.get("prompt"), "fields.prompt")
        numeric, layout = reader.arrays["numeric"], feature_layout(reader.params)
        if numeric.shape != layout.low.shape or numeric.dtype != np.float32 or not np.isfinite(numeric).all() \
                or (numeric < layout.low).any() or (numeric > layout.high).any():
            raise reader.fail(f"the numeric observation must be {len(layout.names)} float32 values within the "
                              "observation space's bounds")
        out.update(_view=build_view(reader.world, reader.params, 0), _prompt=prompt, _numeric=numeric)
        return out

    _compiled_reset: ClassVar[bool | None] = False
    """The text face resets one world between LLM calls: as Python (the same bits, at a cost no LLM call notices),
    so that its first start compiles the world step alone."""

    def __init__(
        self,
        config: RLAIFEnvConfig | Mapping[str, Any] | None = None,
        render_mode: str | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__(config, render_mode, **overrides)
        self.observation_space = spaces.Text(max_length=MAX_PROMPT_CHARS, min_length=1, charset=PROMPT_CHARSET)
        self.action_space = spaces.Text(max_length=MAX_REPLY_SAMPLE_CHARS, min_length=0, charset=PROMPT_CHARSET)
        self.system_prompt = text_system_prompt(self.config)
        # The compact system prompt makes <think> optional: a bare JSON action is canonical there.
        self.judge = RuleJudge(think_required=self.config.prompt_style != "compact")
        self._view: TickView | None = None
        self._prompt = ""
        self._numeric: np.ndarray | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start a new episode; returns the first prompt and `info["system_prompt"]`."""
        self._numeric, info = super().reset(seed=seed, options=options)
        self._view = build_view(self._core.state, self.params, 0)
        self._prompt = render_prompt(self._view, None, self.config.prompt_style)
        return self._prompt, {**info, "system_prompt": self.system_prompt}

    @property
    def numeric_observation(self) -> np.ndarray:
        """The numeric face's observation of the current tick (recorded beside the prompt)."""
        if self._numeric is None:
            raise ResetNeeded("call reset() before reading the observation")
        return self._numeric

    @property
    def prompt(self) -> str:
        """The prompt of the current tick (what reset/step last returned; after `set_state`, the restored
        episode's), for adapters that resume an env they did not step themselves."""
        if self._view is None:
            raise ResetNeeded("call reset() before reading the prompt")
        return self._prompt

    @property
    def view(self) -> TickView:
        """What the agent may see now, as data: the public state the prompt is rendered from, whatever the
        prompt style (the compact prompt shows part of it: `shown_view`)."""
        if self._view is None:
            raise ResetNeeded("call reset() before reading the view")
        return self._view

    @property
    def shown_view(self) -> TickView:
        """The part of `view` the current prompt shows (`encoding.prompt.shown_view` of the config's
        `prompt_style`; the whole view for "full"). The rule judge checks a reply's claims against it."""
        return shown_view(self.view, self.config.prompt_style)

    def step(self, action):
        """Parse the reply, execute its action, advance the world, and score the transition."""
        self._check_running()
        state = self._core.state
        parsed, row = decode_reply(check_reply(action), state, self.params, think_required=self.judge.think_required,
                                   fixed_stake=self.config.fixed_stake)
        verdict = self.judge.score(parsed, self.shown_view, self._prompt)
        res = self._transition(sim.ActionBatch.from_rows([row]),
                               (np.array([verdict.format]), np.array([verdict.reasoning])))
        self._numeric = res.observation[0]
        out = res.outcome
        self._feedback = step_feedback(out, 0, parsed)
        self._view = build_view(state, self.params, 0, out.equity_after[0])
        self._prompt = render_prompt(self._view, describe_outcome(parsed.action, parsed, out), self.config.prompt_style)
        info = {
            **self._info(res),
            "parsed_action": parsed.action.to_dict() if parsed.action else None,
            "format_errors": list(parsed.errors),
            "layout": parsed.layout,
            "reasoning": parsed.reasoning,
            "judge": verdict.details,
        }
        terminated, truncated = bool(res.terminated[0]), bool(res.truncated[0])
        return self._prompt, float(res.reward[0]), terminated, truncated, info


def text_system_prompt(config: RLAIFEnvConfig) -> str:
    """The text face's system prompt for `config`: its prompt style and its task rules (`fixed_stake`). The env,
    the decision points' messages and the evals all take it from here."""
    return system_prompt(world_params(config), config.prompt_style, fixed_stake=config.fixed_stake)


def warm_up(config: RLAIFEnvConfig | Mapping[str, Any] | None = None) -> float:
    """Reset an `RLAIF-Text-v0` of `config` and step it once (a wait), and return the seconds it took.

    What a first tick needs is then in this process: the compiled kernels loaded from their on-disk cache
    (about a second), or compiled on a machine's first run (minutes on 2 cores, announced on stderr). Servers
    call it before they accept connections and the rollout collector before its clock starts, so that a
    client's first message, a progress bar's ETA and a run's ticks/s never include the start-up.
    """
    started = time.perf_counter()
    env = RLAIFTextEnv(RLAIFEnvConfig.from_any(config))
    env.reset(seed=0)
    env.step('{"type": "wait"}')
    env.close()
    return time.perf_counter() - started
