"""A wall-clock budget for sentence-transformers' ``CrossEncoderTrainer``.

Imported only when training (it needs the ``train`` extra): :class:`TimeBudget` stops the
run after the step that crosses the budget and anneals the learning rate towards it;
:class:`BudgetTrainer` uses that schedule and counts the pairs it trains on;
:class:`BudgetSTTrainer` is the bi-encoder's trainer on the same schedule.
"""

from __future__ import annotations

import time
from typing import Any

from sentence_transformers import SentenceTransformerTrainer
from sentence_transformers.cross_encoder import CrossEncoderTrainer
from torch.optim.lr_scheduler import LambdaLR
from transformers import PrinterCallback, ProgressCallback, TrainerCallback


def lr_factor(progress: float, warmup: float) -> float:
    """Linear warm-up then linear decay to 0 over ``progress`` in [0, 1]."""
    if progress < warmup:
        return max(progress / warmup, 0.01)
    return max(0.0, (1.0 - progress) / (1.0 - warmup))


class TimeBudget(TrainerCallback):
    """Stops training after the step that crosses ``budget_s`` (counted from ``start``, a
    ``time.perf_counter()`` value); records the loss of every step and what stopped the run."""

    def __init__(self, start: float, budget_s: float, warmup: float) -> None:
        self.start, self.budget_s, self.warmup = start, budget_s, warmup
        self.losses: list[float] = []
        self.pairs = 0
        self.stopped_by = "epochs"

    def progress(self, step: int, total: int) -> float:
        """How far the run is: by steps or by the clock, whichever is further."""
        return max(step / max(total, 1), (time.perf_counter() - self.start) / self.budget_s)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if time.perf_counter() - self.start >= self.budget_s:
            self.stopped_by = "time budget"
            control.should_training_stop = True

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None,
               **kwargs: Any) -> None:
        if logs and "loss" in logs:
            self.losses.append(float(logs["loss"]))


class _LossOnBar(ProgressCallback):
    """The library's progress bar, with the loss on it rather than a printed dict per step."""

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None,
               **kwargs: Any) -> None:
        if self.training_bar is not None and logs and "loss" in logs:
            self.training_bar.set_postfix(loss=f"{logs['loss']:.3f}")


class BudgetSchedule:
    """Mixin for a transformers ``Trainer``: stopped by a :class:`TimeBudget`, its learning
    rate follows :func:`lr_factor` of the budget's progress, and it prints nothing but its
    bar (used by the cross-encoder and the bi-encoder trainers)."""

    def __init__(self, *args: Any, budget: TimeBudget, **kwargs: Any) -> None:
        super().__init__(*args, callbacks=[budget], **kwargs)
        self.budget = budget
        self.remove_callback(PrinterCallback)
        if not self.args.disable_tqdm:
            self.remove_callback(ProgressCallback)
            self.add_callback(_LossOnBar)

    def create_scheduler(self, num_training_steps: int, optimizer: Any = None) -> Any:
        if self.lr_scheduler is None:
            warmup = self.budget.warmup
            self.lr_scheduler = LambdaLR(
                optimizer or self.optimizer,
                lambda step: lr_factor(self.budget.progress(step, num_training_steps), warmup))
        return self.lr_scheduler


class BudgetTrainer(BudgetSchedule, CrossEncoderTrainer):
    """A ``CrossEncoderTrainer`` on the budget's schedule that counts the pairs it trains on."""

    def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any
                     ) -> Any:
        docs = inputs.get("docs", inputs.get("doc", []))  # listwise: lists of documents
        self.budget.pairs += sum(len(d) if isinstance(d, list) else 1 for d in docs)
        return super().compute_loss(model, inputs, *args, **kwargs)


class BudgetSTTrainer(BudgetSchedule, SentenceTransformerTrainer):
    """A ``SentenceTransformerTrainer`` on the budget's schedule."""
