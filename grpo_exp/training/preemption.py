"""A stop request to a training rank (SIGTERM, SIGUSR1, SIGUSR2: SLURM preemption, `--signal` before a time limit,
torchrun's stop): before training starts it interrupts at once (nothing to save); during training it waits for the
step boundary, where every rank agrees to save and stop together (callbacks.SaveAndStop). No torch: the worker
installs it before torch loads, so a stop in those seconds is still recorded."""

import logging
import signal

log = logging.getLogger("grpo_exp")
PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


class Preemption:
    """A stop request: before training starts it interrupts at once (nothing to save); during
    training it waits for the step boundary, where every rank agrees to save and stop together."""

    def __init__(self):
        self.training = False
        self.signal_name: str | None = None

    def install(self) -> None:
        for sig in PREEMPTION_SIGNALS:
            signal.signal(sig, self._handle)

    def _handle(self, signum, _frame):
        # asked again (SLURM signals every process, torchrun forwards): already stopping
        if self.signal_name is not None:
            return
        self.signal_name = signal.Signals(signum).name
        if not self.training:  # nothing to save yet: stop now; the run can start again (resume, requeue)
            raise KeyboardInterrupt
        log.warning("%s: saving a checkpoint at the end of this step, then stopping", self.signal_name)
