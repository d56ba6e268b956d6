"""Batches of one fenced operation: the month start, the payment run.

What every batch repeats is here; an operation declares only what is its own (which items,
its words, how it runs a chunk):

- ``together(items, prepare)``: each item's call and steps (``prepare``; a refusal before
  the lease is that item's answer), committed together by ``hoa.fenced.run_together``;
  each one's result or refusal, in order.
- ``BatchKind``: the operation's declaration of how its answers are counted (which outcome
  kinds are settled and under which count, which are held elsewhere and tried again) and
  its sentences (the summary, and why it did not finish).
- ``Batch``: what the batch came to (counts, items still held elsewhere, stopped because the
  lock service is down), its summary and its answer in the table (``hoa.answers.table``:
  exit 0, 1 or 75). ``take`` counts outcomes as they come; ``wait_for_others`` tries the
  items another host held again, until ``wait`` has passed since the batch started.
"""

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.utils.translation import gettext as _

from hoa.answers.refusals import Refusal
from hoa.answers.table import ANSWERS, Answer
from hoa.fenced import run_together
from locking import Outcome

# The two counts every batch has besides its own.
HELD = "held"  # another holder has it now: tried again until the deadline
FAILED = "failed"  # refused for good in this run: a line on stderr


def together(items: Sequence, prepare: Callable[[Any], tuple], run=run_together) -> list:
    """Each item's ``prepare(item)`` (its call and steps; a ``Refusal`` raised there is its
    answer, made before any lease) run by ``run`` (``run_together``: each under its own
    lease, committed together); return each item's result or refusal, in order."""
    answers: list = [None] * len(items)
    calls, places = [], []
    for place, item in enumerate(items):
        try:
            calls.append(prepare(item))
        except Refusal as refusal:
            answers[place] = refusal
        else:
            places.append(place)
    for place, answer in zip(places, run(calls), strict=True):
        answers[place] = answer
    return answers


def chunks(items: Sequence, size: int) -> list:
    """``items`` in consecutive slices of ``size``."""
    return [items[start : start + size] for start in range(0, len(items), size)]


@dataclass(frozen=True)
class ItemOutcome:
    """One item's answer in a batch, small enough to come back from a worker process."""

    key: Any  # the item's id: what ``Batch.held`` keeps and the operation tries again
    name: str  # whose it is, as its line names it (the association's slug)
    kind: Outcome  # the refusal's own, or FAILED for one that names none
    message: str
    count: str  # which count it adds to: one of its kind's, HELD or FAILED
    again: Any = None  # what trying it again needs besides its key (the month start's month)
    stops: bool = False  # the lock service is down: the batch stops here

    @property
    def held_elsewhere(self) -> bool:
        return self.count == HELD

    @property
    def failed(self) -> bool:
        return self.count == FAILED


@dataclass(frozen=True)
class BatchKind:
    """An operation's batch, declared: ``settled`` names the count of each outcome kind
    that settles an item (in the summary's words), ``retried`` the kinds another holder
    has (tried again); any other kind failed. Its sentences: ``summary`` (a lazy
    ``ngettext`` on ``total``, with a placeholder per count and per fact), ``failed`` (on
    ``count``) and ``held`` (on ``count``, with ``wait`` in seconds)."""

    settled: dict[Outcome, str]
    retried: tuple[Outcome, ...]
    summary: Any
    failed: Any
    held: Any

    def outcome(self, key, name: str, answer, *, again=None, count: str = "") -> ItemOutcome:
        """An item's result or refusal (``answer``) as the batch counts it; ``count``
        overrides the count its kind says."""
        kind = answer.outcome or Outcome.FAILED
        stops = isinstance(answer, Refusal) and answer.answer is Answer.UNAVAILABLE
        if not count:
            count = self.settled.get(kind) or (HELD if kind in self.retried else FAILED)
        return ItemOutcome(key, name, kind, str(answer), count, again, stops)


@dataclass
class Batch:
    """What a batch came to: its counts, the items still held elsewhere (key -> what
    trying again needs), or stopped because the lock service is down (``unavailable``)."""

    kind: BatchKind
    total: int
    wait: timedelta
    facts: dict = field(default_factory=dict)  # the summary's other placeholders
    counts: Counter = field(default_factory=Counter)
    held: dict = field(default_factory=dict)
    unavailable: str = ""  # why the batch stopped
    deadline: float = field(init=False)

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.wait.total_seconds()

    @property
    def failed(self) -> int:
        return self.counts[FAILED]

    @property
    def answer(self) -> Answer:
        """Stopped (the lock service is down), some failed, some still held elsewhere at
        the deadline, or done."""
        if self.unavailable:
            return Answer.UNAVAILABLE
        if self.failed:
            return Answer.PARTLY_FAILED
        return Answer.RETRY if self.held else Answer.DONE

    @property
    def exit_code(self) -> int:
        return ANSWERS[self.answer].exit_code

    @property
    def summary(self) -> str:
        values = Counter(self.counts)  # a count none came to is 0
        for name, value in {**self.facts, "total": self.total}.items():
            values[name] = value
        line = self.kind.summary % values
        if self.held:
            line += _(", %(count)d unfinished") % {"count": len(self.held)}
        return line + "."

    @property
    def message(self) -> str:
        """Why the batch did not finish (``answer`` is not ``DONE``); else its summary."""
        if self.unavailable:
            return self.unavailable
        if self.failed:
            return self.kind.failed % {"count": self.failed}
        if self.held:
            return self.kind.held % {"count": len(self.held), "wait": self.wait.total_seconds()}
        return self.summary

    def take(self, outcomes: Iterable[ItemOutcome], on_outcome=None) -> None:
        """Count ``outcomes`` as they come (``on_outcome(outcome, batch)`` hears each),
        until one says the lock service is down."""
        for outcome in outcomes:
            if outcome.stops:
                self.unavailable = outcome.message
                return
            self.held.pop(outcome.key, None)
            if outcome.held_elsewhere:
                self.held[outcome.key] = outcome.again
            else:
                self.counts[outcome.count] += 1
            if on_outcome is not None:
                on_outcome(outcome, self)

    def wait_for_others(
        self, again: Callable[[dict], Iterator[ItemOutcome]], on_outcome=None
    ) -> None:
        """Try the items held elsewhere again (``again(held)``: the operation confirms or
        runs them), at once and then each second until the deadline."""
        while self.held and not self.unavailable:
            self.take(again(dict(self.held)), on_outcome)
            if not self.held or self.unavailable or time.monotonic() >= self.deadline:
                return
            time.sleep(min(1.0, max(self.deadline - time.monotonic(), 0)))
