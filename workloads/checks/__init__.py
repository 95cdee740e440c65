"""Checkers: pure functions from a history (and the resource's final state) to a verdict, plus the stop rules of event-triggered cases."""
