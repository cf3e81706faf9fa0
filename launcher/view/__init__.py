"""`rl view`: a local, read-only web app over run folders (launcher/commands/view.py starts it).

app.py holds the routes, library.py finds the runs under the folders named on the command line
and gives each an id, safe.py is the one way a file is reached, data.py reads a run (metrics,
status, configs, logs, checkpoints), archive.py its rollouts (`samples/step_<n>.parquet`) and
evaluations. Nothing here writes into a run, locks it or leaves a file in it."""
