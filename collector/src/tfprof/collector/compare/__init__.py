"""``diff``: what changed between two runs, per kernel, op, CUDA API function, collective
and step phase. ``diff_side`` opens a side (a trace file or a stored job, run or
capture), ``diff_steps`` picks its steps, ``diff_totals`` sums its records per name in
DuckDB, ``diff_rows`` sets the two sides' totals side by side."""
