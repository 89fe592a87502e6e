"""Custom preprocessing steps of the flights project (none yet: the demo uses built-in steps)."""
