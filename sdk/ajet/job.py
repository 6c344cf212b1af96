"""`AgentJetJob`: the training configuration a client syncs to the swarm.

Field names and defaults follow the original AgentJet API; fields after `ppo_epochs` are this
project's additions for the trainer (sampling, KL, checkpoints). YAML round-trips: `dump_job_as_yaml`
writes every field, `build_job_from_yaml` overrides fields from a file (flat, or under an `ajet:` key).
"""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path
from typing import Any, Literal, Mapping, Optional, Sequence, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from ajet.errors import ConfigError
from ajet.replay_types import ReplaySource
from ajet.types import BatchMode

_LENGTH_FIELDS = ("max_prompt_length", "max_response_length", "max_model_len")

TRACKERS: dict[str, Optional[str]] = {
    "jsonl": None,
    "console": None,
    "file": None,
    "tensorboard": "tensorboard",
    "wandb": "wandb",
    "mlflow": "mlflow",
    "swanlab": "swanlab",
    "clearml": "clearml",
    "trackio": "trackio",
}
"""Loggers `AgentJetJob.logging` may name -> the Python module each needs (None: no extra package)."""


Overlong = Literal["keep", "mask", "zero_reward"]
"""How a turn the server's cap cut trains (`AgentJetJob.overlong`)."""


