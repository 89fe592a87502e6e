"""Guarded publication: ``plan`` decides (pure), one writer per engine commits, receipts record."""
