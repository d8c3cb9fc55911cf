"""``tfprof-agent run``: what the launcher decides and does around the job it starts."""
