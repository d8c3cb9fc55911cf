"""Training steps without a code change: the hook marks each step of PyTorch and Keras jobs.

- **PyTorch** (2.0 and later): a global optimizer-step post hook
  (``torch.optim.optimizer.register_optimizer_step_post_hook``, which every optimizer
  instance calls after its ``step``), registered when ``torch`` is imported. The end of
  one optimizer step is the start of the next training step. Jobs that step several
  optimizers per iteration (GANs, optimizer-in-backward) count the steps of the first
  optimizer instance seen only, so each iteration is one step.
- **Keras 3** (any backend): ``Model.make_train_function`` is wrapped when ``keras`` is
  imported, so that the train function it makes is wrapped in turn; each call of it
  (one batch, or ``steps_per_execution`` batches) is a step. ``fit`` and
  ``train_on_batch`` both go through it.

Every step is reported twice: ``boundary(t_ns)`` the moment it starts (capture by steps
opens and closes windows there) and ``step(number, start_ns, end_ns, thread, marker)``
once its extent is known (PyTorch: at the next optimizer step, so the first step, whose
start no hook sees, and the last, which never ends, are not recorded; Keras: when the
call returns). Nothing is done for a framework the job never imports; an API that is
missing is one ``warn`` line. Standard library only; nothing here imports a framework.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tfprof.agent.inprocess import clock, post_import

TORCH_MARKER = "torch.optim"
KERAS_MARKER = "keras"
_WRAPPED = "_tfprof_step_marked"

Boundary = Callable[[int], None]  # (start of a step, host realtime ns)
Step = Callable[[int, int, int, int, str], None]  # (number, start, end, thread, marker)
Warn = Callable[[str], None]


class StepCounter:
    """The process's step numbers: steps begun so far, across every model and optimizer.

    Its methods run inside the job's own calls (``optimizer.step``, the train function):
    a failure of ours is one ``warn`` line, never an exception in the job."""

    def __init__(self, boundary: Boundary, step: Step, warn: Warn) -> None:
        self._boundary = boundary
        self._step = step
        self._warn = warn
        self._lock = threading.Lock()
        self.count = 0  # steps begun so far: the number the next step gets
        self._open: tuple[int, int] | None = None  # PyTorch: (number, start) of the step running
        self._optimizer: weakref.ref[Any] | None = None

    def _failed(self, exc: BaseException) -> None:
        with contextlib.suppress(Exception):
            self._warn(f"a training step was not marked ({type(exc).__name__}: {exc})")

    def optimizer_stepped(self, optimizer: Any) -> None:
        """PyTorch's post hook: a step ended, the next one starts now."""
        try:
            self._optimizer_stepped(optimizer)
        except Exception as exc:
            self._failed(exc)

    def _optimizer_stepped(self, optimizer: Any) -> None:
        now = clock.now_ns()
        with self._lock:
            first = self._optimizer() if self._optimizer is not None else None
            if first is None:  # the first optimizer (or the first one is gone): count it
                self._optimizer = weakref.ref(optimizer)
            elif first is not optimizer:
                return  # another optimizer of the same iteration
            # The step that ends is the one the previous call opened (the first one,
            # step 0, began where no hook sees it); the next one starts now.
            self.count += 1
            ended, self._open = self._open, (self.count, now)
        self._boundary(now)
        if ended is not None:
            self._step(ended[0], ended[1], now, threading.get_native_id(), TORCH_MARKER)

    def call_started(self, steps: int) -> tuple[int, int]:
        """Keras: a train-function call of ``steps`` steps starts; (its number, now)."""
        now = clock.now_ns()
        with self._lock:
            number = self.count
            self.count += max(1, steps)
        try:
            self._boundary(now)
        except Exception as exc:
            self._failed(exc)
        return number, now

    def call_ended(self, number: int, start_ns: int) -> None:
        try:
            now = clock.now_ns()
            self._step(number, start_ns, now, threading.get_native_id(), KERAS_MARKER)
        except Exception as exc:
            self._failed(exc)


def watch_torch(counter: StepCounter, warn: Warn) -> None:
    """Register the optimizer-step hook once ``torch`` is imported (now, if it is)."""

    def on_import(torch: ModuleType) -> None:
        try:
            optimizer = __import__("torch.optim.optimizer", fromlist=["Optimizer"])
            register = getattr(optimizer, "register_optimizer_step_post_hook", None)
            if register is None:
                version = getattr(torch, "__version__", "unknown version")
                warn(f"PyTorch {version} has no global optimizer-step hook (it came with "
                     "2.0): its training steps are not marked")  # fmt: skip
                return
            register(lambda opt, args, kwargs: counter.optimizer_stepped(opt))
        except Exception as exc:
            warn(f"cannot mark PyTorch's training steps ({type(exc).__name__}: {exc})")

    post_import.when_imported("torch", on_import)


def _wrap_train_function(counter: StepCounter, model: Any) -> None:
    function = getattr(model, "train_function", None)
    if function is None or getattr(function, _WRAPPED, False):
        return

    def train_function(*args: Any, **kwargs: Any) -> Any:
        try:
            steps = int(getattr(model, "steps_per_execution", 1) or 1)
        except Exception:  # not a number: count the call as one step
            steps = 1
        number, start = counter.call_started(steps)
        try:
            return function(*args, **kwargs)
        finally:
            counter.call_ended(number, start)

    setattr(train_function, _WRAPPED, True)
    model.train_function = train_function


def watch_keras(counter: StepCounter, warn: Warn) -> None:
    """Wrap ``keras.Model.make_train_function`` once ``keras`` is imported."""

    def on_import(keras: ModuleType) -> None:
        try:
            model_class = getattr(keras, "Model", None)
            original = getattr(model_class, "make_train_function", None)
            if model_class is None or original is None:
                version = getattr(keras, "__version__", "unknown version")
                warn(f"Keras {version} has no Model.make_train_function: its training "
                     "steps are not marked")  # fmt: skip
                return
            if getattr(original, _WRAPPED, False):
                return

            def make_train_function(self: Any, *args: Any, **kwargs: Any) -> Any:
                made = original(self, *args, **kwargs)
                try:
                    _wrap_train_function(counter, self)
                except Exception as exc:  # the user's training goes on unmarked
                    warn(f"cannot mark Keras's training steps ({type(exc).__name__}: {exc})")
                    return made
                return self.train_function if made is not None else made

            setattr(make_train_function, _WRAPPED, True)
            model_class.make_train_function = make_train_function
        except Exception as exc:
            warn(f"cannot mark Keras's training steps ({type(exc).__name__}: {exc})")

    post_import.when_imported("keras", on_import)


def install(boundary: Boundary, step: Step, warn: Warn) -> StepCounter:
    """Mark the steps of PyTorch and Keras, whichever the job imports."""
    counter = StepCounter(boundary, step, warn)
    watch_torch(counter, warn)
    watch_keras(counter, warn)
    return counter
