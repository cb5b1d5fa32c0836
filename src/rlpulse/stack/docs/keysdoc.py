"""docs/reference/frameworks.md: the framework key maps of ``rlpulse.keys`` as Markdown tables.

A generator, kept out of the runtime module it documents (``rlpulse.keys`` is imported by
every trainer).
"""

from __future__ import annotations

from rlpulse import catalog, keys
from rlpulse.keys import Target

_DOC_INTRO = """\
# Framework key maps

Generated from `src/rlpulse/keys.py` (the tables) by `rlpulse/stack/docs/keysdoc.py`;
`tests/unit/test_keys.py` fails when this file is stale. `rlpulse.log(metrics)` maps every key of
the trainer's own dict through these tables; a key no table knows is kept as
`rl_unmapped_metric{{key="..."}}` (bounded). Each key was checked in the file named in *Verified in*
(the framework's repository and path), not taken from memory.

**Lookup order** (first hit wins): with `framework=` (from `metadata["framework"]`) that
framework's table first; then the exact keys of every table in the order
`{order}`, then their patterns; then the same with a wrapper prefix removed:
`train/` (HF and OpenRLHF W&B / TensorBoard callbacks) maps like the inner key, `eval/` and `eval_`
(HF evaluation) turn a reward, reward-component, success or episode-return key into
`rl_eval_score{{split="eval"}}` and leave every other evaluation key unmapped, so evaluation values
never overwrite training series. The LLM trainers come first, so without `framework=` a bare `kl`
is the KL to the reference policy (TRL, OpenRLHF), not OpenAI baselines' update KL, and SB3's exact
`train/entropy_loss` (minus the entropy) wins over OpenRLHF's `train/` + `entropy_loss`.

**Patterns**: `{{label}}` is one path segment captured as that label, `{{label+}}` one or more
segments (verl data sources such as `openai/gsm8k`), `{{*}}` one segment and `{{#}}` digits, not
captured. Captured values come from user data; the exporter bounds them.

**Unmapped on purpose** (*Metric* is —): a known key with no fitting catalog metric; it also stops
the search, so another table's pattern cannot claim it (SB3 `time/time_elapsed` is not a tinker
phase). Counters (`*_total`) are set from the trainer's cumulative values. SB3 Monitor CSV rows
(`r`, `l`, `t`) are episodes, not log keys: replay them through `observe_episodes`.

Extra tables: `tinker` (Thinking Machines' tinker-cookbook JSONL metrics, full and trimmed key
sets), `baselines` (OpenAI baselines `progress.csv` keys, including GAIL_PPO's), `rllib` (Tune's
`result.json` / `progress.csv`, learner stats under each layout RLlib has used), `deepspeed-chat`
(its step-3 console and TensorBoard names), `dopamine` (its runner's summaries), `classic`
(W&B-style classic-RL keys: with `framework="classic"` a bare `reward` is an episode's return and
`episode` an episode counter, never an LLM batch's reward or a sample count) and `generic`
(custom LLM trainers' `reward/<component>`, `policy/entropy`). `rlpulse replay` picks the table
from the log's format, or, for a JSONL dump, the table that knows most of its first row's keys
(`keys.likely_framework`).

**Your own keys** come first: `rlpulse.start(key_map=...)` / `Exporter(key_map=...)`, the
`keys:` section of `rlpulse.yaml`, or `rlpulse replay --key-map FILE` map a logged key to a
catalog metric name, to `{{metric: ..., labels: {{...}}, scale: ...}}`, to `null` (known, left
unmapped) or to `objective`: the run's **true objective** (a correctness or held-out score),
exported as `rl_eval_score{{benchmark="<key>", split="objective"}}`, which the reward-hacking
alert compares with the proxy reward. See docs/replay.md.
"""


def _target_text(target: Target | None, template: str) -> tuple[str, str]:
    if target is None:
        return "—", ""
    values = {k: f"<{k}>" for k in keys._compile(template).groupindex}
    values.update((k, f'"{v}"') for k, v in target.labels)
    labels = [f"{k}={values[k]}" for k in catalog.get(target.metric).labels]
    text = f"`{target.metric}" + ("{" + ", ".join(labels) + "}" if labels else "") + "`"
    transform = " ".join(
        [f"x {target.scale:g}"] * (target.scale != 1.0)
        + [f"+ {target.offset:g}"] * bool(target.offset)
    )
    return text, transform


def markdown() -> str:
    """docs/reference/frameworks.md: one table per framework, key → metric, transform, source,
    note."""
    lines = [_DOC_INTRO.format(order=" → ".join(keys.FRAMEWORKS))]
    for m in keys.MAPS:
        lines += ["", f"## {m.framework}", ""]
        lines += ["| Key | Metric | Transform | Verified in | Note |", "|---|---|---|---|---|"]
        for source in m.sources:
            for table in (source.exact, source.patterns):
                for key, target in table.items():
                    metric, transform = _target_text(
                        target, key if table is source.patterns else ""
                    )
                    note = source.notes.get(key, "")
                    cell = key.replace("|", "\\|")
                    lines.append(f"| `{cell}` | {metric} | {transform} | {source.where} | {note} |")
    return "\n".join(lines) + "\n"
