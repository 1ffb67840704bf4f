"""The PowerAwareTrainingJob operator (kopf): handlers, reconcile logic, manifests, worker.

Not a top-level `operator` package: that name would shadow the standard library.
"""
