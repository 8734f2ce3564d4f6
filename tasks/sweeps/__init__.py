"""Sweeps: many training runs as one folder that knows its state, run on a launcher.

``zoo compare``, ``zoo ablate`` and ``zoo cv`` are sweeps: seeds × variants (× folds) of ordinary training runs.
This package runs them:

* :mod:`tasks.sweeps.plan`: what a run is (:class:`~tasks.sweeps.plan.RunSpec`: task, row label, full config) and
  its folder's name — label, seed, fold and a hash of the config, so a changed config is a new run, never a reuse;
  sweep files (TOML or JSON) that ``zoo sweep FILE`` runs or resumes.
* :mod:`tasks.sweeps.state`: ``sweep.json``, every run with its state (pending, running, done, failed with its
  log's tail, pre-empted), and what a run folder on disk says (done, resumable, new).
* :mod:`tasks.sweeps.process`: one run in a process of its own, ``zoo train TASK --config RUN/config.json --out
  RUN [--resume]`` (resuming from ``last.pt`` when there is one; exit status
  :data:`~tasks.engine.trainer.REQUEUE_EXIT` when a stop signal pre-empted it), its output in ``RUN/train.log``.
* :mod:`tasks.sweeps.launchers`: where runs execute — ``serial`` (in this process, today's behaviour), ``local``
  (N worker processes on this machine, the cores divided between them), ``ray`` (one Ray task per run, on a
  running cluster or a local one), ``submitit`` (SLURM jobs, or submitit's local executor without SLURM).
* :mod:`tasks.sweeps.worker`: the local launcher's reused worker processes (``python -m tasks.cli.worker``), each
  training run after run with ``zoo train``'s own code, so a sweep pays torch's start-up once per worker.
* :mod:`tasks.sweeps.driver`: :func:`~tasks.sweeps.driver.run_sweep` keeps the launcher busy, reuses finished runs,
  requeues pre-empted ones, retries failed ones (``--retry N``), prints one line per state change with an overall
  count and an ETA, and lists what failed at the end.

A run's numbers do not depend on the launcher: the same config trains the same weights, bit for bit on the CPU,
in this process, in a worker process or in a Ray task (given the same ``num_threads``).
"""
