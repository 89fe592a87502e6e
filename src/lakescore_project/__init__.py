"""The project's own code: preprocessing steps and scoring rules (edit these files)."""
