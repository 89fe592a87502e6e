"""Monitoring of published predictions: quality table, performance once labels arrive, report."""