class AgentJetJob(BaseModel):
    """A training job. Unknown fields are refused, so a typo is an error, not a silent default."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    project_name: str = "ajet-swarm"
    """Project name (groups experiments); one folder name (no `/`, not `..`)."""
    experiment_name: str = "default"
    """Experiment name; the experiment folder is named after it (one folder name: no `/`, not `..`)."""
    experiment_dir: str = "auto"
    """Where checkpoints and logs go, on the training box: `auto` = `experiments/<project>/<experiment>` under the
    trainer's folder; a relative path (no `..`) lands under its `experiments/` too. An absolute path is refused at
    `sync_train_config` unless the proxy runs with `allow_absolute_experiment_dir` (the client's job must not decide
    where the server writes)."""
    n_gpu: int = Field(default=8, ge=0)
    """GPUs per node (scale-out backends); the embedded trainer uses at most one."""
    model: str = "builtin:tiny"
    """A local Hugging Face model folder, or `builtin:tiny`."""
    algorithm: Literal["grpo"] = "grpo"
    """The advantage estimator."""
    num_repeat: int = Field(default=4, ge=1)
    """Episodes per task (the GRPO group size)."""
    batch_size: int = Field(default=32, ge=1)
    """Tasks per training step."""
    swarm_mode_sample_collection_method: BatchMode = BatchMode.TASKS
    """When the rollout pool is full enough for a step."""
    max_env_worker: int = Field(default=128, ge=1)
    """Parallel agent workers a client should run (advisory)."""
    max_open_episodes: Optional[int] = Field(default=None, ge=1)
    """Admission: at most this many episodes open at once in the experiment; a `begin_episode` beyond it is 503
    `NotReady` with Retry-After (the SDK waits it out, as during an update) until one ends. On a swarm several
    experiments share, it keeps one from flooding the engines. None: no cap."""
    max_calls_in_flight: Optional[int] = Field(default=None, ge=1)
    """Admission: at most this many of the experiment's calls at the engines at once in the swarm (several proxies split
    it between them); more wait at the proxy, first come first, until one ends. On a swarm whose experiments share one
    engine it caps this one's share of the engine's batch, so an experiment whose agents fan out cannot take every row.
    None: no cap."""
    max_prompt_length: int = Field(default=3000, ge=1)
    """Longest prompt kept for training (tokens); longer sequences are truncated and counted."""
    max_response_length: int = Field(default=15000, ge=1)
    """Longest response kept for training (tokens, all turns of a sequence)."""
    max_response_length_in_one_turn: int = Field(default=4096, ge=1)
    """Generation cap of one LLM call (the server's: a client's larger `max_tokens` is cut to it, never refused).
    A turn it cuts where the client asked for no smaller limit is answered as a finished turn, so no agent
    stops on it, and is stored as `truncated`; `overlong` decides how it trains."""
    overlong: Overlong = "keep"
    """How a truncated turn trains (one the server's cap or the model's context cut short). `keep`: as any turn.
    `mask`: its tokens get no loss, while its episode's reward still counts in its GRPO group (DAPO's overlong
    filtering). `zero_reward`: its episode trains with reward 0.0, whatever the client gave. The step's metrics
    count truncated turns (`samples/truncated_calls`) either way."""
    max_model_len: int = Field(default=18000, ge=2)
    """Context length of the inference engine."""
    mini_batch_num: int = Field(default=1, ge=1)
    """Mini-batches per PPO epoch."""
    micro_batch_tokens: int = Field(default=8192, ge=1)
    """Padded tokens per forward/backward pass of an update (at least one sequence each): a mini-batch is split into
    micro-batches of at most this many and their gradients accumulated, the loss normalised over the whole
    mini-batch, so the update is the same at any value and only the peak memory changes (verl: its
    `ppo_max_token_len_per_gpu`, at least one whole sequence)."""
    lora_rank: int = Field(default=0, ge=0)
    """LoRA rank; 0 = full fine-tuning."""
    lora_alpha: int = Field(default=16, ge=1)
    """LoRA alpha."""
    lora_target_modules: Union[str, list[str]] = "all-linear"
    """LoRA target modules, or `all-linear`."""
    gpu_memory_utilization: float = Field(default=0.85, gt=0, le=1)
    """vLLM's memory share (scale-out engine)."""
    lr: float = Field(default=1e-6, gt=0)
    """Learning rate."""
    ppo_epochs: int = Field(default=1, ge=1)
    """Passes over each batch."""
    # --- original fields the seed scripts pass -------------------------------------------------
    ensure_new_experiment: bool = False
    """Start from the base model even if the experiment folder holds checkpoints."""
    logging: list[str] = Field(default_factory=lambda: ["jsonl"])
    """Experiment trackers for the step metrics: `jsonl` (`<experiment>/metrics.jsonl`, always written) and
    verl's trackers (`console`, `tensorboard`, `wandb`, `mlflow`, `swanlab`, `clearml`, `trackio`, `file`).
    A single name is accepted as the seed writes it (`logging="tensorboard"`)."""
    base_yaml_config: Optional[str] = None
    """A YAML file whose values override these fields at construction."""
    # --- trainer settings (this project) -------------------------------------------------------
    temperature: float = Field(default=1.0, ge=0)
    """Default sampling temperature of the engine (a request may set its own)."""
    clip_ratio: float = Field(default=0.2, gt=0)
    """PPO clip ratio."""
    clip_ratio_high: Optional[float] = Field(default=None, gt=0)
    """Upper PPO clip ratio (DAPO's clip-higher; verl's `clip_ratio_high`): a wider upper bound lets unlikely
    tokens with a positive advantage grow, against entropy collapse. None: `clip_ratio` both ways."""
    entropy_coeff: float = Field(default=0.0, ge=0)
    """Entropy bonus (verl's `actor.entropy_coeff`): the loss subtracts this times the mean token entropy, which keeps
    the policy exploring instead of settling on one answer per prompt. 0: off."""
    grad_clip: float = Field(default=1.0, gt=0)
    """Gradient norm clip."""
    tis_cap: Optional[float] = Field(default=None, gt=0)
    """Truncated importance sampling against the engine's logged log-probs: each token's policy loss is weighted
    by min(pi_trainer / pi_engine, tis_cap) (verl's rollout correction), correcting for an engine whose numbers
    differ from the trainer's (bf16 vLLM, other kernels). None: off; 2.0 is verl's usual cap."""
    max_staleness: int = Field(default=0, ge=0)
    """Asynchronous training: 0 (the default) is synchronous, each update stops rollouts (ROLLING_POST ->
    WEIGHT_SYNCING). k >= 1: episodes begin and call the LLM while the trainer updates (the state stays ROLLING,
    `get_engine_status().updating` says an update runs), new weights go live between engine batches, and a batch
    takes only episodes whose oldest call is at most k policy versions behind the policy being updated; older ones
    are dropped and counted (`stale`). The loss corrects for the lag with the logged behaviour log-probs
    (truncated importance sampling, cap `tis_cap`, 2.0 when unset). Embedded engine and backend only."""
    partial_rollouts: bool = False
    """Long answers never hold a step. Off (the default): a synchronous update waits for every open episode
    (ROLLING_POST) and for the engine's running batch. On: the update starts once the batch policy is met; open
    episodes go on into a later batch, an answer being generated stops at a token boundary and goes on under the
    new weights (each token's policy version and log-prob logged: `llm_calls.version_spans`), and calls made while
    the weights change are held by the engine, not refused. Tokens of older versions train with the behaviour
    correction (`leftovers`, `tis_cap`). Embedded backend and engine only."""
    leftovers: Literal["correct", "drop"] = "correct"
    """A synchronous job's (`max_staleness` 0) episodes that ended while a step drained but did not fit its batch
    are one policy version (or more) behind at the next step. `correct`: they train with truncated importance
    sampling against their logged log-probs (token-level, cap `tis_cap`, 2.0 when unset) for the steps that hold
    them; `drop`: they are dropped for good (kept in the store, flagged `stale: ...`). Counted either way in the
    step's metrics (`leftovers`, `dropped_stale`). `--backend verl` sets its rollout correction once per run, so
    with `correct` every step of the run has it (on-policy tokens weigh about 1)."""
    replay: Optional[ReplaySource] = None
    """Train on stored episodes instead of new ones (`ajet.replay_types`: a source experiment, a selection, a reward
    version): copied into this experiment's store with their exact ids, trained with the off-policy correction on.
    The replay experiment's job carries its lineage. Embedded backend only."""
    use_kl_loss: bool = False
    """Add verl's KL loss against the reference policy."""
    kl_loss_coef: float = Field(default=0.001, ge=0)
    """KL loss coefficient."""
    kl_loss_type: str = "low_var_kl"
    """verl's `kl_penalty` type."""
    loss_agg_mode: Literal["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                           "seq-mean-token-sum-norm"] = "token-mean"  # fmt: skip
    """How the policy loss over a batch's tokens becomes one number (verl's `agg_loss`, the same in both
    backends). `token-mean`: every trained token weighs the same, so an episode weighs by its trained tokens (a
    long multi-turn episode, or one split into several sequences, counts more); `seq-mean-token-mean`: every
    sequence weighs the same whatever its length; `seq-mean-token-sum`, `-norm`: sequences summed over their
    tokens, then averaged (`-norm` divides by the longest response). docs/training.md compares them."""
    save_freq: int = Field(default=10, ge=0)
    """Checkpoint every N steps (0 = only at stop)."""
    drain_timeout: float = Field(default=120.0, gt=0)
    """Seconds ROLLING_POST waits for open episodes before expiring them."""
    seed: int = 0
    """Seed for model creation and sampling defaults."""
    max_abs_reward: float = Field(default=1e6, gt=0)
    """`end_episode` refuses a reward whose magnitude exceeds this (one absurd reward must not wreck a step)."""
    mission_mix: dict[str, float] = Field(default_factory=dict)
    """The most share of each batch a mission's tasks may take (e.g. `{"math": 0.4, "coding": 0.6}`), enforced by
    the server: the batch policy takes no more, and `begin_episode` of a mission with its share in flight waits
    (503, Retry-After) until a step consumes it. Missions not named are not capped."""
    verl: dict[str, Any] = Field(default_factory=dict)
    """Overrides of verl's `ppo_trainer` config as dotted keys (e.g. `actor_rollout_ref.actor.optim.lr`), applied
    last by `--backend verl` (they win over the keys the job implies and the server's `--verl-overrides`). The
    job YAML's `verl:` section; nested mappings are flattened. The embedded backend ignores them (it says so)."""
    keep_call_bodies_steps: Optional[int] = Field(default=None, ge=0)
    """After each step, drop the request/response bodies of calls trained more than this many steps ago
    (token ids, logprobs, rewards and metrics stay; `ajet-proxy prune` does the same by hand). None keeps all."""
    token_history: Literal["exact", "rendered"] = "exact"
    """How a multi-turn episode's prompts are built. `exact` (token in, token out): when a call's messages are the
    previous call's messages, then the answer the proxy returned, then new messages, the engine gets the previous
    prompt + completion ids + the new messages' tokens only, so the model sees what it generated and the episode
    trains as one sequence; anything else is rendered whole and counted as a fallback. `rendered`: every call's
    messages go through the chat template (what the model sees is the template's re-rendering of its answers)."""

    @model_validator(mode="before")
    @classmethod
    def _apply_base_yaml(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("base_yaml_config"):
            data = {**_read_yaml_fields(data["base_yaml_config"]), **data}
        return _accept_backbone(data)

    @field_validator("project_name", "experiment_name")
    @classmethod
    def _folder_name(cls, value: str) -> str:
        if value in ("", ".", "..") or any(c in value for c in "/\\\x00"):
            raise ValueError(f"{value!r} is not one folder name (no '/', '\\', NUL; not '.' or '..')")
        return value

    @field_validator("experiment_dir")
    @classmethod
    def _no_parent(cls, value: str) -> str:
        if "\x00" in value or ".." in Path(value).parts:
            raise ValueError(f"{value!r}: an experiment folder may not climb out with '..' (nor hold NUL)")
        return value

    @field_validator("mission_mix")
    @classmethod
    def _shares(cls, value: dict[str, float]) -> dict[str, float]:
        for mission, share in value.items():
            if not 0 < share <= 1:
                raise ValueError(f"mission_mix[{mission!r}]: a share of a batch is in (0, 1], not {share}")
        return value

    @field_validator("verl", mode="before")
    @classmethod
    def _dotted_verl_keys(cls, value: Any) -> Any:
        return flatten_keys(value) if isinstance(value, dict) else value

    @field_validator("logging", mode="before")
    @classmethod
    def _logging_list(cls, value: Any) -> Any:
        names = [value] if isinstance(value, str) else value
        if isinstance(names, list):
            unknown = [n for n in names if n not in TRACKERS]
            if unknown:
                raise ValueError(f"unknown logger {unknown[0]!r}; known: {', '.join(TRACKERS)}")
        return names

    @model_validator(mode="after")
    def _check_lengths(self) -> "AgentJetJob":
        given = [f for f in _LENGTH_FIELDS if f in self.model_fields_set]
        if given and len(given) != len(_LENGTH_FIELDS):
            missing = sorted(set(_LENGTH_FIELDS) - set(given))
            raise ValueError(f"set the length fields together: {', '.join(_LENGTH_FIELDS)} (missing {missing})")
        if self.max_prompt_length + self.max_response_length > self.max_model_len:
            raise ValueError("max_prompt_length + max_response_length must be <= max_model_len")
        return self

    @model_validator(mode="after")
    def _check_replay(self) -> "AgentJetJob":
        if self.replay is not None and (self.max_staleness > 0 or self.leftovers == "drop"):
            raise ValueError(
                "replay trains stored episodes that another policy sampled: it needs max_staleness 0 and "
                "leftovers 'correct' (they would be dropped as stale, not corrected)"
            )
        train = self.replay.train if self.replay is not None else "grpo"
        group = {"sft": 1, "dpo": 2}.get(train)
        if group is not None and self.num_repeat != group:
            raise ValueError(f"replay with train={train!r} copies {group} episode(s) a group: num_repeat must be "
                             f"{group}")  # fmt: skip
        return self

    @property
    def uses_lora(self) -> bool:
        """Whether the job trains a LoRA adapter (`lora_rank > 0`) rather than every weight of the model."""
        return self.lora_rank > 0

    # ------------------------------------------------------------------ YAML
    def dump_job_as_yaml(self, path: Union[str, Path]) -> Path:
        """Write every field under `ajet:` and the verl overrides under `verl:` (dotted keys of verl's
        `ppo_trainer` config: edit or add one there and `build_job_from_yaml` carries it to `--backend verl`)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        wire = self.to_wire()
        path.write_text(
            yaml.safe_dump(
                {"ajet": {k: v for k, v in wire.items() if k != "verl"}, "verl": wire["verl"]}, sort_keys=False
            )
        )
        return path

    def build_job_from_yaml(self, path: Union[str, Path]) -> "AgentJetJob":
        """Override this job's fields with the values in `path`; returns self."""
        values = _read_yaml_fields(path)
        try:
            updated = self.model_validate({**self.to_wire(), **values})
        except ValidationError as exc:
            raise ConfigError(f"{path}: {exc}") from exc
        for name in type(self).model_fields:
            object.__setattr__(self, name, getattr(updated, name))
        self.model_fields_set.update(values)
        return self

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> "AgentJetJob":
        """A job sent by a client (`to_wire`), validated: its base YAML was merged in on the client's machine and is
        not read again here (the path may not exist where the job arrives). Unknown fields are refused."""
        rest = {k: v for k, v in data.items() if k != "base_yaml_config"}
        base = _OPTIONAL_PATH.validate_python(data.get("base_yaml_config"))
        return cls.model_validate(rest).model_copy(update={"base_yaml_config": base})

    @classmethod
    def from_stored(cls, data: Mapping[str, Any]) -> "AgentJetJob":
        """The job a store holds (`to_wire` of this or an earlier version): fields this version no longer has are
        dropped, then `from_wire`."""
        return cls.from_wire({k: v for k, v in data.items() if k in cls.model_fields})

    @classmethod
    def from_yaml(cls, path: Union[str, Path]) -> "AgentJetJob":
        """A job with defaults overridden by `path`."""
        return cls().build_job_from_yaml(path)

    # ------------------------------------------------------------------ wire
    def to_wire(self) -> dict[str, Any]:
        """The job as plain JSON-able data (what `sync_train_config` sends)."""
        return self.model_dump(mode="json")

    def fingerprint(self) -> str:
        """A short hash of the fields that define the training run."""
        data = json.dumps(self.to_wire(), sort_keys=True).encode()
        return hashlib.sha256(data).hexdigest()[:16]


_OPTIONAL_PATH: TypeAdapter[Optional[str]] = TypeAdapter(Optional[str])
"""Checks a `base_yaml_config` that is not read again (`from_wire`)."""


def _accept_backbone(data: dict[str, Any]) -> dict[str, Any]:
    """The seed passes `backbone="verl"`: accepted (verl's algorithms run in every backend), nothing else is."""
    if "backbone" not in data:
        return data
    data = dict(data)
    backbone = data.pop("backbone")
    if backbone not in (None, "verl"):
        raise ConfigError(f"backbone: only 'verl' is supported, not {backbone!r}")
    return data


YAML_SECTIONS = ("ajet", "verl", "verl_resolved")
"""Top-level sections of a job YAML: the job's fields, its verl overrides, and (written by the trainer, for
reference, ignored on reading) the verl keys the job implies."""


def flatten_keys(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys (`{"a": {"b": 1}}` -> `{"a.b": 1}`); dotted keys stay as they are."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten_keys(value, name + "."))
        else:
            out[name] = value
    return out


def unknown_key_error(where: str, key: str, known: Sequence[str], what: str) -> ConfigError:
    """An unknown key, named with its nearest valid spelling."""
    near = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return ConfigError(f"{where}: unknown {what} {key!r}{hint}")


def _read_yaml_fields(path: Union[str, Path]) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"job YAML not found: {p}")
    data = yaml.safe_load(p.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of job fields")
    if isinstance(data.get("ajet"), dict):
        for section in data:
            if section not in YAML_SECTIONS:
                raise unknown_key_error(str(p), section, YAML_SECTIONS, "section")
        fields = dict(data["ajet"])
        if data.get("verl"):
            if not isinstance(data["verl"], dict):
                raise ConfigError(f"{p}: verl: expected a mapping of verl config keys")
            fields["verl"] = {**flatten_keys(fields.get("verl") or {}), **flatten_keys(data["verl"])}
        data = fields
    for key in data:
        if key not in AgentJetJob.model_fields and key != "backbone":
            raise unknown_key_error(str(p), key, list(AgentJetJob.model_fields), "job field")
    return _accept_backbone(data)
