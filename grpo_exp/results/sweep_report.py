"""The end of a multirun, as a Hydra callback (conf/config.yaml's hydra.callbacks): trials a launcher submitted
without waiting (SLURM's) are gathered first (each gets its final summary), then every trial's status, peak
and throughput is printed as one table. OOMs, predicted OOMs and failures of trials are results: the sweep
still exits 0 once every trial ran.
"""

from pathlib import Path

from hydra.experimental.callback import Callback

from grpo_exp.launching import launchers


class SweepReport(Callback):
    def on_multirun_end(self, config, **kwargs) -> None:
        # Hydra builds this callback for every run, single runs too: what only a sweep's end reads loads here
        from grpo_exp.results import compare

        launchers.gather()  # a parallel SLURM sweep: every trial's result before the table
        sweep_dir = Path(config.hydra.sweep.dir)
        compare.print_table(compare.load_local(sweep_dir), title=f"sweep {sweep_dir}")
