"""Standalone pipeline: estimate → profile → plan → train on one machine, with a report."""
