"""Knowing a run before it starts: its time per step and in all, each process's peak memory,
its disk at the end and its GPU-hours, estimated from the model's shape, the job and this
machine's own measured speed; and, while it runs, the time left corrected from measured steps.

- `shape.py`: the model's shape (parameters, layers, hidden size, heads, vocabulary) from an
  HF folder's headers or a GGUF file's header (the bundled model before it is unpacked).
- `model.py`: pure arithmetic (FLOPs, bytes, seconds) from a `Job`, a `ModelShape` and the
  measured `Speeds`; no I/O, no clock.
- `calibrate.py`: the measurement: a few seconds of matmul, decode-like, LoRA and copy
  throughput in the run's dtypes, in a child process (the launcher never imports torch), cached
  per machine fingerprint (`rlcore.host.machine` plus library versions) only once a run starts
  after all its checks (a dry run or a refused start writes nothing).
- `answers.py`: how long a job's answers run (and its prompts), measured from a finished run's
  rollout archive and kept per job (model, environments, sampling) beside the calibration,
  read back through the bounded reader for the next estimate of the same job.
- `progress.py`: the time left from measured step times (the pace policy that
  benchmarks/eta_replay.py chose on recorded runs), and what run.json records.
- `memory.py`: the trainer's peak memory from the shape, which the pre-flight check and the
  trainer's `auto` activation checkpointing read too.
- `evals.py`: the arithmetic of an evaluation (`evals`): its server's start, each
  environment's rollouts, the server's memory, the results' disk.
- `report.py`: the estimate block a command prints, built from a config.

The standard library only outside rlcore; torch only inside the calibration's child.

Imports: rlcore.errors, rlcore.secrets, rlcore.files, rlcore.host, rlcore.processes,
rlcore.config, rlcore.reporting."""
